"""What the compilation cache of `tgjax reproduce` saves: one claim's `--tiny` runs, with and without it.

`tgjax reproduce` trains each run in chunks, each a new Trainer whose step functions JAX compiles again, and
scores each run with programs of its own; at `--tiny` size nearly all of a call is compiling. This runs the
same call in fresh processes (so no in-memory cache is shared): once with `--no-compilation-cache` (the
baseline), then with the cache in a fresh work folder (cold: programs are compiled and written, and read back by
the later chunks and seeds of the same call), then again over that folder's cache (warm: what a resumed call on
the same machine sees). It prints each call's wall time and its ratio to the baseline.

    python benchmarks/compile_cache.py                      # stack-ptb-table2: 3 models, 2 chunks each
    python benchmarks/compile_cache.py --claim om-logic-length --repeats 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_call(claim: str, folder: Path, budget_s: float, *, cache: bool, work: Path) -> float:
    """Wall seconds of one `tgjax reproduce CLAIM --tiny` in a fresh process, training in `work`."""
    command = [sys.executable, "-m", "tgjax.cli", "reproduce", claim, "--tiny", "--quiet", "--budget-s",
               str(budget_s), "--workdir", str(work), "--output", str(folder / "packed"),
               "--results", str(folder / "records.jsonl")]
    if not cache:
        command.append("--no-compilation-cache")
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claim", default="stack-ptb-table2", help="a runnable claim (tgjax reproduce --help)")
    parser.add_argument("--budget-s", type=float, default=600.0, help="each call's budget (the tiny runs finish)")
    parser.add_argument("--repeats", type=int, default=1, help="calls per arm; the median is compared")
    parser.add_argument("--json", type=Path, default=None, help="also write the timings here")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"no cache": [], "cache, cold": [], "cache, warm": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as temporary:
            folder = Path(temporary)
            times["no cache"].append(one_call(args.claim, folder, args.budget_s, cache=False, work=folder / "a"))
            times["cache, cold"].append(one_call(args.claim, folder, args.budget_s, cache=True, work=folder / "b"))
            # The cold call's work folder with its runs forgotten and its cache kept: the same claim again.
            (folder / "b" / "state.json").unlink()
            shutil.rmtree(folder / "b" / "runs")
            times["cache, warm"].append(one_call(args.claim, folder, args.budget_s, cache=True, work=folder / "b"))
    baseline = statistics.median(times["no cache"])
    print(f"tgjax reproduce {args.claim} --tiny, wall seconds per call (median of {args.repeats}), fresh processes:")
    for arm, values in times.items():
        median = statistics.median(values)
        print(f"  {arm:<12} {median:7.1f} s   {baseline / median:5.2f}x the no-cache call")
    if args.json:
        args.json.write_text(json.dumps({"claim": args.claim, "seconds": times}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
