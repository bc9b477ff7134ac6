"""om-listops: Ordered Memory on ListOps (thesis §3.6, Table 3.5a: test accuracy 99.97%) at the README's CPU scale.

Three seeds of `configs/om_listops.py:cpu,thesis` (D = 48, 12 slots in training and 21 at test, 20k generated
trees, 1,500 steps of 64). A finished run is scored on the shipped 10,000-line test set with its best
validation parameters (the trainer does it at the last step), beside the majority class of the same file; a
run the budget stopped is reported by its best validation accuracy so far and left out of the verdict.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec
from tgjax.reproduce.recipes.common import metrics_records, seeded_runs

CONFIG = "configs/om_listops.py:cpu,thesis"
SEEDS = (1111, 2222, 3333)
# Small packs: the newest checkpoint and the best are all a resume and the test need.
COMMON = ("checkpointing.max_to_keep=1",)
TINY = ("data.train_size=200", "data.valid_size=40", "model.embedding_size=8", "model.slot_size=8",
        "model.n_slots=4", "model.test_n_slots=0", "training.batch_size=8", "training.num_steps=12",
        "evaluation.interval_steps=6", "checkpointing.interval_steps=6", "logging.interval_steps=1",
        "evaluation.batch_size=40", "data.test_path=")


def runs(tiny: bool) -> list[RunSpec]:
    return seeded_runs("om", CONFIG, SEEDS, COMMON, TINY, tiny)


def majority_percent(test_path: str) -> float:
    from tgjax.data import listops

    labels = Counter(example.label for example in listops.read_listops(test_path))
    return 100.0 * max(labels.values()) / sum(labels.values())


def evaluate(run: RunSpec, workdir: Path, finished: bool, tiny: bool) -> dict:
    results = workdir / "test_results.json"
    if finished and results.exists():
        report = json.loads(results.read_text())
        test = report["test"]["test"]
        from tgjax.train.tasks.classification import DEFAULT_LISTOPS_TEST

        return {"split": "test", "accuracy": 100.0 * test["accuracy"], "parse_f1": test.get("parse_f1"),
                "majority": majority_percent(DEFAULT_LISTOPS_TEST), "best_step": report["best_step"]}
    valid = [r for r in metrics_records(workdir) if r.get("split") == "valid"]
    if not valid:
        return {"split": "none", "note": "no validation yet"}
    best = max(valid, key=lambda r: r["accuracy"])
    return {"split": "valid", "accuracy": 100.0 * best["accuracy"], "parse_f1": best.get("parse_f1"),
            "best_step": best["step"],
            "note": "test set not scored: " + ("a tiny run has none" if tiny else "the run has not finished")}


RECIPE = Recipe(
    claim_id="om-listops",
    description="Ordered Memory on ListOps, 3 seeds of om_listops.py:cpu,thesis (1,500 steps each); test accuracy "
                "beside the majority class",
    runs=runs,
    evaluate=evaluate,
    comparison=Comparison(model_metric="accuracy", baseline_metric="majority", label="ListOps test accuracy, %",
                          paper=99.97, tolerance=1.0, finished_only=True),
    # The last chunk of a run scores the 10,000 test lines inside the training call.
    eval_reserve_s=lambda tiny: 5.0 if tiny else 600.0,
    calibration_steps=lambda tiny: 6 if tiny else 50,
)
