"""Stack attention on real English: Tf+Nd against Tf and Tf+Sup on Tale of Two Cities sentences (§7, Table 2).

`tgjax reproduce stack-ptb-table2` judges Table 2's claim (Tf+Nd models PTB sentences with a lower cross-entropy
than Tf and Tf+Sup) on the built-in grammar, where all three toy models sit within 0.015 nats of the grammar's
entropy. This asks the same on English prose: seeds of `configs/stack_lm_totc.py` (§7's layout at a quarter of its
width, 1,500 steps) with each of the three stacks, every run read at its best validation checkpoint and scored
exactly on the treebank's test split (293 sentences, 6,126 words): nats per predicted token (the words and
`<eos>`) and the word perplexity (per word, `<eos>` included, as Table 2's PTB perplexity counts it). Tf+Nd is
judged against the better of the two baselines, each over its seeds (`tgjax.reproduce.verdict`).

    python benchmarks/stack_lm_totc.py --models tf_nd --seeds 1 2 3 --out OUT    # train (or resume) and score
    python benchmarks/stack_lm_totc.py --report --results benchmarks/records/stack_lm_totc_cpu.jsonl

One process trains its runs one after another; two processes (one CPU core each, `taskset`) train two models at
once. `JAX_COMPILATION_CACHE_DIR` shared between them saves the later seeds' compilations (9 shapes a model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

CONFIG = "configs/stack_lm_totc.py"
STACKS = {"tf_nd": "nondeterministic", "tf": "none", "tf_sup": "superposition"}  # run name -> model.stack
LABELS = {"tf_nd": "Tf+Nd", "tf": "Tf", "tf_sup": "Tf+Sup"}


def test_sentences() -> list[list[str]]:
    """The leaves of each tree of the treebank's test split (beside the config's validation file)."""
    from tgjax.data.word_stream import read_sentences
    from tgjax.train.config import load_config

    path = Path(load_config(CONFIG, []).data.valid_path).with_name("test.txt")
    return read_sentences("treebank", str(path), "test")


def score(workdir: Path, sentences: list[list[str]]) -> dict:
    """The best validation checkpoint's exact test cross-entropy per token and word perplexity."""
    import math

    import tgjax

    model = tgjax.load(workdir, "best")
    results = model.scorer().search(sentences)
    tokens = sum(len(words) + 1 for words in sentences)  # each word and <eos>
    nats = -sum(r.log_prob for r in results)
    return {"checkpoint": model.step, "test_cross_entropy": nats / tokens, "test_perplexity": math.exp(nats / tokens),
            "test_sentences": len(sentences), "test_tokens": tokens}


def best_validation(workdir: Path) -> dict:
    """The step, loss and perplexity of the run's lowest validation loss."""
    from tgjax.reproduce.recipes.common import metrics_records

    best = min((r for r in metrics_records(workdir) if r.get("split") == "valid"), key=lambda r: r["valid_loss"])
    return {"best_step": best["step"], "valid_cross_entropy": best["valid_loss"],
            "valid_perplexity": best["valid_perplexity"]}


def mean_sd(values: list[float], digits: int) -> str:
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def summary(rows: list[dict]) -> str:
    """A markdown table: a line per run, then mean ± sd per model; then Tf+Nd's verdict against the better
    baseline (by mean test cross-entropy)."""
    from tgjax.reproduce.verdict import judge, spread

    lines = ["| run | parameters | best step | valid cross-entropy | test cross-entropy | test perplexity |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['parameters']:,} | {r['best_step']} | {r['valid_cross_entropy']:.3f} | "
                     f"{r['test_cross_entropy']:.3f} | {r['test_perplexity']:.1f} |")
    groups = {model: [r for r in rows if r["name"].startswith(model + "-seed")] for model in STACKS}
    groups = {model: group for model, group in groups.items() if group}
    for model, group in groups.items():
        lines.append(f"| **{LABELS[model]}** ({len(group)} seeds) | {group[0]['parameters']:,} | "
                     f"{', '.join(str(r['best_step']) for r in group)} | "
                     f"{mean_sd([r['valid_cross_entropy'] for r in group], 3)} | "
                     f"{mean_sd([r['test_cross_entropy'] for r in group], 3)} | "
                     f"{mean_sd([r['test_perplexity'] for r in group], 1)} |")
    baselines = [m for m in ("tf", "tf_sup") if m in groups]
    if "tf_nd" in groups and baselines:
        best = min(baselines, key=lambda m: statistics.mean(r["test_cross_entropy"] for r in groups[m]))
        ours, theirs = ([r["test_cross_entropy"] for r in groups[m]] for m in ("tf_nd", best))
        verdict, _ = judge(ours, theirs, higher_is_better=False,
                           run_seconds=max(r["train_seconds"] for r in rows))
        noise = max(spread(ours).sd or 0.0, spread(theirs).sd or 0.0)
        lines.append(f"\nTf+Nd against the better baseline ({LABELS[best]}), test cross-entropy: "
                     f"{spread(theirs).mean - spread(ours).mean:+.3f} nats per token below it against a spread of "
                     f"{noise:.3f} over {min(len(ours), len(theirs))} seeds: {verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--models", nargs="+", choices=tuple(STACKS), default=list(STACKS))
    parser.add_argument("--out", type=Path, default=None, help="one workdir per run, and results.jsonl")
    parser.add_argument("--results", type=Path, default=None, help="the runs' scores (default: OUT/results.jsonl)")
    parser.add_argument("--report", action="store_true", help="print the table from the results only")
    args = parser.parse_args(argv)
    if args.out is None and (args.results is None or not args.report):
        parser.error("--out is needed to train; --report reads --results (or OUT/results.jsonl)")
    results = args.results or args.out / "results.jsonl"
    if not args.report:
        from tgjax.train.config import load_config
        from tgjax.train.loop import train

        args.out.mkdir(parents=True, exist_ok=True)
        sentences = test_sentences()
        for model in args.models:
            for seed in args.seeds:
                name, workdir = f"{model}-seed{seed}", args.out / f"{model}-seed{seed}"
                config = load_config(f"{CONFIG}:{STACKS[model]}", [f"training.seed={seed}"])
                began = time.monotonic()
                result = train(config, workdir, quiet=True)  # resumes a run
                trained_s = time.monotonic() - began
                row = {"name": name, "seed": seed, "steps": result.final_step, "train_seconds": round(trained_s, 1),
                       "parameters": result.num_parameters, **best_validation(workdir), **score(workdir, sentences)}
                with results.open("a") as out:
                    out.write(json.dumps(row) + "\n")
                print(f"{name}: {result.final_step} steps ({trained_s:.0f} s), best validation cross-entropy "
                      f"{row['valid_cross_entropy']:.3f} at step {row['best_step']}; "
                      f"test {row['test_cross_entropy']:.3f} nats per token "
                      f"(perplexity {row['test_perplexity']:.1f})", flush=True)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    latest = {r["name"]: r for r in rows}  # a run scored twice: its latest scoring
    print(summary(list(latest.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
