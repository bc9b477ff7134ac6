"""The demo's Pushdown-LM on agreement pairs, scored with its own tapes and with the gold tape.

    python benchmarks/pushdown_agreement_tapes.py --workdir runs/pushdown_tapes [--seeds 42,43,44]

In the demo (`tgjax demo`) the Pushdown-LM's agreement accuracy at depths 2
and 3 is far below TG's. Either its beam reads wrong stack tapes on the deep
embeddings (its own attachments) or the model prefers the wrong verb even on
the gold tape. For each seed S this trains the demo's Pushdown-LM
(`tgjax.demo._train_one("pushdown_lm", ...)`: configs/pushdown_tiny.py with
`PUSHDOWN_SETTINGS`, plus `training.seed=S`; 42 is the demo's own seed) in
WORKDIR/seed_S (resumed or reused when there), then scores the demo's pairs
(`tgjax.demo.evaluation_data()`: 60 simple, 120 with an attractor, 60 at
depth 2, 60 at depth 3) four ways (`tgjax.eval.pushdown_tapes`):

  (a) the beam's log p(x) (the demo's number: beam 20, final attachment scored),
  (b) log p(x, y_gold) on the gold tree's tape (the trainer's conversion),
  (c) the word terms alone on the gold tape,
  (d) the word terms alone on the beam's best tape,

and prints one table, agreement accuracy (%) per scoring and column, mean ±
sd over the seeds (sample sd), with the share of the pairs' sentences whose
beam tape is the gold tape. The numbers (per seed, per construction too) go
to WORKDIR.json, next to the workdir (`--json` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

COLUMNS = ("simple", "attractor", "depth 2", "depth 3")


def _mean_sd(values: list[float]) -> tuple[float, float]:
    array = np.asarray(values, float)
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else math.nan


def _cell(values: list[float]) -> str:
    mean, sd = _mean_sd([100 * v for v in values])
    return f"{mean:5.1f} ± {sd:4.1f}" if not math.isnan(sd) else f"{mean:5.1f}"


def format_table(summaries: list[dict]) -> str:
    """Rows: the four scorings, then the beam-tape = gold-tape share; columns `COLUMNS`; mean ± sd over runs."""
    from tgjax.eval.pushdown_tapes import SCORING_TITLES, SCORINGS

    width = 16
    lines = [f"{'agreement accuracy (%)':<26}" + "".join(f"{c:>{width}}" for c in COLUMNS)]
    for scoring in SCORINGS:
        lines.append(f"{SCORING_TITLES[scoring]:<26}" + "".join(
            f"{_cell([s[c]['accuracy'][scoring]['all'] for s in summaries]):>{width}}" for c in COLUMNS))
    lines.append(f"{'beam tape = gold tape':<26}" + "".join(
        f"{_cell([s[c]['beam_is_gold']['all'] for s in summaries]):>{width}}" for c in COLUMNS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="runs/pushdown_tapes", help="one run per seed in WORKDIR/seed_S")
    parser.add_argument("--seeds", default="42,43,44", help="training.seed of each run, comma-separated "
                                                           "(default 42,43,44; 42 is the demo's)")
    parser.add_argument("--json", default=None, help="where the numbers go (default WORKDIR.json)")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not seeds:
        parser.error("--seeds: at least one seed")
    workdir = Path(args.workdir)
    output = Path(args.json) if args.json else workdir.parent / f"{workdir.name}.json"

    import tgjax
    from tgjax.demo import PUSHDOWN_BEAM, _train_one, evaluation_data
    from tgjax.eval.pushdown_tapes import score_pairs

    start = time.perf_counter()
    _, simple, attractor, deep = evaluation_data()
    pairs = [*simple, *attractor, *(p for depth in sorted(deep) for p in deep[depth])]
    runs: dict[str, dict] = {}
    for seed in seeds:
        run = workdir / f"seed_{seed}"
        num_parameters, train_seconds, valid_loss = _train_one("pushdown_lm", run, [f"training.seed={seed}"],
                                                               sys.stderr)
        began = time.perf_counter()
        loaded = tgjax.load(run)
        summary = score_pairs(loaded, pairs).summary()
        runs[str(seed)] = {"workdir": str(run), "step": loaded.step, "num_parameters": num_parameters,
                           "train_seconds": train_seconds, "valid_loss": valid_loss,
                           "eval_seconds": time.perf_counter() - began, "groups": summary}
        print(f"\n== seed {seed} (step {loaded.step}, valid loss {valid_loss:.4f}, "
              f"{runs[str(seed)]['eval_seconds']:.0f}s to score)\n{format_table([summary])}", file=sys.stderr,
              flush=True)
    summaries = [r["groups"] for r in runs.values()]
    table = format_table(summaries)
    wall = time.perf_counter() - start
    print(f"\nPushdown-LM (the demo's recipe), {len(seeds)} seed(s) {', '.join(map(str, seeds))}; "
          f"{len(simple)} simple pairs, {len(attractor)} with an attractor, "
          f"{', '.join(f'{len(deep[d])} at depth {d}' for d in sorted(deep))}; beam {PUSHDOWN_BEAM}; "
          f"mean ± sd over seeds\n")
    print(table)
    print(f"\n(total {wall:.0f}s; numbers in {output})")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({
        "command": " ".join(["python benchmarks/pushdown_agreement_tapes.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "seeds": seeds, "beam_size": PUSHDOWN_BEAM, "columns": list(COLUMNS), "table": table,
        "mean_sd": {c: {s: _mean_sd([g[c]["accuracy"][s]["all"] for g in summaries])
                        for s in summaries[0][c]["accuracy"]} | {
                            "beam_is_gold": _mean_sd([g[c]["beam_is_gold"]["all"] for g in summaries])}
                    for c in COLUMNS},
        "runs": runs, "wall_seconds": wall, "cpu_count": os.cpu_count(), "machine": platform.machine(),
    }, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
