"""When do UDGN's parsers collapse, and does the release's learning rate or the thesis' tag mixture avoid it?

In `tgjax reproduce udgn-uas` (5 seeds of configs/udgn_tiny.py) some seeds' parsers settle on a flat,
end-rooted structure: most words headed by a distant word on their right and the root at the last word
(benchmarks/udgn_seed_plateau.py --head-stats: 84 / 95 % of heads to the right against the gold's 69 %), and
their trees stay at the random-projective level however far their MLM improves. udgn_tiny departs from the
release's recipe in its learning rate (3e-3 against the release's Adam 1e-3, chosen to train in a minute) and
its batches (<= 512 tokens against the release's 4,096) and, like the release, leaves out the thesis' tag
mixture (eqs. 4.2.1-4.2.2). Three hypotheses, each a variant of the same runs (same seeds and data):

  release_lr     training.learning_rate=1e-3: the large step size throws the parser into the collapse;
  thesis_tags    model.num_tags=5: the shared tag embedding the release deleted steadies the parser;
  release_batch  training.token_budget=4096 for 225 steps (the tokens of 1,800 small steps): small, noisy
                 batches tip it there.

The trajectories of those runs point at a fourth: every parser starts near uniform with its ties broken
towards the last word (the end-rooted shape), and the runs that stay there are those whose parser grows sharp
(low entropy) before it leaves that shape. It is tested by a variant that is in neither the thesis nor the
release:

  parser_hold    training.parser_hold_steps=200: the parser's updates are zeroed for the first 200 steps,
                 while the masked LM learns; a parser that cannot commit early should not stay end-rooted.

Every run keeps a checkpoint every `--every` steps; each is read on the built-in *validation* split (heads:
the treebank's own marks): Chu-Liu/Edmonds tree UAS, the share of heads to the right, and how often the root is
the last word. A tree is called collapsed there when at least `--right-share` % of heads point right and the
root is the last word in at least `--root-last` % of sentences (the validation gold: 69 % and 36 %; the
collapsed seeds of the 1,800-step runs: 84 / 95 % and 82 / 88 %). The test split is
scored once per run, as the recipe does (the checkpoint of best validation MLM loss). Printed: per variant, the
test tree UAS over seeds (mean ± sd) beside the right chain, the seeds collapsed at the end, and per run the
validation trajectory, so that the step where a parser collapses can be read off.

    python benchmarks/udgn_collapse.py --out OUT                      # 5 variants x 5 seeds, ~70 min on 2 cores
    python benchmarks/udgn_collapse.py --out OUT --report             # the tables again from OUT/results.jsonl
    python benchmarks/udgn_collapse.py --report --results benchmarks/records/udgn_collapse_cpu.jsonl   # the docs' runs
    python benchmarks/udgn_collapse.py --out OUT --reread             # every checkpoint read again, then the tables
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from tgjax.reproduce.recipes import udgn_uas
from tgjax.reproduce.recipes.common import seeded_runs

VARIANTS = {
    "tiny": (),  # configs/udgn_tiny.py as the udgn-uas claim trains it
    "release_lr": ("training.learning_rate=1e-3",),
    "thesis_tags": ("model.num_tags=5",),
    # The release's batches (< 4,096 tokens against 512), as many tokens as 1,800 small steps: 225 steps, read
    # every 25 (applied after the common overrides, so these win).
    "release_batch": ("training.token_budget=4096", "training.num_steps=225", "checkpointing.interval_steps=25"),
    # Neither the thesis' nor the release's: the parser held at its initial state for 200 steps.
    "parser_hold": ("training.parser_hold_steps=200",),
}


COMMITTED = 0.5  # a parser below this normalised entropy has committed to its heads
GOLD_HEAD_RIGHT = 69.4  # % of the built-in validation split's gold heads to the right of their word


def sharpness(head_probs: list[np.ndarray]) -> float:
    """Mean over words of the head distribution's entropy over log(n), sentences of > 1 word: 1 for a uniform
    parser, 0 for one certain of every head."""
    entropies = [-(p * np.log(p + 1e-12)).sum(axis=1) / np.log(len(p)) for p in head_probs if len(p) > 1]
    return float(np.mean(np.concatenate(entropies)))


def is_collapsed(shape: dict, right_share: float, root_last: float) -> bool:
    return shape["head_right"] >= right_share and shape["root_last"] >= root_last


def trajectory(workdir: Path, gold) -> list[dict]:
    """Every committed checkpoint of a run, read on `gold` (the validation split): step, tree UAS, head shape, and
    the parser's normalised entropy (`sharpness`)."""
    from tgjax.eval.dependency import attachment_scores, tree_heads, tree_shape
    from tgjax.infer.api import load
    from tgjax.workdir import committed_steps, workdir_path

    rows = []
    for step in committed_steps(workdir_path(str(workdir))):
        parser = load(str(workdir), step).parser(command="udgn_collapse.py", parses="heads", batch_size=64)
        probs = parser.head_probs(gold.words)
        heads = [tree_heads(p) for p in probs]
        uas, _ = attachment_scores(heads, gold.heads)
        rows.append({"step": step, "valid_tree_uas": uas, **tree_shape(heads), "entropy": sharpness(probs)})
    return rows


