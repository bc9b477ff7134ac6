"""A claim made on several parts at once (Ordered Memory's systematicity splits A / B / C): each part is judged on
its own runs, the claim's verdict combines them, and om-systematicity reads a split's unseen 7..12 pairs."""

from __future__ import annotations

import json

import pytest

from tests.train.test_classification_task import _nots
from tgjax.reproduce import runner
from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec, om_logic_length, om_systematicity, recipes
from tgjax.reproduce.verdict import VERDICTS, combine


@pytest.mark.parametrize("verdicts, expected", [
    ({"A": "reproduced", "B": "reproduced"}, "reproduced"),
    ({"A": "reproduced", "B": "in direction"}, "in direction"),
    ({"A": "in direction", "B": "in direction", "C": "in direction"}, "in direction"),
    ({"A": "in direction", "B": "not yet", "C": "reproduced"}, "not yet"),
    ({"A": "reproduced", "B": "contradicted", "C": "not yet"}, "contradicted"),
    ({"A": "not yet"}, "not yet"),
])
def test_a_claim_on_several_parts_holds_only_where_every_part_does(verdicts, expected):
    verdict, why = combine(verdicts)
    assert verdict == expected
    assert all(f"{part}: {v}" in why for part, v in verdicts.items())  # every part's verdict is named


def test_combining_refuses_an_unknown_verdict_or_no_parts():
    with pytest.raises(ValueError, match="not one of"):
        combine({"A": "holds"})
    with pytest.raises(ValueError, match="no parts"):
        combine({})
    assert set(VERDICTS) == {"reproduced", "in direction", "not yet", "contradicted"}


def _scored(part: str, role: str, values: list[float], group: str = "") -> list:
    return [(RunSpec(f"{part}-{role}{group}-{i}", role, "c.py", (), i, group, part),
             runner.RunProgress(step=10, num_steps=10, finished=True, train_seconds=600.0), {"accuracy": v})
            for i, v in enumerate(values)]


def test_each_part_is_judged_on_its_own_runs_against_its_own_paper_number():
    comparison = Comparison("accuracy", "accuracy", "acc", finished_only=True, tolerance=1.0,
                            paper_by_part=(("A", 90.0), ("B", 50.0)))
    recipe = Recipe("c", "", lambda tiny: [], lambda *a: {}, comparison, lambda tiny: 0.0, lambda tiny: 1,
                    parts=("A", "B"))
    scored = (_scored("A", "model", [90.0, 91.0, 89.5]) + _scored("A", "baseline", [60.0, 61.0, 62.0], "lstm")
              # B: the model above its baseline by more than the spread, but 30 points from B's paper number.
              + _scored("B", "model", [80.0, 81.0, 80.5]) + _scored("B", "baseline", [70.0, 70.5, 71.0], "lstm"))
    summary = runner.summarise(recipe, scored)
    a, b = summary["parts"]["A"], summary["parts"]["B"]
    assert (a["verdict"], b["verdict"]) == ("reproduced", "in direction")
    assert a["model"]["mean"] == pytest.approx(90.166666, abs=1e-4) and a["model"]["n"] == 3
    assert b["baseline"]["mean"] == pytest.approx(70.5) and (a["paper"], b["paper"]) == (90.0, 50.0)
    assert a["label"] == "acc, A" and summary["verdict"] == "in direction"
    assert summary["model"] is None and summary["baseline"] is None  # no number mixing the parts

    # A part whose baseline is ahead contradicts the whole claim, however well the other part does.
    flipped = scored[:6] + _scored("B", "model", [60.0, 60.5, 61.0]) + _scored("B", "baseline", [70.0, 70.5, 71.0],
                                                                               "lstm")
    assert runner.summarise(recipe, flipped)["verdict"] == "contradicted"


def test_om_systematicity_runs_every_split_as_om_logic_length_does():
    specs = om_systematicity.runs(tiny=False)
    assert len(specs) == 3 * 3 * 3 and len({s.name for s in specs}) == len(specs)
    for spec in specs:
        assert spec.part in "ABC" and spec.name.startswith(f"{spec.part}-")
        assert f"data.split={spec.part}" in spec.overrides and "training.num_steps=2000" in spec.overrides
    for split in "ABC":
        part = [s for s in specs if s.part == split]
        assert sum(s.role == "model" for s in part) == 3
        assert {s.group for s in part if s.role == "baseline"} == {"lstm", "transformer"}
    assert "om-systematicity" in recipes() and recipes()["om-systematicity"].parts == ("A", "B", "C")


def _write_logic(directory):
    """test7 holds three pairs with B's pattern `( and ( not X ) )` (labels '<', '<', '>') and one without; every
    other test file is empty."""
    directory.mkdir()
    negated = _nots("b", 5)  # with the `not` around it and `( a ( and ... ) )`'s `and`: 7 operators
    lines = [f"<\t( a ( and ( not {negated} ) ) )\t{_nots('c', 1)}" for _ in range(2)]
    lines += [f">\t( a ( and ( not {negated} ) ) )\t{_nots('d', 1)}", f"<\t{_nots('a', 7)}\tb"]
    (directory / "test7").write_text("".join(f"{line}\n" for line in lines))
    for n in (*range(0, 7), *range(8, 13)):
        (directory / f"test{n}").write_text("")
    return directory


