"""What the ledger's recipes read from a run's workdir: om-logic-length's pooled and per-length test accuracies of
a finished run, its best validation accuracy otherwise, and the majority class of the pooled 7..12 test pairs."""

from __future__ import annotations

import json

import pytest

from tests.train.test_classification_task import write_toy_logic
from tgjax.reproduce.recipes import om_logic_length


def _run(logic_dir):
    (spec,) = [s for s in om_logic_length.runs(tiny=True) if s.role == "model"]
    return spec.__class__(spec.name, spec.role, spec.config, (*spec.overrides, f"data.logic_dir={logic_dir}"),
                          spec.seed)


def test_a_finished_logic_run_reports_the_pooled_and_each_lengths_accuracy_and_the_majority(tmp_path):
    logic_dir = write_toy_logic(tmp_path / "logic")  # test7: one '<' and one '>' pair; test8..12 empty
    workdir = tmp_path / "run"
    workdir.mkdir()
    per_length = {f"ops{n}": {"accuracy": 0.5 + n / 100, "count": 10} for n in range(7, 13)}
    (workdir / "test_results.json").write_text(json.dumps(
        {"best_step": 6, "test": {**per_length, "all": {"accuracy": 0.625, "count": 60}}}))
    scores = om_logic_length.evaluate(_run(logic_dir), workdir, finished=True, tiny=True)
    assert scores["split"] == "test 7-12" and scores["accuracy"] == pytest.approx(62.5)
    assert [scores[f"ops{n}"] for n in range(7, 13)] == pytest.approx([57.0, 58.0, 59.0, 60.0, 61.0, 62.0])
    assert scores["majority"] == pytest.approx(50.0) and scores["best_step"] == 6


def test_an_unfinished_logic_run_reports_its_best_validation_and_no_test(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    records = [{"step": 6, "split": "valid", "accuracy": 0.7}, {"step": 12, "split": "valid", "accuracy": 0.65},
               {"step": 12, "loss": 0.5}]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    scores = om_logic_length.evaluate(_run(tmp_path), workdir, finished=False, tiny=True)
    assert scores["split"] == "valid" and scores["accuracy"] == pytest.approx(70.0) and scores["best_step"] == 6
    assert "ops7" not in scores and "majority" not in scores


def test_pushdown_table1_trains_both_models_seed_by_seed_then_the_paper_head_one_run_at_a_time():
    from tgjax.eval.dyck import PAPER_SETS, PAPER_TABLE
    from tgjax.reproduce.recipes import pushdown_dyck, recipes

    recipe = recipes()["pushdown-dyck-table1"]
    specs = recipe.runs(False)
    assert [s.name for s in specs] == ["pushdown-seed42", "base-seed42", "pushdown-seed43", "base-seed43",
                                       "pushdown-seed44", "base-seed44", "paper_head-seed42", "paper_head-seed43",
                                       "paper_head-seed44"]
    assert {s.config for s in specs if s.role == "model"} == {"configs/pushdown_dyck.py"}
    assert {(s.config, s.group) for s in specs if s.role == "baseline"} == {
        ("configs/pushdown_dyck.py:base", "base"), ("configs/pushdown_dyck.py:paper-head", "paper_head")}
    # Same seeds and batching for every model; the paper head is shown beside, the Base-LM judged.
    assert all(s.overrides == (*pushdown_dyck.COMMON, f"training.seed={s.seed}") for s in specs)
    assert recipe.comparison.beside_groups == ("paper_head",)
    # One part per Table 1 set, each with the paper's Pushdown-LM number, scoring every run.
    assert recipe.parts == PAPER_SETS and recipe.parts_are_test_sets and recipe.one_run_at_a_time
    assert dict(recipe.comparison.paper_by_part) == PAPER_TABLE["pushdown"]
    part = recipe.comparison.for_part("dyck200", test_set=True)
    assert (part.model_metric, part.baseline_metric, part.paper) == ("accuracy/dyck200", "accuracy/dyck200", 61.2)
