"""Does the ON-LSTM's agreement follow its LM fit? The onlstm-targeted-syntax runs, trained for more epochs.

In `tgjax reproduce onlstm-targeted-syntax` (10 epochs of the ON-LSTM at lm_table.py's size and of the same
config as a plain LSTM, 5 seeds each), every LSTM seed gets all 120 pairs across one embedding right, at a
validation perplexity of 22.7-24.3, while the ON-LSTM's seeds spread from 21.7 to 100 % at 22.9-34.4: the one
ON-LSTM seed at the LSTM's perplexity is the one at 100 %. The hypothesis: the ON-LSTM fits the grammar more
slowly, and its agreement follows its fit; trained until its perplexity matches the LSTM's, it agrees as well.
This trains the given models and seeds for `--epochs` epochs (the recipe's config otherwise: SGD with NT-ASGD,
whose switch does not depend on the run's length, so a longer run is the same run continued) and scores each
exactly as the recipe does (`onlstm_syntax.evaluate`: the best validation checkpoint, the agreement sets by the
chain rule), printing per run its validation perplexity beside each agreement set, a summary per model (mean ±
sd), and Spearman's rank correlation between validation perplexity and agreement across one embedding over
every run scored.

    python benchmarks/onlstm_agreement_fit.py --epochs 30 --models onlstm --out OUT
    python benchmarks/onlstm_agreement_fit.py --out OUT --report     # the tables again, from OUT/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from scipy.stats import spearmanr

from tgjax.reproduce.recipes import onlstm_syntax
from tgjax.reproduce.recipes.common import onlstm_and_lstm_runs

COLUMNS = ("valid_perplexity", "across_accuracy", "across_pp", "across_subject_relative", "across_object_relative",
           "simple_accuracy", "depth2_accuracy", "depth3_accuracy")


def runs(models: list[str], seeds: list[int], epochs: int) -> list:
    """The recipe's runs of `models` ("onlstm", "lstm") and `seeds`, for `epochs` epochs."""
    common = (*onlstm_syntax.COMMON, f"training.num_epochs={epochs}")  # the later override wins
    specs = onlstm_and_lstm_runs(onlstm_syntax.CONFIG, seeds, common, (), False, name_suffix=f"-e{epochs}")
    return [spec for model in models for spec in specs if spec.name.startswith(f"{model}-e")]


def summary(rows: list[dict]) -> str:
    """A markdown table: one line per run, then mean ± sd per model, then the rank correlation."""
    head = "| run | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    lines += [f"| {r['name']} | " + " | ".join(f"{r[c]:.2f}" for c in COLUMNS) + " |" for r in rows]
    for model in dict.fromkeys(r["name"].split("-seed")[0] for r in rows):
        group = [r for r in rows if r["name"].startswith(model + "-seed")]
        cells = [f"{statistics.mean(r[c] for r in group):.2f}"
                 + (f" ± {statistics.stdev(r[c] for r in group):.2f}" if len(group) > 1 else "") for c in COLUMNS]
        lines.append(f"| **{model}** ({len(group)} seeds) | " + " | ".join(cells) + " |")
    if len(rows) > 2:
        rho = spearmanr([r["valid_perplexity"] for r in rows], [r["across_accuracy"] for r in rows]).statistic
        lines.append(f"\nSpearman rho (validation perplexity vs agreement across one embedding), {len(rows)} runs: "
                     f"{rho:+.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--models", default="onlstm", help="comma-separated: onlstm, lstm")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(onlstm_syntax.SEEDS))
    parser.add_argument("--out", type=Path, required=True, help="one workdir per run, and results.jsonl")
    parser.add_argument("--report", action="store_true", help="train nothing: the tables of OUT/results.jsonl")
    args = parser.parse_args(argv)
    if args.report:
        print(summary([json.loads(line) for line in (args.out / "results.jsonl").read_text().splitlines()]))
        return 0
    models = args.models.split(",")
    if not set(models) <= {"onlstm", "lstm"} or args.epochs < 1:
        parser.error(f"--models takes onlstm and/or lstm, --epochs a positive count; got {args.models!r}, "
                     f"{args.epochs}")

    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in runs(models, args.seeds, args.epochs):
        workdir = args.out / spec.name
        began = time.monotonic()
        result = train(load_config(spec.config, list(spec.overrides)), workdir, quiet=True)
        trained_s = time.monotonic() - began
        scores = onlstm_syntax.evaluate(spec, workdir, True, False)
        row = {"name": spec.name, "seed": spec.seed, "epochs": args.epochs, "steps": result.final_step,
               "train_seconds": round(trained_s, 1), **scores}
        rows.append(row)
        with (args.out / "results.jsonl").open("a") as results:
            results.write(json.dumps(row) + "\n")
        print(f"{spec.name}: {result.final_step} steps in {trained_s:.0f} s; validation perplexity "
              f"{scores['valid_perplexity']:.2f}; agreement across one embedding {scores['across_accuracy']:.2f} %, "
              f"simple {scores['simple_accuracy']:.2f} %", flush=True)
    print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
