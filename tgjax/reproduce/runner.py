"""Training a claim's runs within a time budget, in resumable chunks, then scoring what they reached.

The runs advance round-robin, so that a budget that ends early leaves them at similar steps (or, for a recipe
at accelerator scale, `Recipe.one_run_at_a_time`, each to its end before the next starts). Each chunk is
one `Trainer.run(stop_after_step=...)`: the trainer saves a checkpoint (parameters, optimiser, data position)
where it stops, and the next chunk (here, or after the work folder was packed and unpacked elsewhere) resumes
from it. Chunk ends fall on logging steps, so a resumed run writes the same metrics.jsonl records as an
uninterrupted one. A run's first chunk in an invocation is a short calibration (setup and compilation
included); later chunks are sized from its measured speed to fill the budget, less what scoring needs (for
a recipe that scores a run in the chunk that finishes it, kept only by a chunk that would finish its run).
The chunks share one process: the compiled programs (`compilation_cache`) and the data a task keeps per
process (Ordered Memory's logic files and ListOps trees, `tgjax.data.classification_corpus`) are made once.
At least one chunk runs per invocation, so every call moves the claim forward. A finished run is scored once:
its scores are kept in the state, and a pack leaves its checkpoints out (`packed_out`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from tgjax.progress import Progress, format_duration
from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.verdict import combine, judge, spread

STATE_FILE = "state.json"
RUNS_DIR = "runs"
PACK_RESERVE_S = 5.0  # tar + gzip of a few MiB


class StateMismatch(ValueError):
    """A work folder (or pack) made for another claim or scale; the message is one line."""


@dataclasses.dataclass
class RunProgress:
    """How far one run has got, kept in the work folder's state.json."""

    step: int = 0
    num_steps: int | None = None
    # The config and overrides the run was started with: a recipe that changed since must not resume its
    # checkpoints under another model (None in work folders written before it was kept).
    trains: list[str] | None = None
    finished: bool = False
    train_seconds: float = 0.0
    chunks: list[list[int]] = dataclasses.field(default_factory=list)  # [first step, last step] of every chunk
    # A finished run's scores, once scored: kept, so that it is never scored again and its checkpoints need not be
    # packed (`packed_out`).
    scores: dict | None = None


def packed_scale(saved: dict, fallback: str | None = None) -> str | None:
    """The scale a state.json, a pack's meta or a record was written at; one written before recipes had scales is
    at its claim's default scale (then its only one), or `fallback` for a claim with no recipe here."""
    if "scale" in saved:
        return saved["scale"]
    from tgjax.reproduce.recipes import scales_of

    scales = scales_of(str(saved.get("claim")))
    return scales[0] if scales else fallback


def describe(claim: str | None, scale: str | None, tiny: bool) -> str:
    """"CLAIM at SCALE scale[ --tiny]": how a mismatch message names a state, a pack and a call."""
    return f"{claim} at {scale} scale{' --tiny' if tiny else ''}"


