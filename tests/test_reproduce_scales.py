"""tgjax reproduce's scales: a claim's CPU-scale recipe and its paper-scale one (the paper's own recipe, an
accelerator's), chosen with --scale; a pack, a state and a record say their scale, and one made at another scale is
refused in one line; the ledger lists each scale of a claim in its own row."""

from __future__ import annotations

import json

import pytest

from tgjax.reproduce import command, packing, runner
from tgjax.reproduce.claims import load_claims
from tgjax.reproduce.ledger import render
from tgjax.reproduce.recipes import SCALES, all_recipes, recipe_for, recipes, scales_of
from tgjax.train.config import load_config


def test_each_claim_has_at_most_one_recipe_per_scale_and_its_default_is_the_cpu_one_where_it_has_one():
    keys = [(r.claim_id, r.scale) for r in all_recipes()]
    assert len(keys) == len(set(keys)) and {scale for _, scale in keys} <= set(SCALES)
    assert scales_of("om-listops") == ["cpu", "paper"] and scales_of("om-logic-length") == ["cpu", "paper"]
    assert scales_of("om-systematicity") == ["cpu", "paper"]
    assert scales_of("pushdown-dyck-table1") == ["paper"] and scales_of("ocn-specialisation") == []
    assert recipes()["om-listops"].scale == "cpu" and recipes()["pushdown-dyck-table1"].scale == "paper"
    # Every claims.json "runnable" claim has a recipe, every recipe's claim is marked runnable.
    runnable = {c.id for c in load_claims().claims if c.recipe == "runnable"}
    assert runnable == set(recipes()) == {r.claim_id for r in all_recipes()}


@pytest.mark.parametrize("claim_id, thesis", [
    ("om-listops", {"model.slot_size": 128, "model.n_slots": 21, "data.train_size": 90_000,
                    "training.batch_size": 128, "training.num_steps": 35_000}),
    ("om-logic-length", {"model.slot_size": 200, "model.n_slots": 12, "model.test_n_slots": 24,
                         "training.batch_size": 128, "training.num_steps": 47_650}),
])
def test_the_paper_scale_ordered_memory_recipes_train_the_thesis_recipe_ordered_memory_first(claim_id, thesis):
    paper, cpu = recipe_for(claim_id, "paper"), recipe_for(claim_id, "cpu")
    specs = paper.runs(False)
    assert [s.name for s in specs] == [s.name for s in cpu.runs(False)]  # the same nine runs...
    assert [s.group or s.role for s in specs] == ["model"] * 3 + ["lstm"] * 3 + ["transformer"] * 3
    assert paper.one_run_at_a_time and not cpu.one_run_at_a_time  # ... Ordered Memory's seeds trained first
    for spec in specs:
        config = load_config(spec.config, list(spec.overrides))
        found = {key: config[key.split(".")[0]][key.split(".")[1]] for key in thesis}
        assert found == thesis, spec.name  # the thesis' size, data and steps, not the CPU's
        assert config.model.release_switches  # the code the thesis' numbers came from
        assert config.training.seed == spec.seed
    # The reserve for scoring a run stays well inside a 540-s accelerator call, or no call could finish a run.
    assert max(paper.reserve_s(s, False) for s in specs) <= 540 / 2
    assert paper.comparison == cpu.comparison


