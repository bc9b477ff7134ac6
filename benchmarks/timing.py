"""What the step-time benchmarks share: one timed call, the machine's load, and a main over named sizes.

    from benchmarks.timing import main_over_sizes, time_once
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence

import jax


def time_once(step: Callable, args: Sequence) -> float:
    """Seconds for one `step(*args)`, waited for on the device."""
    start = time.perf_counter()
    jax.block_until_ready(step(*args))
    return time.perf_counter() - start


def load_average() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main_over_sizes(description: str, sizes: dict[str, dict], default: str,
                    bench: Callable[[str, dict, int], object], argv: Sequence[str] | None = None) -> None:
    """`--repeats N --sizes a,b`: `bench(name, size, repeats)` for each named size, the devices and the load average
    printed before and after (a shared machine's load is part of what a time means)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sizes", default=default, help=f"comma-separated, from {sorted(sizes)}")
    args = parser.parse_args(argv)
    names = [n for n in args.sizes.split(",") if n]
    unknown = [n for n in names if n not in sizes]
    if unknown:
        parser.error(f"unknown size(s) {unknown}; choose from {sorted(sizes)}")
    print(f"devices: {jax.devices()}  cpus: {os.cpu_count()}  float32")
    print(f"load average before (1, 5, 15 min): {load_average()}")
    for name in names:
        bench(name, sizes[name], args.repeats)
    print(f"\nload average after (1, 5, 15 min): {load_average()}")