@dataclasses.dataclass
class ClaimState:
    claim: str
    tiny: bool
    runs: dict[str, RunProgress]
    invocations: int = 0
    scale: str = "cpu"
    # This call was stopped by SIGTERM (a preemption): the trainer saved where it stopped, and nothing more
    # should run before the state is packed. Not saved: the next call starts afresh.
    interrupted: bool = dataclasses.field(default=False, compare=False)

    @classmethod
    def load_or_new(cls, work: Path, recipe: Recipe, tiny: bool, specs: list[RunSpec]) -> ClaimState:
        path = work / STATE_FILE
        if not path.exists():
            return cls(recipe.claim_id, tiny, {s.name: RunProgress(trains=_trains(s)) for s in specs},
                       scale=recipe.scale)
        saved = _read_state(path)
        held = describe(saved["claim"], packed_scale(saved, fallback=recipe.scale), saved["tiny"])
        wanted = describe(recipe.claim_id, recipe.scale, tiny)
        if held != wanted:
            raise StateMismatch(f"{path} holds {held}, not {wanted}")
        try:
            runs = {name: RunProgress(**fields) for name, fields in saved["runs"].items()}
        except TypeError as error:  # a field this version does not know, or one missing
            raise StateMismatch(f"{path}: a run's entry does not read ({error}); expected a state.json written "
                                "by tgjax reproduce") from None
        for spec in specs:
            run = runs.setdefault(spec.name, RunProgress(trains=_trains(spec)))
            if run.trains is not None and run.trains != _trains(spec):
                raise StateMismatch(f"{path}: run {spec.name} was started as {' '.join(run.trains)}, but the "
                                    f"recipe now trains {' '.join(_trains(spec))}; start a new --output without "
                                    "--resume-from")
        return cls(saved["claim"], saved["tiny"], runs, saved.get("invocations", 0), scale=recipe.scale)

    def save(self, work: Path) -> None:
        data = {"claim": self.claim, "scale": self.scale, "tiny": self.tiny, "invocations": self.invocations,
                "runs": {name: dataclasses.asdict(p) for name, p in self.runs.items()}}
        temporary = work / f".{STATE_FILE}.partial"
        temporary.write_text(json.dumps(data, indent=2) + "\n")
        temporary.replace(work / STATE_FILE)


def _read_state(path: Path) -> dict:
    """A work folder's state.json, checked for what `ClaimState` reads; else `StateMismatch` naming the file."""
    expected = 'expected the JSON object {"claim", "tiny", "runs": {...}} that tgjax reproduce writes'
    try:
        saved = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StateMismatch(f"{path}: unreadable ({error}); {expected}") from None
    if not isinstance(saved, dict) or not {"claim", "tiny", "runs"} <= set(saved) or \
            not isinstance(saved["runs"], dict):
        raise StateMismatch(f"{path}: {expected}")
    return saved


def _trains(spec: RunSpec) -> list[str]:
    return [spec.config, *spec.overrides]


def run_workdir(work: Path, spec: RunSpec) -> Path:
    return work / RUNS_DIR / spec.name


