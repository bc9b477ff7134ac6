"""om-systematicity: Ordered Memory on logical inference with an operator pattern held out of training, tested on
the pairs that contain it (thesis §3.6, Tables 3.4-3.5: A 94, B 91, C 81 %, "aggregated over the unseen operation
lengths", 7..12), at the docs' longer CPU scale, against same-budget baselines.

One part per split (A, B, C), each the recipe of om-logic-length with `data.split` set: three seeds of
`configs/om_logic.py:cpu_long` for 2,000 steps (D = 48, batch 64; the release's recurrence,
`model.release_switches=True`, the code the thesis' numbers came from; training drops every pair whose text
contains the split's pattern), and three seeds each of the same config with an LSTM and with a Transformer
encoder in Ordered Memory's place (same data, steps, embedding, head and optimiser; the width matched to
Ordered Memory's parameter count). A finished run is scored by the trainer at its last step, with its best
validation parameters (validation: held-out pattern-free pairs), on every test pair that contains the pattern;
each part judges the accuracy pooled over 7..12 operators (A 1,369, B 9,257, C 12,757 pairs; the thesis'
column) against the baseline with the best mean, and keeps the figure over every length 0..12 beside it, apart.
The claim holds where every split shows it (`tgjax.reproduce.verdict.combine`). A run the budget stopped is
reported by its best validation accuracy so far and left out of the verdict. The majority class of each split's
7..12 pairs is reported beside. Data: the original files (`data.logic_dir`).

`PAPER_RECIPE` (`--scale paper`) is the thesis' recipe, an accelerator's: the same 27 runs of `configs/om_logic.py`
(D = 200, batch 128, the release's recurrence and dropouts), each for 50 epochs of its split's pattern-free
training pairs (`EPOCH_STEPS`: A 45,350, B 30,950, C 18,250 steps) and validated once an epoch, as the release
counts them; trained one after another, split A's runs first and in each split Ordered Memory's seeds first, each
scored as it finishes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes import om_logic_length as length
from tgjax.reproduce.recipes.common import at_paper_scale, encoder_runs, validation_so_far

SPLITS = ("A", "B", "C")
THESIS = (("A", 94.0), ("B", 91.0), ("C", 81.0))  # Table 3.4, 7..12 operators; no spread given


# One epoch of each split's pattern-free training pairs at the thesis' batch of 128: ceil(pairs / 128) steps (A
# 116,073 pairs, B 79,154, C 46,707: `tgjax.data.logic.systematicity_split`'s training side).
EPOCH_STEPS = {"A": 907, "B": 619, "C": 365}
THESIS_EPOCHS = 50


def split_runs(config: str, common: tuple[str, ...], tiny: bool, per_split=lambda split: ()) -> list[RunSpec]:
    """om-logic-length's runs once per split, named "A-om-seed1111", ..., each in its split's part, with the
    split's own overrides (`per_split`) where it has them."""
    specs = []
    for split in SPLITS:
        for spec in encoder_runs(config, length.SEEDS, common, length.TINY, tiny):
            own = () if tiny else per_split(split)
            specs.append(dataclasses.replace(spec, name=f"{split}-{spec.name}", part=split,
                                             overrides=(f"data.split={split}", *own, *spec.overrides)))
    return specs


def runs(tiny: bool) -> list[RunSpec]:
    return split_runs(length.CONFIG, length.COMMON, tiny)


def paper_runs(tiny: bool) -> list[RunSpec]:
    """The thesis' recipe per split: 50 epochs of the split's training pairs, validated once an epoch."""
    def epochs(split: str) -> tuple[str, ...]:
        epoch = EPOCH_STEPS[split]
        return (f"training.num_steps={THESIS_EPOCHS * epoch}", f"evaluation.interval_steps={epoch}",
                f"checkpointing.interval_steps={epoch}")

    return split_runs(length.PAPER_CONFIG, length.PAPER_COMMON, tiny, epochs)


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    found = length.finished_report(run, workdir, finished)
    if found is None:
        return validation_so_far(workdir)
    report, logic_dir = found
    from tgjax.train.tasks.classification import ALL_LENGTHS, THESIS_LENGTHS

    unseen, every = report["test"][f"{run.part}/{THESIS_LENGTHS}"], report["test"][f"{run.part}/{ALL_LENGTHS}"]
    return {"split": f"test {run.part} {THESIS_LENGTHS}", "accuracy": 100.0 * unseen["accuracy"],
            "pairs": unseen["count"], "accuracy_all_lengths": 100.0 * every["accuracy"],
            "pairs_all_lengths": every["count"], "majority": length.majority_percent(logic_dir, run.part),
            "best_step": report["best_step"]}


RECIPE = Recipe(
    claim_id="om-systematicity",
    description="Ordered Memory on logic with split A / B / C's pattern held out of training, tested on the pairs "
                "with it, against same-size LSTM and Transformer encoders, 3 seeds each per split of "
                "om_logic.py:cpu_long (the release's recurrence; 2,000 steps each); per split, accuracy pooled over "
                "7-12 operators against the best baseline, every length and the majority class beside",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="accuracy", baseline_metric="accuracy",
                          label="unseen-pattern test accuracy over 7-12 operators (pooled), %", finished_only=True,
                          tolerance=1.0, paper_by_part=THESIS, reference_metric="majority",
                          reference_label="majority class"),
    # Scoring every 0..12 bucket of the split's pattern inside the last chunk (C: 27,232 pairs, twice
    # om-logic-length's 13,445); Ordered Memory's scan is the slow one. Tiny: 9 runs share the budget, and a
    # reserve above a run's share would never let it finish.
    eval_reserve_s=lambda tiny: 20.0 if tiny else 1200.0,
    baseline_eval_reserve_s=lambda tiny: 10.0 if tiny else 240.0,
    scored_when_finishing=True,
    calibration_steps=lambda tiny: 6 if tiny else 50,
    parts=SPLITS,
)

PAPER_RECIPE = at_paper_scale(
    RECIPE,
    description="Ordered Memory on logic with split A / B / C's pattern held out of training at the thesis' recipe "
                "(om_logic.py: D 200, 50 epochs of each split's training pairs; the release's recurrence), against "
                "same-size LSTM and Transformer encoders, 3 seeds each per split, trained one at a time and scored "
                "as each finishes (accelerator scale)",
    runs=paper_runs,
    # Every 0..12 bucket of the split's pattern (C: 27,232 pairs) at 24 slots, both sides encoded, plus a fresh
    # compile of the test-time program: om-logic-length's 13,445 pairs take under a minute on an accelerator.
    model_reserve_s=240.0,
    baseline_reserve_s=120.0,
)