def test_the_paper_scale_systematicity_recipe_trains_50_epochs_of_each_splits_own_training_pairs():
    import math

    from tests.data.test_logic import SYSTEMATICITY_SIZES  # the splits' pattern-free pairs, checked on the data
    from tgjax.reproduce.recipes.om_systematicity import EPOCH_STEPS

    paper, cpu = recipe_for("om-systematicity", "paper"), recipe_for("om-systematicity", "cpu")
    specs = paper.runs(False)
    assert [s.name for s in specs] == [s.name for s in cpu.runs(False)] and len(specs) == 27
    assert [s.part for s in specs] == ["A"] * 9 + ["B"] * 9 + ["C"] * 9  # split by split, each Ordered Memory first
    assert paper.one_run_at_a_time and paper.parts == cpu.parts and paper.comparison == cpu.comparison
    for split, pairs, _, _ in SYSTEMATICITY_SIZES:
        # An epoch: the training side after every 10th pair is held out for validation, in batches of 128.
        assert EPOCH_STEPS[split] == math.ceil((pairs - pairs // 10) / 128)
    for spec in specs:
        config = load_config(spec.config, list(spec.overrides))
        epoch = EPOCH_STEPS[spec.part]
        assert config.data.split == spec.part and config.training.num_steps == 50 * epoch
        assert config.evaluation.interval_steps == config.checkpointing.interval_steps == epoch
        assert (config.model.slot_size, config.training.batch_size, config.model.release_switches) == (200, 128, True)
    assert max(paper.reserve_s(s, False) for s in specs) <= 540 / 2
    tiny = paper.runs(True)  # the tiny runs keep the CPU recipe's tiny steps
    assert all(load_config(s.config, list(s.overrides)).training.num_steps == 12 for s in tiny)


def test_a_claim_without_the_scale_asked_for_is_refused_in_one_line(tmp_path, capsys):
    output = tmp_path / "o"
    assert command.main(["onlstm-parse-f1", "--scale", "paper", "--budget-s", "10", "--output", str(output)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "no paper-scale recipe" in error and "cpu" in error
    assert not output.exists()


def test_a_pack_made_at_another_scale_is_refused_in_one_line_before_any_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "train_within_budget", lambda *a, **k: pytest.fail("trained"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "state.json").write_text("{}")
    packing.pack(work, tmp_path / "cpu_pack", meta={"claim": "om-listops", "scale": "cpu", "tiny": True})
    assert command.main(["om-listops", "--scale", "paper", "--tiny", "--budget-s", "10", "--resume-from",
                         str(tmp_path / "cpu_pack"), "--output", str(tmp_path / "o"), "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error
    assert "holds om-listops at cpu scale --tiny, not om-listops at paper scale --tiny" in error


def test_a_state_or_pack_from_before_scales_reads_as_its_claims_default_scale(tmp_path):
    assert runner.packed_scale({"claim": "om-listops"}) == "cpu"
    assert runner.packed_scale({"claim": "pushdown-dyck-table1"}) == "paper"
    assert runner.packed_scale({"claim": "om-listops", "scale": "paper"}) == "paper"
    paper = recipe_for("om-listops", "paper")
    specs = paper.runs(True)
    (tmp_path / runner.STATE_FILE).write_text(json.dumps({"claim": "om-listops", "tiny": True, "runs": {}}))
    with pytest.raises(runner.StateMismatch, match="at cpu scale --tiny, not om-listops at paper scale --tiny"):
        runner.ClaimState.load_or_new(tmp_path, paper, True, specs)
    state = runner.ClaimState.load_or_new(tmp_path, recipe_for("om-listops", "cpu"), True, specs)
    state.save(tmp_path)  # from now on with its scale
    assert json.loads((tmp_path / runner.STATE_FILE).read_text())["scale"] == "cpu"


def _record(claim: str, scale: str | None, accuracy: float) -> dict:
    record = {"claim": claim, "date": "2026-12-01T00:00:00Z", "commit": "abc", "hardware": "one H200",
              "tiny": False, "budget_s": 540.0, "wall_s": 530.0,
              "runs": [{"name": "om-seed1111", "step": 35_000, "num_steps": 35_000}],
              "summary": {"label": "ListOps test accuracy, %", "verdict": "not yet", "why": "one seed",
                          "model": {"mean": accuracy, "sd": None, "n": 1}, "baseline": None}}
    return record if scale is None else {**record, "scale": scale}


def test_the_ledger_gives_each_scale_of_a_claim_its_own_row_of_its_latest_record():
    claims = load_claims()
    page = render(claims, [_record("om-listops", None, 53.15), _record("om-listops", "paper", 99.5),
                           _record("om-listops", "paper", 97.25)])
    rows = [line for line in page.splitlines() if line.startswith("| `om-listops` |")]
    assert len(rows) == 2
    cpu_row, paper_row = rows
    assert cpu_row.startswith("| `om-listops` | cpu |") and "53.15" in cpu_row and "(1 record(s))" in cpu_row
    assert paper_row.startswith("| `om-listops` | paper |") and "--scale paper" in paper_row
    assert "97.25" in paper_row and "99.5" not in paper_row and "(2 record(s))" in paper_row  # the latest
    # A claim with one scale keeps one row; one with no recipe a row marked "-".
    assert sum(line.startswith("| `pushdown-dyck-table1` | paper |") for line in page.splitlines()) == 1
    assert sum(line.startswith("| `ocn-specialisation` | - |") for line in page.splitlines()) == 1


def test_help_lists_each_claims_scales(capsys):
    with pytest.raises(SystemExit):
        command.main(["--help"])
    shown = capsys.readouterr().out
    (line,) = [line for line in shown.splitlines() if line.strip().startswith("om-listops ")]
    assert "cpu,paper" in line
    (line,) = [line for line in shown.splitlines() if line.strip().startswith("pushdown-dyck-table1 ")]
    assert " paper " in line and "cpu" not in line


@pytest.mark.slow
def test_the_paper_scale_listops_recipe_runs_tiny_and_resumes_from_its_pack(tmp_path):
    """The whole path at --tiny (about 3 minutes on 2 cores): one run trained, packed, resumed, all three scored."""
    results = tmp_path / "runs.jsonl"
    common = ["om-listops", "--scale", "paper", "--tiny", "--quiet", "--results", str(results)]
    assert command.main([*common, "--budget-s", "1", "--output", str(tmp_path / "o1")]) == 0
    assert packing.read_manifest(tmp_path / "o1")["meta"]["scale"] == "paper"
    assert command.main([*common, "--budget-s", "900", "--resume-from", str(tmp_path / "o1"), "--output",
                         str(tmp_path / "o2")]) == 0
    first, second = [json.loads(line) for line in results.read_text().splitlines()]
    assert first["scale"] == second["scale"] == "paper" and second["complete"]
    assert [r["name"] for r in second["runs"]] == ["om-seed1111", "lstm-seed1111", "transformer-seed1111"]
    om = second["runs"][0]
    assert om["chunks"][0] == first["runs"][0]["chunks"][0]  # continued, not restarted


def test_a_copy_without_git_records_the_commit_it_was_told(monkeypatch, tmp_path):
    """An accelerator's copy of the checkout has no .git: the record names the commit benchmarks/ledger_slot.sh
    passes in TGJAX_COMMIT, and says "unknown" without it."""
    from tgjax.reproduce import results

    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)  # no git checkout here
    monkeypatch.delenv("TGJAX_COMMIT", raising=False)
    assert results.commit() == "unknown"
    monkeypatch.setenv("TGJAX_COMMIT", "19b20c6")
    assert results.commit() == "19b20c6"
