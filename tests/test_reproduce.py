"""tgjax reproduce: a budgeted claim run resumes from its pack exactly; --help lists the claims; the ledger has a
row per claim; an oversized pack is refused in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import types

import pytest

from tgjax.reproduce import command, packing
from tgjax.reproduce.claims import REPO_ROOT, load_claims
from tgjax.reproduce.ledger import COLUMNS, write_ledger
from tgjax.reproduce.recipes import recipes
from tgjax.reproduce.verdict import VERDICTS, judge, record_text, spread

CLAIM = "onlstm-parse-f1"  # the cheapest runnable recipe


def _train_losses(workdir) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r.get("split", "train") == "train"]


def test_budgeted_run_resumes_from_its_pack_as_one_uninterrupted_run(tmp_path, capsys):
    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    results = tmp_path / "runs.jsonl"
    first, second = tmp_path / "out1", tmp_path / "out2"
    common = ["--tiny", "--quiet", "--results", str(results)]
    # A 1-second budget: one calibration chunk, then scoring and packing.
    assert command.main([CLAIM, "--budget-s", "1", "--output", str(first), *common]) == 0
    stopped_at = packing.read_manifest(first)["meta"]["steps"]
    run = next(spec for spec in recipes()[CLAIM].runs(True) if spec.role == "model")  # the first to train
    assert 0 < stopped_at[run.name]
    work = tmp_path / "work"
    assert command.main([CLAIM, "--budget-s", "600", "--resume-from", str(first), "--output", str(second),
                         "--workdir", str(work), *common]) == 0
    first_record, second_record = [json.loads(line) for line in results.read_text().splitlines()]
    assert not first_record["complete"] and second_record["complete"]
    before = next(r for r in first_record["runs"] if r["name"] == run.name)
    resumed = next(r for r in second_record["runs"] if r["name"] == run.name)
    assert all(r["finished"] for r in second_record["runs"])  # the plain-LSTM baseline's run too
    # It continued: the second call's first chunk started where the first call stopped, not from step 0.
    earlier = len(before["chunks"])
    assert resumed["chunks"][:earlier] == before["chunks"]
    assert resumed["chunks"][earlier][0] == stopped_at[run.name] == before["step"]
    assert all(a[1] == b[0] for a, b in zip(resumed["chunks"], resumed["chunks"][1:]))
    assert resumed["finished"] and resumed["step"] == resumed["num_steps"]

    reference = tmp_path / "reference"
    train(load_config(run.config, list(run.overrides)), reference, quiet=True)
    resumed_losses = _train_losses(work / "runs" / run.name)
    assert len(resumed_losses) == resumed["num_steps"]  # logged every step in the tiny recipe
    assert resumed_losses == _train_losses(reference)  # bit-exact, not approximately
    assert "verdict: not yet" in capsys.readouterr().out


def test_a_preempted_call_packs_its_state_and_appends_no_record(tmp_path, capsys, monkeypatch):
    from tgjax.reproduce import runner

    trained = []

    def preempted(spec, workdir, steps, *, may_finish, stream, quiet):  # what Trainer.run returns after SIGTERM
        trained.append(spec.name)
        (workdir / "checkpoints").mkdir(parents=True)
        return 12, types.SimpleNamespace(start_step=0, final_step=3, stop_reason="sigterm")

    monkeypatch.setattr(runner, "_train_chunk", preempted)
    results, output = tmp_path / "runs.jsonl", tmp_path / "out"
    assert command.main([CLAIM, "--tiny", "--quiet", "--budget-s", "600", "--output", str(output), "--results",
                         str(results)]) == command.SIGTERM_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stopped by SIGTERM" in err[0] and f"--resume-from {output}" in err[0]
    assert len(trained) == 1 and not results.exists()  # no further chunk; no metric over nothing
    meta = packing.read_manifest(output)["meta"]
    assert meta["interrupted"] and meta["steps"][trained[0]] == 3 and not meta["complete"]


def test_help_lists_every_claim(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    claims = load_claims().claims
    assert len(claims) >= 14
    for claim in claims:
        assert claim.id in shown
    for claim_id in ("om-listops", "pushdown-dyck-table1", "ocn-specialisation"):
        assert claim_id in shown


def test_a_claim_without_a_recipe_is_refused_in_one_line(tmp_path, capsys):
    assert command.main(["ocn-specialisation", "--budget-s", "10", "--output", str(tmp_path / "o")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "accelerator-only" in error
    assert not (tmp_path / "o").exists()


def test_ledger_has_a_row_per_claim_with_four_column_groups_and_a_verdict(tmp_path):
    page = write_ledger(tmp_path / "reproduction.md", results_path=tmp_path / "none.jsonl").read_text()
    header = "| " + " | ".join(COLUMNS) + " |"
    assert header in page
    for group in ("paper", "ours, CPU scale", "ours, accelerator", "verdict"):
        assert group in header
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    claims = load_claims().claims
    for claim in claims:
        (row,) = [r for r in rows if r.startswith(f"| `{claim.id}`:")]
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == len(COLUMNS)
        assert cells[4].strip("*") in VERDICTS


def test_the_compilation_cache_is_scoped_to_the_call_and_left_out_of_the_pack(tmp_path):
    import jax
    import jax.numpy as jnp

    from tgjax.reproduce import runner

    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    (work / "runs" / "weights.bin").write_bytes(b"w" * 100)
    with runner.compilation_cache(work) as folder:
        assert jax.config.jax_compilation_cache_dir == str(folder) and folder.parent == work
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # this tiny program too
        jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.5)(jnp.ones((8, 8))).block_until_ready()
        assert any(folder.iterdir())  # written
    assert (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs) == before
    packing.pack(work, tmp_path / "out")
    packing.unpack(tmp_path / "out", tmp_path / "back")
    assert sorted(p.name for p in (tmp_path / "back").rglob("*")) == ["runs", "weights.bin"]


def test_a_pack_over_the_cap_is_refused_in_one_line(tmp_path):
    source = tmp_path / "state"
    source.mkdir()
    (source / "weights.bin").write_bytes(os.urandom(64 * 1024))  # random bytes do not compress
    with pytest.raises(packing.PackTooLarge) as error:
        packing.pack(source, tmp_path / "out", total_bytes=32 * 1024)
    assert "\n" not in str(error.value) and "cap" in str(error.value)
    assert list((tmp_path / "out").iterdir()) == []
    parts = packing.pack(source, tmp_path / "out", part_bytes=16 * 1024, total_bytes=1 << 20)
    assert len(parts) == 6 and all(p.stat().st_size <= 16 * 1024 for p in parts[:-1])  # 5 parts + manifest
    packing.unpack(tmp_path / "out", tmp_path / "back")
    assert (tmp_path / "back" / "weights.bin").read_bytes() == (source / "weights.bin").read_bytes()


def test_a_pack_leaves_out_the_folders_it_is_told_to_and_nothing_else(tmp_path):
    work = tmp_path / "work"
    for run in ("done", "running"):  # a scored run's checkpoints go; the running one's, and every metrics file, stay
        (work / "runs" / run / "checkpoints" / "10").mkdir(parents=True)
        (work / "runs" / run / "checkpoints" / "10" / "state").write_bytes(b"s")
        (work / "runs" / run / "metrics.jsonl").write_text("{}\n")
    (work / "runs" / "done_too").mkdir()  # a name that starts like a left-out one
    (work / "runs" / "done_too" / "checkpoints").write_text("kept")
    packing.pack(work, tmp_path / "out", leave_out=["runs/done/checkpoints"])
    packing.unpack(tmp_path / "out", tmp_path / "back")
    kept = sorted(str(p.relative_to(tmp_path / "back")) for p in (tmp_path / "back").rglob("*") if p.is_file())
    assert kept == ["runs/done/metrics.jsonl", "runs/done_too/checkpoints", "runs/running/checkpoints/10/state",
                    "runs/running/metrics.jsonl"]


def test_the_ledger_page_is_not_written_over_its_own_inputs_nor_under_a_file(tmp_path, capsys):
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps(json.loads((REPO_ROOT / "reproduction" / "claims.json").read_text())))
    before = claims.read_text()
    for page, says in ((claims, "is also an input"), (claims / "page.md", "is not a directory")):
        assert command.main(["--ledger", "--claims", str(claims), "--results", str(tmp_path / "none.jsonl"),
                             "-o", str(page)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"-o {page}: " in err[0] and says in err[0], err
    assert claims.read_text() == before


def test_verdict_needs_three_seeds_and_a_difference_beyond_the_spread():
    assert judge([60.0], [50.0])[0] == "not yet"
    assert judge([60.0, 61.0, 59.0], [50.0, 50.0, 50.0])[0] == "in direction"
    assert judge([60.0, 61.0, 59.0], [50.0] * 3, paper=60.5, tolerance=1.0)[0] == "reproduced"
    assert judge([51.0, 45.0, 57.0], [50.0] * 3)[0] == "not yet"
    assert judge([40.0, 41.0, 39.0], [50.0] * 3)[0] == "contradicted"


def test_a_recorded_spread_reads_as_mean_sd_and_seeds():
    """The phrase the CLI and the ledger print for a stored summary: sample sd (n - 1), and no sd for one seed."""
    assert record_text(dataclasses.asdict(spread([60.0, 61.0, 59.0]))) == "60.00 ± 1.00 (n = 3)"
    assert record_text(dataclasses.asdict(spread([33.25]))) == "33.25 no spread (n = 1)"
    assert record_text(None) == "none judged"


def test_runs_of_under_five_minutes_need_five_seeds():
    three = ([60.0, 61.0, 59.0], [50.0] * 3)
    assert judge(*three, run_seconds=299.0)[0] == "not yet"
    assert judge(*three, run_seconds=300.0)[0] == "in direction"
    assert judge([60.0, 61.0, 59.0, 60.0, 60.5], [50.0] * 5, run_seconds=30.0)[0] == "in direction"