def test_a_finished_split_run_reports_the_unseen_7_to_12_figure_and_every_length_apart(tmp_path):
    logic_dir = _write_logic(tmp_path / "logic")
    spec = next(s for s in om_systematicity.runs(tiny=True) if s.part == "B" and s.role == "model")
    spec = RunSpec(spec.name, spec.role, spec.config, (*spec.overrides, f"data.logic_dir={logic_dir}"), spec.seed,
                   spec.group, spec.part)
    workdir = tmp_path / "run"
    workdir.mkdir()
    test = {"B/7": {"accuracy": 0.75, "count": 4}, "B/3": {"accuracy": 1.0, "count": 4},
            "B/7-12": {"accuracy": 0.75, "count": 4}, "B/0-12": {"accuracy": 0.875, "count": 8}}
    (workdir / "test_results.json").write_text(json.dumps({"best_step": 6, "test": test}))
    scores = om_systematicity.evaluate(spec, workdir, finished=True, tiny=True)
    assert scores["accuracy"] == pytest.approx(75.0) and scores["pairs"] == 4
    assert scores["accuracy_all_lengths"] == pytest.approx(87.5) and scores["pairs_all_lengths"] == 8
    assert scores["majority"] == pytest.approx(200 / 3)  # '<' in 2 of B's 3 pairs; the pattern-free pair left out
    with pytest.raises(ValueError, match="split A's pattern"):
        om_logic_length.majority_percent(str(logic_dir), "A")  # `( and ( not a ) )` is in none of them


def test_the_ledger_shows_each_parts_numbers_and_the_combined_verdict(tmp_path):
    from tgjax.reproduce.claims import load_claims
    from tgjax.reproduce.ledger import render

    comparison = Comparison("accuracy", "accuracy", "acc", paper_by_part=(("A", 90.0), ("B", 50.0)))
    recipe = Recipe("om-systematicity", "", lambda tiny: [], lambda *a: {}, comparison, lambda tiny: 0.0,
                    lambda tiny: 1, parts=("A", "B"))
    scored = (_scored("A", "model", [90.0, 91.0, 89.5]) + _scored("A", "baseline", [60.0, 61.0, 62.0], "lstm")
              + _scored("B", "model", [70.0, 71.0, 70.5]) + _scored("B", "baseline", [70.0, 70.5, 71.0], "lstm"))
    record = {"claim": "om-systematicity", "date": "2026-11-30T00:00:00Z", "hardware": "cpu (2 cores)",
              "commit": "abc", "wall_s": 10.0, "budget_s": 60.0, "tiny": False, "summary":
              runner.summarise(recipe, scored),
              "runs": [{"name": spec.name, "step": 10, "num_steps": 10} for spec, _, _ in scored]}
    (row,) = [line for line in render(load_claims(), [record]).splitlines()
              if line.startswith("| `om-systematicity` | cpu | runnable")]
    assert "acc, A: 90.17 ± 0.76 (n = 3)" in row and "acc, B: 70.50 ± 0.50 (n = 3)" in row
    assert "A: best, lstm: 61.00 ± 1.00 (n = 3)" in row and "B: best, lstm: 70.50 ± 0.50 (n = 3)" in row
    assert "**not yet**: not every part shows it (A: reproduced; B: not yet)" in row


def test_a_beside_group_is_measured_as_the_model_is_and_not_judged():
    comparison = Comparison("f1", "right_branching", "f1", finished_only=True, beside_groups=("lstm",))
    recipe = Recipe("c", "", lambda tiny: [], lambda *a: {}, comparison, lambda tiny: 0.0, lambda tiny: 1)
    progress = runner.RunProgress(step=10, num_steps=10, finished=True, train_seconds=600.0)
    scored = [(RunSpec(f"m{i}", "model", "c.py", (), i), progress, {"f1": v, "right_branching": 50.0})
              for i, v in enumerate([60.0, 61.0, 62.0])]
    # The plain baseline parses better than the model here: judged, it would contradict the claim.
    scored += [(RunSpec(f"l{i}", "baseline", "c.py", (), i, "lstm"), progress, {"f1": v, "right_branching": 50.0})
               for i, v in enumerate([70.0, 71.0, 72.0])]
    summary = runner.summarise(recipe, scored)
    assert summary["verdict"] == "in direction" and summary["baseline"]["mean"] == pytest.approx(50.0)
    assert summary["beside"]["lstm"]["mean"] == pytest.approx(71.0) and summary["beside"]["lstm"]["n"] == 3
    assert "baselines" not in summary


def test_parts_that_are_test_sets_judge_every_run_by_that_sets_number():
    comparison = Comparison("accuracy", "accuracy", "acc", paper_by_part=(("dyck50", 96.5), ("depth", 68.3)))
    recipe = Recipe("c", "", lambda tiny: [], lambda *a: {}, comparison, lambda tiny: 0.0, lambda tiny: 1,
                    parts=("dyck50", "depth"), parts_are_test_sets=True)
    progress = runner.RunProgress(step=10, num_steps=10, finished=True, train_seconds=600.0)
    # The model is ahead on dyck50 and behind on depth; each run is scored on both sets.
    model = [(RunSpec(f"m{i}", "model", "c.py", (), i), progress, {"accuracy/dyck50": 90.0 + i,
                                                                   "accuracy/depth": 40.0 + i}) for i in range(3)]
    base = [(RunSpec(f"b{i}", "baseline", "c.py", (), i, "base"), progress,
             {"accuracy/dyck50": 50.0 + i, "accuracy/depth": 60.0 + i}) for i in range(3)]
    summary = runner.summarise(recipe, model + base)
    dyck50, depth = summary["parts"]["dyck50"], summary["parts"]["depth"]
    assert dyck50["model"]["mean"] == pytest.approx(91.0) and dyck50["baseline"]["mean"] == pytest.approx(51.0)
    assert depth["model"]["mean"] == pytest.approx(41.0) and depth["baseline"]["mean"] == pytest.approx(61.0)
    assert (dyck50["verdict"], depth["verdict"], summary["verdict"]) == ("in direction", "contradicted",
                                                                        "contradicted")
    assert (dyck50["paper"], depth["label"]) == (96.5, "acc, depth")