def chunk_stop(step: int, steps: int, align: int, num_steps: int, *, may_finish: bool = True) -> int | None:
    """The step a chunk of about `steps` from `step` stops after: `step + steps` rounded down to a multiple of
    `align`, at least the next one; when the chunk may not finish the run, the last such step before `num_steps`
    (None when there is none after `step`)."""
    stop = (step + max(steps, 1)) // align * align
    stop = stop if stop > step else (step // align + 1) * align
    if not may_finish and stop >= num_steps:
        stop = (num_steps - 1) // align * align
        return stop if stop > step else None
    return stop


def _train_chunk(spec: RunSpec, workdir: Path, steps: int, *, may_finish: bool, stream: TextIO, quiet: bool):
    """One chunk of one run: (steps in the whole run, TrainResult), or (steps in the whole run, None) when the run
    may not finish in this chunk and no logging step is left short of its last one."""
    from tgjax.train.config import load_config
    from tgjax.train.loop import Trainer

    config = load_config(spec.config, list(spec.overrides))
    trainer = Trainer(config, workdir, stream=stream, quiet=quiet)
    try:
        num_steps = trainer.task.num_steps
        step = trainer.store.latest_step() or 0
        stop = chunk_stop(step, steps, int(config.logging.interval_steps), num_steps, may_finish=may_finish)
        if stop is None:
            return num_steps, None
        result = trainer.run(stop_after_step=stop)
    finally:
        trainer.close()
    return num_steps, result


def _logging_interval(spec: RunSpec) -> int:
    from tgjax.train.config import load_config

    return int(load_config(spec.config, list(spec.overrides)).logging.interval_steps)


def _planned_steps(spec: RunSpec) -> int:
    """The steps a run's config plans (`training.num_steps`), or 0 where its task sets them (from epochs)."""
    from tgjax.train.config import load_config

    return int(load_config(spec.config, list(spec.overrides)).training.get("num_steps") or 0)


def claim_total(specs: list[RunSpec], runs: dict[str, RunProgress], planned: Callable[[RunSpec], int]) -> int:
    """The claim's steps in all, for its progress line and ETA: each run's own count once a chunk has set its task
    up, before that the count its config plans (`planned`, 0 when unknown)."""
    return sum(runs[s.name].num_steps or planned(s) for s in specs)


def _may_finish(recipe: Recipe, spec: RunSpec, run: RunProgress, steps: int, rate: float | None, share_s: float,
                tiny: bool) -> bool:
    """Whether a chunk of `steps` may reach the run's last step: always, unless the recipe scores a run in the chunk
    that finishes it; then only when the rest of the training and that scoring fit in the run's share of the time."""
    if not recipe.scores_at_finish or run.num_steps is None or run.step + steps < run.num_steps:
        return True
    training_s = (run.num_steps - run.step) / rate if rate else 0.0
    return training_s + recipe.reserve_s(spec, tiny) <= share_s


@contextlib.contextmanager
def compilation_cache(work: Path) -> Iterator[Path]:
    """Within the block, the programs XLA compiles are kept in `work`'s cache folder (left out of packs) and read
    back when the same program is compiled again; after it, the process's cache settings are what they were.

    Every chunk builds a new Trainer, whose step functions JAX would otherwise compile again: the same programs
    for every chunk of a run, and for every seed of a config (a seed changes values, not shapes).
    `benchmarks/compile_cache.py` measures what it saves."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    from tgjax.reproduce.packing import COMPILATION_CACHE

    folder = work / COMPILATION_CACHE
    folder.mkdir(parents=True, exist_ok=True)
    saved = {name: getattr(jax.config, name) for name in ("jax_compilation_cache_dir",
                                                           "jax_persistent_cache_min_compile_time_secs")}
    jax_cache.reset_cache()  # the cache object is made once per process, from the settings at the first compile
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)  # small programs compile faster than read
    try:
        yield folder
    finally:
        for name, value in saved.items():
            jax.config.update(name, value)
        jax_cache.reset_cache()


def train_within_budget(recipe: Recipe, work: Path, *, budget_s: float, tiny: bool, stream: TextIO = sys.stderr,
                        quiet: bool = False, stop_requested: Callable[[], bool] = lambda: False) -> ClaimState:
    """Advances the claim's runs until the budget (less scoring's reserve) is spent or every run is done; stops
    early (`state.interrupted`) after a chunk SIGTERM stopped, or before a chunk once `stop_requested()`."""
    started = time.monotonic()
    specs = recipe.runs(tiny)
    state = ClaimState.load_or_new(work, recipe, tiny, specs)
    state.invocations += 1
    unfinished = [s for s in specs if not state.runs[s.name].finished]
    # Scoring after training needs the reserve of every run it will score; scoring inside a finishing chunk is kept
    # per chunk. A finished run already scored is not scored again.
    scoring = sum(recipe.reserve_s(spec, tiny) for spec in specs
                  if _scored_after_training(recipe, state.runs[spec.name]))
    train_until = started + budget_s - scoring - PACK_RESERVE_S
    rates: dict[str, float] = {}  # steps per second of wall time, setup included, measured in this invocation
    planned = {s.name: _planned_steps(s) for s in specs if state.runs[s.name].num_steps is None}
    known_total = lambda: claim_total(specs, state.runs, lambda s: planned.get(s.name, 0))  # noqa: E731
    done_total = lambda: sum(state.runs[s.name].step for s in specs)  # noqa: E731
    progress = Progress(known_total() or None, label="claim steps", noun="step", start=done_total(), stream=stream,
                        enabled=not quiet)
    chunks = 0
    while unfinished:
        # `unfinished` shrinks as runs finish within the pass; one at a time: the first until it finishes.
        this_pass = unfinished[:1] if recipe.one_run_at_a_time else list(unfinished)
        chunks_before = chunks
        for index, spec in enumerate(this_pass):
            if stop_requested():  # a SIGTERM between chunks: start nothing more
                state.interrupted = True
                break
            left = train_until - time.monotonic()
            share = left / (len(this_pass) - index)  # an equal share of what is left for each run still to come
            rate = rates.get(spec.name)
            steps = int(rate * share) if rate else recipe.calibration_steps(tiny)
            if chunks and (left <= 0 or steps < 1):
                break
            run = state.runs[spec.name]
            may_finish = _may_finish(recipe, spec, run, steps, rate, share, tiny)
            if not may_finish and chunk_stop(run.step, steps, _logging_interval(spec), run.num_steps,
                                             may_finish=False) is None:
                continue  # nothing left short of the end, and no time to finish and score it: no Trainer built
            began = time.monotonic()
            num_steps, result = _train_chunk(spec, run_workdir(work, spec), steps, may_finish=may_finish,
                                             stream=stream, quiet=True)
            seconds = time.monotonic() - began
            if result is None:  # the checkpoint was further on than the state said: nothing left short of the end
                continue
            chunks += 1
            moved = result.final_step - run.step
            run.chunks.append([result.start_step, result.final_step])
            run.num_steps, run.step, run.train_seconds = num_steps, result.final_step, run.train_seconds + seconds
            run.finished = result.stop_reason in (None, "schedule")
            rates[spec.name] = max(moved, 1) / seconds
            state.save(work)
            if result.stop_reason == "sigterm":  # the machine is going away: no more chunks, pack what is there
                state.interrupted = True
                break
            if run.finished and recipe.one_run_at_a_time and not stop_requested():  # its chunk kept the time
                _score(recipe, spec, work, run, tiny, stream)  # kept in run.scores (a failure: again at the end)
                state.save(work)
            if run.finished:
                unfinished.remove(spec)
            progress.total = known_total() or None
            budget_left = format_duration(max(0.0, train_until - time.monotonic()))
            progress.update(done_total(), fields=[f"{spec.name} {run.step}/{num_steps}", f"budget left {budget_left}"])
        else:
            if chunks > chunks_before:
                continue
            break  # no run could move without finishing, and none had the time to finish
        break  # the budget ended inside the pass, or SIGTERM came
    progress.close()
    return state


def evaluate_runs(recipe: Recipe, work: Path, state: ClaimState, *, tiny: bool, stream: TextIO = sys.stderr,
                  stop_requested: Callable[[], bool] = lambda: False) -> list:
    """Every run that has a checkpoint, scored by the recipe: [(spec, progress, scores)]; once `stop_requested()`
    (a SIGTERM) nothing more is scored and the state is marked interrupted."""
    scored = []
    for spec in recipe.runs(tiny):
        if stop_requested():
            state.interrupted = True
            break
        run = state.runs[spec.name]
        if run.step == 0:
            scored.append((spec, run, {"note": "not started"}))
        elif run.scores is not None:
            scored.append((spec, run, run.scores))
        elif not run.finished and recipe.one_run_at_a_time:
            scored.append((spec, run, {"note": "not finished: scored when it finishes"}))
        else:
            scored.append((spec, run, _score(recipe, spec, work, run, tiny, stream)))
    state.save(work)  # the finished runs' scores
    return scored


def _scored_after_training(recipe: Recipe, run: RunProgress) -> bool:
    """Whether `evaluate_runs` at the end of this call may have to score the run (its time kept from the start)."""
    if run.scores is not None:
        return False
    if recipe.one_run_at_a_time:
        return run.finished  # scored after its finishing chunk, unless a SIGTERM came first
    return not recipe.scored_when_finishing


def _score(recipe: Recipe, spec: RunSpec, work: Path, run: RunProgress, tiny: bool, stream: TextIO) -> dict:
    """The recipe's scores of one run (an error as {"error": ...}: one run's failed scoring should not lose the
    others' or the pack), printed; a finished run's are kept in `run.scores` unless it failed."""
    began = time.monotonic()
    try:
        scores = recipe.evaluate(spec, run_workdir(work, spec), run.finished, tiny)
    except Exception as error:
        scores = {"error": f"{type(error).__name__}: {error}"}
    scores["eval_seconds"] = round(time.monotonic() - began, 1)
    print(f"scored {spec.name} at step {run.step}: "
          + ", ".join(f"{k} {_short(v)}" for k, v in scores.items() if not isinstance(v, dict)), file=stream)
    if run.finished and "error" not in scores:
        run.scores = scores
    return scores


def packed_out(state: ClaimState) -> list[str]:
    """What a pack leaves out of the work folder (relative paths): the checkpoints of every run whose scores are
    kept, which nothing reads again."""
    return [f"{RUNS_DIR}/{name}/checkpoints" for name, run in state.runs.items() if run.scores is not None]


def _short(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def summarise(recipe: Recipe, scored: list) -> dict:
    """The model's and the baseline's numbers over the judged runs, and the verdict.

    With baseline runs of several groups (several baselines), each group is summarised ("baselines") and the
    model is judged against the one with the best mean ("baseline_name"): beating the best is the claim.
    A recipe with parts is summarised part by part ("parts", each on its own runs) and its verdict is theirs
    combined; it has no model or baseline number of its own."""
    if not recipe.parts:
        return _summarise(recipe.comparison, scored)
    parts = {part: _summarise(recipe.comparison.for_part(part, test_set=recipe.parts_are_test_sets),
                              scored if recipe.parts_are_test_sets else [s for s in scored if s[0].part == part])
             for part in recipe.parts}
    verdict, why = combine({part: summary["verdict"] for part, summary in parts.items()})
    return {"label": recipe.comparison.label, "verdict": verdict, "why": why, "paper": None, "model": None,
            "baseline": None, "parts": parts}


def _summarise(c: Comparison, scored: list) -> dict:
    """`summarise` for one comparison over the runs `scored`."""

    def values(role: str, metric: str, group: str | None = None) -> list[float]:
        return [scores[metric] for spec, run, scores in scored
                if spec.role == role and (group is None or spec.group == group)
                and (run.finished or not c.finished_only) and scores.get(metric) is not None]

    model = values("model", c.model_metric)
    groups = list(dict.fromkeys(spec.group for spec, _, _ in scored if spec.role == "baseline" and spec.group
                                and spec.group not in c.beside_groups))
    by_group = {g: found for g in groups if (found := values("baseline", c.baseline_metric, g))}
    best = None
    if by_group:
        sign = 1.0 if c.higher_is_better else -1.0
        best = max(by_group, key=lambda g: sign * spread(by_group[g]).mean)
        baseline = by_group[best]
    else:
        # A baseline measured beside each model run (majority class, right-branching) when there is no baseline run.
        baseline = values("baseline", c.baseline_metric) or values("model", c.baseline_metric)
    longest = max((run.train_seconds for _, run, _ in scored), default=None)
    verdict, why = judge(model, baseline, higher_is_better=c.higher_is_better, paper=c.paper, tolerance=c.tolerance,
                         run_seconds=longest)
    if c.finished_only and len(model) < len([s for s, _, _ in scored if s.role == "model"]):
        why += "; only finished runs are judged"
    summary: dict = {"label": c.label, "verdict": verdict, "why": why, "paper": c.paper}
    for name, found in (("model", model), ("baseline", baseline)):
        summary[name] = dataclasses.asdict(spread(found)) if found else None
    if groups:
        summary["baseline_name"] = best
        summary["baselines"] = {g: dataclasses.asdict(spread(by_group[g])) if g in by_group else None
                                for g in groups}
        if best is not None:
            summary["why"] += f" (the best of {len(groups)} baselines: {best})"
    beside = {g: values("baseline", c.model_metric, g) for g in c.beside_groups}
    if beside:  # baseline models measured as the model is and shown beside it, not judged
        summary["beside"] = {g: dataclasses.asdict(spread(found)) if found else None for g, found in beside.items()}
    if c.reference_metric is not None:
        reference = values("model", c.reference_metric)
        summary["reference"] = dataclasses.asdict(spread(reference)) if reference else None
        summary["reference_label"] = c.reference_label or c.reference_metric
    return summary
