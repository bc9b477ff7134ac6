"""The CFL tasks' true probabilities (the reference side of the cross-entropy difference): scaled vs log space.

Every validation and test string of a stack-attention run needs p_G(w), the
inside algorithm over the task's grammar (`WeightedCFG.log_prob`). The
baseline is the log-space chart (`inside_log_chart`: an exp per split point
and binary rule); `log_prob` now runs on scaled real numbers (a matrix
product per span, an exp per chart cell). For each task this times both on
the same strings, `--per-length` of every valid length in the paper's test
range 40–100, checks that they agree to float64 rounding, and prints the
ratio. On an H200 slot the Hardest CFL's 610 test strings (10 per length)
held all three jobs past a 262-s deadline; this is what the change is for.

    python benchmarks/cfl_true_probabilities.py                  # 2 strings per length, ~1 min
    python benchmarks/cfl_true_probabilities.py --per-length 10  # the grid's test set
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from tgjax.data.cfl import TASK_NAMES, cfl_task


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=",".join(TASK_NAMES))
    ap.add_argument("--per-length", type=int, default=2)
    ap.add_argument("--min-length", type=int, default=40)
    ap.add_argument("--max-length", type=int, default=100)
    args = ap.parse_args()
    print(f"{'task':<18} {'strings':>7} {'log space s':>12} {'scaled s':>9} {'speed-up':>9} {'max |diff|':>11}")
    for name in args.tasks.split(","):
        task = cfl_task(name)
        grammar = task.grammar
        strings = task.sample_per_length(args.per_length, args.min_length, args.max_length, np.random.default_rng(0))
        root = grammar.nonterminals.index(grammar.start)
        start = time.perf_counter()
        log_space = np.array([grammar.inside_log_chart(s)[0, len(s), root] for s in strings])
        log_space_seconds = time.perf_counter() - start
        start = time.perf_counter()
        scaled = np.array([grammar.log_prob(s) for s in strings])
        scaled_seconds = time.perf_counter() - start
        diff = float(np.max(np.abs(scaled - log_space)))
        print(f"{name:<18} {len(strings):>7} {log_space_seconds:>12.2f} {scaled_seconds:>9.2f} "
              f"{log_space_seconds / scaled_seconds:>8.1f}x {diff:>11.1e}", flush=True)
        if not diff <= 1e-9 * max(1.0, float(np.max(np.abs(log_space)))):
            raise SystemExit(f"{name}: the scaled inside disagrees with the log-space chart by {diff}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
