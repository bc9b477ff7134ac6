"""Does UDGN's tree quality follow its MLM fit? The udgn-uas seeds that stalled, trained longer.

In `tgjax reproduce udgn-uas` (5 seeds of configs/udgn_tiny.py, 600 steps), two seeds reach an MLM test
perplexity of about 73 and their Chu-Liu/Edmonds trees beat the right chain; three stall at 88-140 and their
trees score about 21-26 UAS. The hypothesis: those seeds are under-trained, not broken; trained for more steps
(the schedule is a plateau halving on validation, so a longer run is the same run continued), they reach the good
seeds' perplexity and their trees move above the chain. This trains the given seeds for `--steps` steps and
scores each exactly as the recipe does (the best validation checkpoint, `tgjax eval dependency` on the built-in
test split), printing per seed: steps, MLM perplexity, tree / argmax UAS and the right chain.

    python benchmarks/udgn_seed_plateau.py --seeds 3333 4444 5555 --steps 1800 --out OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tgjax.reproduce.recipes import udgn_uas
from tgjax.reproduce.recipes.common import seeded_runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3333, 4444, 5555])
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--out", type=Path, required=True, help="one workdir per seed, and results.jsonl")
    args = parser.parse_args(argv)

    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    args.out.mkdir(parents=True, exist_ok=True)
    common = (*udgn_uas.COMMON, f"training.num_steps={args.steps}")
    for spec in seeded_runs("udgn", udgn_uas.CONFIG, args.seeds, common, (), tiny=False):
        workdir = args.out / spec.name
        began = time.monotonic()
        result = train(load_config(spec.config, list(spec.overrides)), workdir, quiet=True)
        trained_s = time.monotonic() - began
        scores = udgn_uas.evaluate(spec, workdir, True, False)
        row = {"seed": spec.seed, "steps": result.final_step, "train_seconds": round(trained_s, 1), **scores}
        with (args.out / "results.jsonl").open("a") as results:
            results.write(json.dumps(row) + "\n")
        print(f"seed {spec.seed}: {result.final_step} steps in {trained_s:.0f} s; MLM perplexity "
              f"{scores['mlm_perplexity']:.1f}; tree UAS {scores['tree_uas']:.2f} (argmax {scores['argmax_uas']:.2f}) "
              f"vs right chain {scores['right_chain_uas']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
