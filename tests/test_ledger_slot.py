"""benchmarks/ledger_slot.sh: `keep` puts an accelerator call's packs in place of the kept ones and appends its
records; `run` (slow: real training at --tiny) moves claims on side by side and packs each under OUT."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ledger_slot.sh"


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A stand-in checkout: the script (it works from the folder above its own) and a results file."""
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "benchmarks" / SCRIPT.name)
    (root / "reproduction").mkdir()
    (root / "reproduction" / "runs.jsonl").write_text('{"claim": "earlier"}\n')
    return root


def _slot(checkout: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(checkout / "benchmarks" / SCRIPT.name), *args], capture_output=True,
                          text=True, timeout=900, env={**os.environ, **(env or {})})


def _call_output(folder: Path, packs: dict[str, list[str]], records: list[dict]) -> Path:
    """What a device call brings back: one folder per claim's pack, the records, the log."""
    for claim, parts in packs.items():
        (folder / claim).mkdir(parents=True)
        (folder / claim / "manifest.json").write_text(json.dumps({"meta": {"claim": claim}}))
        for part in parts:
            (folder / claim / part).write_bytes(part.encode())
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "log.txt").write_text("log\n")
    return folder


def test_keep_replaces_each_claims_kept_pack_and_appends_the_records(checkout, tmp_path):
    old = checkout / "reproduction" / "packs" / "om-listops-paper"
    old.mkdir(parents=True)
    (old / "state.tar.gz.001").write_text("a part of the older, larger pack")
    untouched = checkout / "reproduction" / "packs" / "pushdown-dyck-table1-paper"
    untouched.mkdir()
    (untouched / "manifest.json").write_text("{}")
    came_back = _call_output(tmp_path / "files", {"om-listops": ["state.tar.gz.000"],
                                                  "om-logic-length": ["state.tar.gz.000", "state.tar.gz.001"]},
                             [{"claim": "om-listops"}, {"claim": "om-logic-length"}])
    done = _slot(checkout, "keep", str(came_back))
    assert done.returncode == 0, done.stderr
    packs = checkout / "reproduction" / "packs"
    assert sorted(p.name for p in (packs / "om-listops-paper").iterdir()) == ["manifest.json", "state.tar.gz.000"]
    assert sorted(p.name for p in (packs / "om-logic-length-paper").iterdir()) == [
        "manifest.json", "state.tar.gz.000", "state.tar.gz.001"]
    assert (untouched / "manifest.json").exists()  # another claim's pack stays
    records = [json.loads(line)["claim"] for line in (checkout / "reproduction" / "runs.jsonl").read_text()
               .splitlines()]
    assert records == ["earlier", "om-listops", "om-logic-length"]


def test_keep_without_a_pack_fails_naming_the_folder_and_changes_nothing(checkout, tmp_path):
    empty = tmp_path / "files"
    empty.mkdir()
    (empty / "runs.jsonl").write_text('{"claim": "x"}\n')
    done = _slot(checkout, "keep", str(empty))
    assert done.returncode == 1 and str(empty) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (checkout / "reproduction" / "runs.jsonl").read_text() == '{"claim": "earlier"}\n'
    assert not (checkout / "reproduction" / "packs").exists()


@pytest.mark.slow
def test_run_moves_a_claim_on_and_packs_it_under_out(tmp_path):
    """The whole `run` path at --tiny on a copy of the checkout (about two minutes on 2 cores)."""
    repo = Path(SCRIPT).parents[1]
    copy = tmp_path / "repo"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "out", "__pycache__",
                                                                ".carry"))
    out = tmp_path / "out"
    done = _slot(copy, "run", "onlstm-parse-f1", "600", env={"OUT": str(out), "PY": sys.executable})
    # onlstm-parse-f1 has no paper-scale recipe: refused in one line, nothing packed
    assert done.returncode != 0 and "no paper-scale recipe" in (out / "log.txt").read_text()
    done = _slot(copy, "run", "om-listops", "600", env={"OUT": str(out), "PY": sys.executable, "EXTRA": "--tiny"})
    assert done.returncode == 0, (out / "log.txt").read_text()[-2000:]
    assert (out / "om-listops" / "manifest.json").exists()
    (record,) = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert record["claim"] == "om-listops" and record["scale"] == "paper" and record["complete"]
