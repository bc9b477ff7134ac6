"""`tgjax sample`: well-formed trees sampled from a trained TG, TXL (CC) or Pushdown-LM workdir.

    tgjax sample --workdir runs/tiny --num-samples 5 --temperature 0.8 --top-p 0.95 --prompt "(S (NP the"

The sampling itself (constraints, temperature, top-k, top-p) is the model's
`Sampler` capability (`tgjax.load(workdir).sampler(...)`: `tgjax.infer.sampling`
for TG / TXL (CC), `tgjax.infer.pushdown_sampling` for a Pushdown-LM); this
module parses the arguments and writes the trees.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tgjax.limits import TREEBANK_MAX_WORDS, add_max_words_arg, check_max_words, check_prompt
from tgjax.outputs import OutputError, check_output, dumps_json, write_text


def _load(workdir: str, step: str):
    """`tgjax.load(workdir, step)` (imported here: tests replace this function)."""
    from tgjax.infer.api import load

    return load(workdir, step)


def write_samples(samples: Sequence, args: argparse.Namespace) -> None:
    """Writes one line per sample to stdout, or to `args.output`: the bracketed tree, with `args.log_probs`
    its log p and a tab first; with `args.json`, a JSON object of the tree, log p and `sample.fields()`
    (what the model family drew: TG / TXL (CC)'s actions, a Pushdown-LM's ids and attachments)."""
    lines = []
    for k, s in enumerate(samples):
        if args.json:
            lines.append(dumps_json({"tree": s.tree.to_string(), "log_prob": s.log_prob, **s.fields()},
                                    where=f"sample {k}"))
        else:
            lines.append((f"{s.log_prob:.4f}\t" if args.log_probs else "") + s.tree.to_string())
    text = "\n".join(lines) + ("\n" if lines else "")
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)


def add_sample_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax sample`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = "Sample well-formed trees from a TG, TXL (CC) or Pushdown-LM."
    parser.add_argument("--workdir", required=True, help="a trained run (tgjax train --workdir)")
    parser.add_argument("--step", default="best", help="checkpoint: 'best', 'latest' or a step number")
    parser.add_argument("--num-samples", type=int, default=10)
    parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0: off")
    parser.add_argument("--top-p", type=float, default=1.0, help="1.0: off")
    parser.add_argument("--max-actions", type=int, default=256)
    parser.add_argument("--max-open-nts", type=int, default=32)
    parser.add_argument("--max-consecutive-opens", type=int, default=6)
    parser.add_argument("--no-unk", action="store_true", help="never sample the UNK word")
    parser.add_argument("--prompt", default=None, help='Choe-Charniak prefix to continue, e.g. "(S (NP the" '
                                                       "(at most --max-words words and --max-actions tokens)")
    add_max_words_arg(parser, TREEBANK_MAX_WORDS, "prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--log-probs", action="store_true", help="prefix each tree with its log p and a tab")
    parser.add_argument("--json", action="store_true", help="one JSON object per sample instead of trees")
    parser.add_argument("--output", "-o", default=None, help="write here instead of stdout")
    parser.set_defaults(run=run_sample)


def main_sample(argv: Sequence[str] | None = None) -> int:
    """`tgjax sample ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax sample")
    add_sample_arguments(parser)
    return run_sample(parser.parse_args(argv))


def run_sample(args: argparse.Namespace) -> int:
    """`tgjax sample --workdir W [--num-samples N] [--temperature T] [--top-k K] [--top-p P] [--prompt "(S (NP"]`.

    Prints one bracketed tree per line to stdout (or `--output FILE`), with
    `--log-probs` a tab and the model's log p first; a summary to stderr.
    """
    from tgjax.workdir import check_treebank_lm

    try:
        if args.output:
            check_output(args.output)  # before any model is loaded or sample drawn
        check_max_words(args.max_words)
        if args.prompt is not None:  # refused by its length before it is read or any model loaded
            check_prompt(args.prompt, args.max_words, args.max_actions)
    except (OutputError, ValueError) as error:
        print(f"tgjax sample: error: {error}", file=sys.stderr)
        return 2

    try:
        check_treebank_lm(args.workdir, "tgjax sample")  # another family's run: one line, before any load
    except ValueError as error:
        print(f"tgjax sample: error: {error}", file=sys.stderr)
        return 2
    try:
        model = _load(args.workdir, args.step)
        sampler = model.sampler(command="tgjax sample", temperature=args.temperature, top_k=args.top_k,
                                top_p=args.top_p, max_length=args.max_actions, allow_unk=not args.no_unk,
                                max_open_nts=args.max_open_nts, max_consecutive_opens=args.max_consecutive_opens,
                                batch_size=args.batch_size)
        start = time.perf_counter()
        samples = sampler.sample(args.num_samples, seed=args.seed, prompt=args.prompt)
        seconds = time.perf_counter() - start
    except (ValueError, FileNotFoundError) as err:
        print(f"tgjax sample: error: {err}", file=sys.stderr)
        return 2
    write_samples(samples, args)
    print(f"{len(samples)} samples from {model.describe()} in {seconds:.1f}s ({sampler.note(samples)}); trees "
          f"without POS tags: score them with `tgjax eval score --pos-tags no`", file=sys.stderr)
    return 0


__all__ = ["add_sample_arguments", "main_sample", "run_sample", "write_samples"]