def train_and_read(variant: str, seed: int, args, valid_gold) -> dict:
    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    common = (f"training.num_steps={args.steps}", f"checkpointing.interval_steps={args.every}",
              "checkpointing.max_to_keep=1000", *VARIANTS[variant])
    spec = seeded_runs(variant, udgn_uas.CONFIG, [seed], common, (), tiny=False)[0]
    workdir = args.out / spec.name
    began = time.monotonic()
    train(load_config(spec.config, list(spec.overrides)), workdir, quiet=True)
    trained_s = time.monotonic() - began
    test = udgn_uas.evaluate(spec, workdir, True, False)  # the best validation-loss checkpoint, as the claim
    path = trajectory(workdir, valid_gold)
    return {"variant": variant, "seed": seed, "train_seconds": round(trained_s, 1), "test": test,
            "trajectory": path}


def mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "-"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def report(rows: list[dict], right_share: float, root_last: float, stream=sys.stdout) -> None:
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    chain = rows[0]["test"]["right_chain_uas"]
    print(f"Test (built-in test split, checkpoint of best validation MLM loss); right chain {chain:.2f}\n",
          file=stream)
    print("| variant | seeds | test tree UAS | per seed | MLM perplexity | collapsed at the last step |", file=stream)
    print("|---|---|---|---|---|---|", file=stream)
    for variant in variants:
        runs = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["seed"])
        uas = [r["test"]["tree_uas"] for r in runs]
        ppl = [r["test"]["mlm_perplexity"] for r in runs]
        collapsed = [r["seed"] for r in runs if is_collapsed(r["trajectory"][-1], right_share, root_last)]
        print(f"| {variant} | {len(runs)} | {mean_sd(uas)} | {' / '.join(f'{u:.1f}' for u in uas)} | "
              f"{' / '.join(f'{p:.0f}' for p in ppl)} | {len(collapsed)} of {len(runs)} "
              f"({', '.join(map(str, collapsed)) or 'none'}) |", file=stream)
    print(f"\nEarly commitment: the parser's lowest entropy over its first stretch of collapsed checkpoints, "
          f"against how the run ends ({COMMITTED:g}: the line drawn)\n", file=stream)
    print("| lowest entropy while first collapsed | runs | end collapsed | test tree UAS, lowest–highest | above "
          "the right chain |", file=stream)
    print("|---|---|---|---|---|", file=stream)
    groups: dict[str, list[dict]] = {"below": [], "above": [], "never collapsed": []}
    for r in rows:
        low = first_collapse_entropy(r["trajectory"], right_share, root_last)
        groups["never collapsed" if low is None else ("below" if low < COMMITTED else "above")].append(r)
    for key, label in (("below", f"< {COMMITTED:g}"), ("above", f">= {COMMITTED:g}"), ("never collapsed", "never")):
        runs = groups[key]
        ends = sum(is_collapsed(r["trajectory"][-1], right_share, root_last) for r in runs)
        uas = [r["test"]["tree_uas"] for r in runs]
        spread = f"{min(uas):.1f}–{max(uas):.1f}" if uas else "-"
        above = sum(r["test"]["tree_uas"] > r["test"]["right_chain_uas"] for r in runs)
        print(f"| {label} | {len(runs)} | {ends} | {spread} | {above} |", file=stream)
    print(f"\nValidation trajectories per checkpoint step: tree UAS / heads to the right % / root last % / the "
          f"parser's normalised entropy; * = collapsed (right >= {right_share:g} %, root last >= {root_last:g} %)",
          file=stream)
    for variant in variants:
        runs = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["seed"])
        steps = sorted({p["step"] for r in runs for p in r["trajectory"]})
        print(f"\n{variant}:\n", file=stream)
        print("| seed | " + " | ".join(str(s) for s in steps) + " |", file=stream)
        print("|---|" + "---|" * len(steps), file=stream)
        for r in runs:
            by_step = {p["step"]: p for p in r["trajectory"]}
            cells = [_cell(by_step.get(s), right_share, root_last) for s in steps]
            print(f"| {r['seed']} | " + " | ".join(cells) + " |", file=stream)


