"""Runnable claims: what each trains (configs, overrides, seeds) and how a run is scored.

A recipe names the runs a claim compares (`RunSpec`: a config, its overrides, a seed, and whether the run is
the claim's model or its baseline) and scores one run's workdir (`evaluate`, partial or finished). Its
`comparison` says which number of the scores is the model's and which the baseline's, and which way is better:
`tgjax.reproduce.verdict.judge` turns those into the verdict. Several baselines are baseline runs of several
`group`s (one group per baseline model, its seeds): the model is judged against the group that scores best.
A claim made on several settings at once (Ordered Memory's systematicity splits A / B / C) has `parts`: each
run belongs to one (`RunSpec.part`), each part is judged on its own runs, and the claim's verdict is the
parts' verdicts combined (`tgjax.reproduce.verdict.combine`).
`tiny=True` gives the smallest runs that exercise the same path (the tests).

A claim can have a recipe at each of two scales (`SCALES`): "cpu", runs sized for a few hours of two CPU cores
against same-budget baselines, and "paper", the paper's own recipe, an accelerator's work spread over budgeted
calls. `recipes()` gives each claim's default (its CPU-scale recipe where it has one), `recipe_for` a named scale.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from pathlib import Path

# "cpu": sized for a few hours of two CPU cores, against same-budget baselines; "paper": the paper's own recipe (its
# model size, data and steps), an accelerator's work that continues from call to call.
SCALES = ("cpu", "paper")


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run of a recipe."""

    name: str  # its workdir's name inside the claim's work folder
    role: str  # "model" or "baseline"
    config: str  # `--config` as `tgjax train` takes it
    overrides: tuple[str, ...]  # "a.b=v"
    seed: int
    group: str = ""  # a baseline's name, when a claim compares with several (its runs are that baseline's seeds)
    part: str = ""  # the part of the claim this run belongs to, when the recipe has `parts`

    def command(self, workdir: str | Path) -> str:
        """The `tgjax train` command that trains (or resumes) this run by hand."""
        parts = ["tgjax", "train", "--config", self.config, *(f"--config.{o}" for o in self.overrides),
                 "--workdir", str(workdir)]
        return " ".join(shlex.quote(p) for p in parts)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Which score is the model's and which the baseline's (both from `evaluate`), and the paper's number."""

    model_metric: str
    baseline_metric: str
    label: str  # what the numbers are, for the printed row ("test accuracy, %")
    higher_is_better: bool = True
    paper: float | None = None  # the paper's number for the model's metric, where it is comparable
    tolerance: float = 0.0  # how close to `paper` counts as reproduced
    finished_only: bool = False  # judge only runs that reached their last step (the test is scored at the end)
    # A number measured beside each model run and reported, not judged (the majority class beside trained baselines).
    reference_metric: str | None = None
    reference_label: str = ""
    # Baseline groups measured by `model_metric`, as the model is, and shown beside it without being judged (a
    # same-budget baseline model where the paper's claim is against another baseline).
    beside_groups: tuple[str, ...] = ()
    # A claim with parts: the paper's number of each part ((part, number), ...), where the paper gives one.
    paper_by_part: tuple[tuple[str, float], ...] = ()

    def for_part(self, part: str, *, test_set: bool = False) -> Comparison:
        """The comparison one part of the claim is judged by: its own paper number, the part in the label; a part
        that is a test set (`Recipe.parts_are_test_sets`) reads each metric as "METRIC/PART"."""
        named = (lambda metric: metric and f"{metric}/{part}") if test_set else (lambda metric: metric)
        return dataclasses.replace(self, label=f"{self.label}, {part}", paper=dict(self.paper_by_part).get(part),
                                   paper_by_part=(), model_metric=named(self.model_metric),
                                   baseline_metric=named(self.baseline_metric),
                                   reference_metric=named(self.reference_metric))


