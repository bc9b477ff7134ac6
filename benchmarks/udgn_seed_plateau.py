"""Does UDGN's tree quality follow its MLM fit? The udgn-uas seeds that stalled, trained longer.

In `tgjax reproduce udgn-uas` (5 seeds of configs/udgn_tiny.py, 600 steps), two seeds reach an MLM test
perplexity of about 73 and their Chu-Liu/Edmonds trees beat the right chain; three stall at 88-140 and their
trees score about 21-26 UAS. The hypothesis: those seeds are under-trained, not broken; trained for more steps
(the schedule is a plateau halving on validation, so a longer run is the same run continued), they reach the good
seeds' perplexity and their trees move above the chain. This trains the given seeds for `--steps` steps and
scores each exactly as the recipe does (the best validation checkpoint, `tgjax eval dependency` on the built-in
test split), printing per seed: steps, MLM perplexity, tree / argmax UAS and the right chain.

With `--head-stats` it trains nothing and describes the Chu-Liu/Edmonds trees of the runs already in OUT beside
the gold's: the share of heads to the right of their word, of adjacent heads, the mean head distance, and where
the root sits (what a parser settles on, when its UAS does not follow its perplexity).

    python benchmarks/udgn_seed_plateau.py --seeds 3333 4444 5555 --steps 1800 --out OUT
    python benchmarks/udgn_seed_plateau.py --seeds 3333 4444 5555 --out OUT --head-stats
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tgjax.reproduce.recipes import udgn_uas
from tgjax.reproduce.recipes.common import seeded_runs


def print_head_statistics(out: Path, seeds: list[int]) -> None:
    from tgjax.eval.dependency import read_gold, tree_heads, tree_shape
    from tgjax.infer.api import load

    gold = read_gold(["builtin"], split="test")
    rows = [("gold (builtin heads)", tree_shape(gold.heads))]
    for spec in seeded_runs("udgn", udgn_uas.CONFIG, seeds, (), (), tiny=False):
        parser = load(str(out / spec.name), "best").parser(command="udgn_seed_plateau.py", parses="heads",
                                                            batch_size=64)
        rows.append((f"seed {spec.seed} tree", tree_shape([tree_heads(p) for p in parser.head_probs(gold.words)])))
    print("| heads of | to the right, % | adjacent, % | mean distance | root last, % | root first, % |")
    print("|---|---|---|---|---|---|")
    for name, st in rows:
        print(f"| {name} | {st['head_right']:.1f} | {st['adjacent']:.1f} | {st['mean_distance']:.2f} | "
              f"{st['root_last']:.1f} | {st['root_first']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3333, 4444, 5555])
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--out", type=Path, required=True, help="one workdir per seed, and results.jsonl")
    parser.add_argument("--head-stats", action="store_true", help="describe the trees of the runs in --out")
    args = parser.parse_args(argv)
    if args.head_stats:
        print_head_statistics(args.out, args.seeds)
        return 0

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