def first_collapse_entropy(trajectory: list[dict], right_share: float, root_last: float) -> float | None:
    """The parser's lowest normalised entropy over its first stretch of collapsed checkpoints (from the first
    collapsed one to the next that is not); None when no checkpoint is collapsed."""
    stretch = []
    for point in trajectory:
        if is_collapsed(point, right_share, root_last):
            stretch.append(point.get("entropy", float("nan")))
        elif stretch:
            break
    return min(stretch) if stretch else None


def token_budget(variant: str) -> int:
    """The batch bound a variant trains with (tokens per step, at most)."""
    from tgjax.train.config import load_config

    return int(load_config(udgn_uas.CONFIG, list(VARIANTS[variant])).training.token_budget)


def plot(rows: list[dict], path: Path) -> bool:
    """One panel per variant: % of heads to the right (validation) against tokens seen, a line per seed, dashed
    where the run ends collapsed; the gold's share as a grey line. False when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figure", file=sys.stderr)
        return False
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    columns = min(3, len(variants))
    lines = -(-len(variants) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 3.2 * lines), sharey=True, squeeze=False)
    for ax in axes.flat[len(variants):]:
        ax.set_visible(False)
    for ax, variant in zip(axes.flat, variants):
        for r in sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["seed"]):
            tokens = token_budget(variant)
            xs = [p["step"] * tokens / 1e3 for p in r["trajectory"]]
            ys = [p["head_right"] for p in r["trajectory"]]
            ends_collapsed = r["trajectory"] and is_collapsed(r["trajectory"][-1], 80.0, 70.0)
            ax.plot(xs, ys, "--" if ends_collapsed else "-", marker=".", label=str(r["seed"]))
        ax.axhline(GOLD_HEAD_RIGHT, color="grey", linewidth=0.8)
        ax.set_title(variant)
        ax.set_xlabel("tokens seen (thousands; batch bound)")
    for row in axes:
        row[0].set_ylabel("heads to the right, % (valid.)")
    axes.flat[0].legend(title="seed (dashed: ends collapsed)", fontsize=7, title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _cell(point: dict | None, right_share: float, root_last: float) -> str:
    if point is None:
        return ""
    entropy = f" / {point['entropy']:.2f}" if "entropy" in point else ""
    return (f"{point['valid_tree_uas']:.0f} / {point['head_right']:.0f} / {point['root_last']:.0f}{entropy}"
            + (" *" if is_collapsed(point, right_share, root_last) else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="one workdir per run, and results.jsonl")
    parser.add_argument("--results", type=Path, default=None,
                        help="the runs' records (default OUT/results.jsonl; with --report, a kept record)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(udgn_uas.SEEDS))
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--every", type=int, default=100,
                        help="checkpoint interval (validation, which drives the plateau schedule, stays the config's)")
    parser.add_argument("--right-share", type=float, default=80.0)
    parser.add_argument("--root-last", type=float, default=70.0)
    parser.add_argument("--report", action="store_true", help="print the tables of OUT/results.jsonl only")
    parser.add_argument("--figure", type=Path, default=None, help="also draw the trajectories (PNG)")
    parser.add_argument("--reread", action="store_true",
                        help="read every checkpoint of the runs in OUT again (trains nothing), then report")
    args = parser.parse_args(argv)
    if args.out is None and not (args.report and args.results):
        parser.error("--out is needed (or --report with --results)")
    results = args.results or args.out / "results.jsonl"
    if args.reread:
        from tgjax.eval.dependency import read_gold

        valid_gold = read_gold(["builtin"], split="valid")
        rows = _read(results)
        for row in rows:
            row["trajectory"] = trajectory(args.out / f"{row['variant']}-seed{row['seed']}", valid_gold)
        results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif not args.report:
        from tgjax.eval.dependency import read_gold

        args.out.mkdir(parents=True, exist_ok=True)
        done = {(r["variant"], r["seed"]) for r in _read(results)}
        valid_gold = read_gold(["builtin"], split="valid")
        for variant in args.variants:
            for seed in args.seeds:
                if (variant, seed) in done:
                    continue
                row = train_and_read(variant, seed, args, valid_gold)
                with results.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                last = row["trajectory"][-1]
                print(f"{variant} seed {seed}: {row['train_seconds']:.0f} s; test tree UAS "
                      f"{row['test']['tree_uas']:.2f}, MLM perplexity {row['test']['mlm_perplexity']:.1f}; last "
                      f"step on validation: UAS {last['valid_tree_uas']:.1f}, right {last['head_right']:.0f} %, "
                      f"root last {last['root_last']:.0f} %", flush=True)
    rows = _read(results)
    if not rows:
        print(f"error: no runs in {results}", file=sys.stderr)
        return 1
    report(rows, args.right_share, args.root_last)
    if args.figure is not None and plot(rows, args.figure):
        print(f"\nfigure: {args.figure}")
    return 0


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


if __name__ == "__main__":
    raise SystemExit(main())
