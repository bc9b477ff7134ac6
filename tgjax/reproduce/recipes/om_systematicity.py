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
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes import om_logic_length as length
from tgjax.reproduce.recipes.common import encoder_runs, validation_so_far

SPLITS = ("A", "B", "C")
THESIS = (("A", 94.0), ("B", 91.0), ("C", 81.0))  # Table 3.4, 7..12 operators; no spread given


def runs(tiny: bool) -> list[RunSpec]:
    """om-logic-length's runs once per split, named "A-om-seed1111", ..., each in its split's part."""
    specs = []
    for split in SPLITS:
        for spec in encoder_runs(length.CONFIG, length.SEEDS, length.COMMON, length.TINY, tiny):
            specs.append(dataclasses.replace(spec, name=f"{split}-{spec.name}", part=split,
                                             overrides=(f"data.split={split}", *spec.overrides)))
    return specs


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
