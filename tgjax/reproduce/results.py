"""The automated runs' records: one JSON line per `tgjax reproduce CLAIM` call, appended to
reproduction/runs.jsonl (the curated claims file is never rewritten), with where and when it ran."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

from tgjax.reproduce.claims import REPO_ROOT, in_checkout, project_file

# The project's records: what the ledger reads by default (in an installed tgjax, the copy it ships).
RESULTS_FILE = project_file("runs.jsonl")


def default_results_file(output: str | Path) -> Path:
    """Where a claim run appends its record by default: the checkout's reproduction/runs.jsonl, or, in an
    installed tgjax (whose shipped records are read-only), runs.jsonl in the run's --output folder."""
    return RESULTS_FILE if in_checkout() else Path(output) / "runs.jsonl"


def commit() -> str:
    """The checkout's commit, `+dirty` when tracked files differ from it; outside a git checkout, the environment's
    TGJAX_COMMIT (a copy of a checkout without its .git, as on an accelerator: benchmarks/ledger_slot.sh sets it),
    else "unknown"."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=20,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain"))  # untracked code counts: it ran too
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("TGJAX_COMMIT") or "unknown"
    return head + ("+dirty" if dirty else "")


def hardware() -> str:
    """The device the runs used: the accelerator's kind, or the CPU with its core count."""
    import jax

    device = jax.devices()[0]
    if device.platform == "cpu":
        return f"cpu ({os.cpu_count()} cores)"
    return f"{len(jax.devices())} x {device.device_kind}"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def append_record(record: dict, path: str | Path = RESULTS_FILE) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, allow_nan=False) + "\n")


def read_records(path: str | Path = RESULTS_FILE) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
