"""What a chunk of `tgjax reproduce` spends on Ordered Memory's data, before and after the per-process memory.

The reproduction runner builds a Trainer per chunk, in one process; each build loads its config's data
(`tgjax.data.classification_corpus.load_splits`). Without the memory every build parsed the 250k lines of the
logic files again, or drew the ListOps trees again. This times `load_splits` for each config: the first load
in the process (the baseline: what every chunk paid before) and a later one (what every chunk after the first
pays now), and prints their ratio.

    python benchmarks/chunk_data.py
    python benchmarks/chunk_data.py --config configs/om_logic.py:cpu_long --override data.split=C
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tgjax.data import classification_corpus as corpus  # noqa: E402
from tgjax.train.config import load_config  # noqa: E402

DEFAULTS = [("configs/om_logic.py:cpu_long", ["data.split=A"]), ("configs/om_listops.py:cpu", [])]


def seconds_to_load(config) -> float:
    started = time.perf_counter()
    corpus.load_splits(config.dataset, config.data)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="one config (default: om_logic :cpu_long A and om_listops :cpu)")
    parser.add_argument("--override", action="append", default=[], help="a.b=v, for --config")
    parser.add_argument("--repeats", type=int, default=3, help="loads of each kind; the median is compared")
    args = parser.parse_args(argv)
    cases = [(args.config, args.override)] if args.config else DEFAULTS
    for spec, overrides in cases:
        config = load_config(spec, overrides)
        if config.dataset == "logic" and not Path(config.data.logic_dir).is_dir():
            print(f"{spec}: no logic files at {config.data.logic_dir}; skipped")
            continue
        first, later = [], []
        for _ in range(args.repeats):
            corpus._read_logic_files.cache_clear()
            corpus.generated_listops.cache_clear()
            first.append(seconds_to_load(config))
            later.append(seconds_to_load(config))
        cold, warm = statistics.median(first), statistics.median(later)
        print(f"{spec} {' '.join(overrides)}: first load {cold:.2f} s (every chunk before), later loads "
              f"{warm:.2f} s; {cold / warm:.1f}x less per chunk after the first (median of {args.repeats})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