@dataclasses.dataclass(frozen=True)
class Recipe:
    claim_id: str
    description: str  # one line: what it trains and compares
    runs: Callable[[bool], list[RunSpec]]  # tiny -> the runs
    evaluate: Callable[[RunSpec, Path, bool, bool], dict]  # (run, workdir, finished, tiny) -> scores
    comparison: Comparison
    eval_reserve_s: Callable[[bool], float]  # seconds to keep for scoring one run (tiny or not)
    calibration_steps: Callable[[bool], int]  # the first chunk of a run, before its speed is known
    baseline_eval_reserve_s: Callable[[bool], float] | None = None  # for a baseline run, if not eval_reserve_s
    # True when a run is scored by the training chunk that reaches its last step (the trainer tests its best
    # parameters there) and `evaluate` only reads what that chunk wrote: then only a chunk that would finish a
    # run needs that run's reserve, and a call too short to finish a run spends its whole budget on training.
    scored_when_finishing: bool = False
    parts: tuple[str, ...] = ()  # the claim's parts, judged one by one (every run's `part` is one of them)
    # True when every run is scored on every part (a part is a test set, Pushdown's Table 1's five): `evaluate`
    # gives a part's number as "METRIC/PART", and each part judges all the runs by it.
    parts_are_test_sets: bool = False
    # True for runs too large to pack many at once and scoring too slow to repeat every call (accelerator-scale
    # recipes): the runs train one after another, each to its end, instead of round-robin; a run is scored right
    # after the chunk that finishes it (that chunk keeps the time for it), and an unfinished run is not scored. A
    # pack then holds one unfinished run's checkpoints: a finished run's scores are kept in the state, and its
    # checkpoints left out of the pack.
    one_run_at_a_time: bool = False
    scale: str = "cpu"  # one of SCALES

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"{self.claim_id}: scale {self.scale!r} is not one of {', '.join(SCALES)}")

    @property
    def scores_at_finish(self) -> bool:
        """Whether a run's scoring is done (and its reserve kept) by the chunk that finishes it."""
        return self.scored_when_finishing or self.one_run_at_a_time

    def reserve_s(self, spec: RunSpec, tiny: bool) -> float:
        """Seconds to keep for scoring `spec`'s run."""
        return self.reserve_s_of_role(spec.role, tiny)

    def reserve_s_of_role(self, role: str, tiny: bool) -> float:
        """Seconds to keep for scoring a run of `role` ("model" or "baseline")."""
        if role == "baseline" and self.baseline_eval_reserve_s is not None:
            return self.baseline_eval_reserve_s(tiny)
        return self.eval_reserve_s(tiny)


def all_recipes() -> list[Recipe]:
    """Every recipe, at every scale (imported here, not at module import: `tgjax --help` stays fast)."""
    from tgjax.reproduce.recipes import (
        om_listops,
        om_logic_length,
        om_systematicity,
        onlstm_parse,
        onlstm_syntax,
        pushdown_dyck,
        stack_lm,
        tg_parse,
        tg_ppl,
        udgn_uas,
    )

    return [om_listops.RECIPE, om_listops.PAPER_RECIPE, om_logic_length.RECIPE, om_logic_length.PAPER_RECIPE,
            om_systematicity.RECIPE, om_systematicity.PAPER_RECIPE,
            onlstm_parse.RECIPE, onlstm_syntax.RECIPE, pushdown_dyck.RECIPE,
            stack_lm.RECIPE, tg_parse.RECIPE, tg_ppl.RECIPE, udgn_uas.RECIPE]


def scales_of(claim_id: str) -> list[str]:
    """The scales `claim_id` has a recipe at, in `SCALES` order (empty: not runnable)."""
    found = {r.scale for r in all_recipes() if r.claim_id == claim_id}
    return [scale for scale in SCALES if scale in found]


def recipe_for(claim_id: str, scale: str | None = None) -> Recipe:
    """`claim_id`'s recipe at `scale` (None: its default, the first of `scales_of`); a `KeyError` whose message is
    one line when there is none."""
    scales = scales_of(claim_id)
    if not scales:
        raise KeyError(f"{claim_id} has no recipe")
    scale = scales[0] if scale is None else scale
    if scale not in scales:
        raise KeyError(f"{claim_id} has no {scale}-scale recipe; its scale{'s' if len(scales) > 1 else ''}: "
                       + ", ".join(scales))
    return next(r for r in all_recipes() if r.claim_id == claim_id and r.scale == scale)


def recipes() -> dict[str, Recipe]:
    """Every runnable claim's default recipe by id: its CPU-scale one where it has one, else its paper-scale one."""
    return {claim_id: recipe_for(claim_id) for claim_id in dict.fromkeys(r.claim_id for r in all_recipes())}
