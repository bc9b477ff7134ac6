"""Pushdown-LM workdirs in the evaluation commands: the beam as a scorer, Table 4's F1, gold-tree scores.

`tgjax eval parse | sg | blimp` take a Pushdown-LM workdir like any other
(its `tgjax.load(...).scorer(pushdown=pushdown_config(args))`): the scorer is
`tgjax.infer.pushdown_search.PushdownSearch` (beam over (token, attachment),
`--beam-size`, 300 as the paper;
`--final-attachment forced` and `--surprisal-marginal release` are the
release's behaviours). Parses are unlabelled and binary (labels `X`): the
paper scores them by unlabelled F1 against the right-binarised gold
(Table 4, `table4_f1`, EVALB's algorithm with `binarised=True`), beside the
right-branching tree scored the same way. `tgjax eval score` on a Pushdown
workdir (`score_records`) gives each gold tree's joint log p(x, y) (eq. 7,
one teacher-forced pass) and, with `--surprisal`, the beam's log p(x) and
per-word surprisals. `tgjax sample` draws from it through its `sampler()`
(`tgjax.eval.sample_command`, which this module does not import, nor it this).
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator

from tgjax.eval.evalb import evalb, right_branching
from tgjax.infer.pushdown_search import PushdownBeamConfig, PushdownSearch


def add_pushdown_args(parser: argparse.ArgumentParser) -> None:
    d = PushdownBeamConfig()
    group = parser.add_argument_group("Pushdown-LM beam (workdirs of trainer pushdown_lm)")
    group.add_argument("--beam-size", type=int, default=d.beam_size,
                       help=f"hypotheses kept per token (default {d.beam_size}, the paper's)")
    group.add_argument("--final-attachment", choices=("scored", "forced"), default=d.final_attachment,
                       help="<eos>'s attachment to ROOT: counted in p(x, y) (scored, eq. 7, default) or only forced "
                            "(the release)")
    group.add_argument("--surprisal-marginal", choices=("beam", "release"), default=d.surprisal,
                       help="surprisal of token t from the beam before it (beam, the paper, default) or the "
                            "release's indexing of the sorted candidates (release)")


def pushdown_config(args: argparse.Namespace) -> PushdownBeamConfig:
    return PushdownBeamConfig(beam_size=getattr(args, "beam_size", 300),
                              final_attachment=getattr(args, "final_attachment", "scored"),
                              surprisal=getattr(args, "surprisal_marginal", "beam"))


def table4_f1(gold, predicted) -> float:
    """Unlabelled F1 (%) against the right-binarised gold, unary chains collapsed, punctuation kept (Table 4)."""
    f1 = evalb(gold, predicted, "collins", unlabeled=True, binarised=True).all.bracketing_fmeasure
    return 0.0 if math.isnan(f1) else f1


def right_branching_trees(gold) -> list:
    return [right_branching(tree.leaves()) for tree in gold]


def marginal_perplexity(results) -> tuple[float, int]:
    """(exp(−Σ log p(x) / Σ predicted tokens), tokens): per predicted token (pieces and ``<eos>``), from the
    beam's p(x)."""
    tokens = sum(len(r.ids) - 1 for r in results)
    return math.exp(-sum(r.log_prob for r in results) / max(tokens, 1)), tokens


# -----------------------------------------------------------------------------
# tgjax eval score


def score_records(search: PushdownSearch, trees, *, surprisal: bool = False, per_token: bool = False
                  ) -> Iterator[dict]:
    """One record per gold tree: logp = log p(x, y_gold) (eq. 7); with `surprisal`, the beam's log p(x) too."""
    from tgjax.data.pushdown import encode_tree
    from tgjax.infer.pushdown_search import gold_joint_log_prob

    config = search.config
    for index, tree in trees:
        name = f"tree {index}"
        encoded = encode_tree(tree, search.vocab, name=name)
        words = tree.leaves()
        unknown = sum(1 for w in words if search.space.encode_word(w)[1])
        logp = gold_joint_log_prob(search.model, encoded.tokens, encoded.attach,
                                   final_attachment=config.final_attachment)
        record = {"index": index, "logp": logp, "num_predictions": 2 * (len(encoded.tokens) - 1),
                  "num_words": len(words), "num_unk": unknown}
        if surprisal:
            result = search.search_words(words, name=name)
            record.update(logp_marginal=result.log_prob, surprisals=[float(s) for s in result.surprisals],
                          end_surprisal=result.end_surprisal, beam_size=config.beam_size)
        if per_token:
            record["tokens"] = [int(t) for t in encoded.tokens[1:]]
            record["attachments"] = [int(a) for a in encoded.attach[1:]]
        yield record


def main_score_pushdown(args, models) -> int:
    """`tgjax eval score` on a Pushdown-LM workdir (`models`: its `tgjax.load`, alone; called by
    `tgjax.eval.commands` for such workdirs)."""
    import json
    import sys

    from tgjax.eval.shards import job_shard, shard_path, take
    from tgjax.syntax import trees as trees_lib

    if getattr(args, "input_format", "trees") != "trees":
        raise ValueError("a Pushdown-LM scores trees (--input-format trees); for words alone use tgjax eval blimp "
                         "or eval parse, which search the parses")
    from tgjax.infer.api import describe_scorer, sentence_scorer

    config = pushdown_config(args)
    search = sentence_scorer(models, command="tgjax eval score", pushdown=config)
    described = describe_scorer(models, pushdown=config)
    # As the other models' scoring: a malformed tree (unless --on-bad-tree skip: counted, reported at the end),
    # or one over --max-words (refused while read), stops.
    skipped = None
    if getattr(args, "on_bad_tree", "error") == "skip":
        trees, skipped = trees_lib.read_treebank(args.input, max_words=args.max_words, on_error="skip")
        if not trees:
            raise ValueError(f"{args.input}: no sentences left: every tree is malformed ({skipped.num_skipped} "
                             f"skipped; the first: {skipped.errors[0]})" if skipped.errors
                             else f"{args.input}: no sentences (the file is empty)")
    else:
        trees = trees_lib.read_treebank(args.input, max_words=args.max_words)
    shard = job_shard(args.shard)
    output = shard_path(args.output, shard) if args.output else None
    total, tokens, count = 0.0, 0, 0
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(output, "w", encoding="utf-8")) if output else sys.stdout
        for record in score_records(search, take(trees, shard), surprisal=args.surprisal, per_token=args.per_token):
            stream.write(json.dumps(record) + "\n")
            total += record["logp"]
            tokens += record["num_predictions"] // 2
            count += 1
    if not args.quiet:
        print(f"tgjax eval score: {described}; {count} trees of {args.input}: Σ log p(x, y_gold) {total:.3f} nats, "
              f"{-total / max(tokens, 1):.4f} per predicted token (words' pieces and <eos>, with their attachments)",
              file=sys.stderr)
    if skipped is not None and skipped.num_skipped:  # even with --quiet
        print(skipped.summary(max_errors=5), file=sys.stderr)
    return 0


__all__ = ["add_pushdown_args", "main_score_pushdown", "marginal_perplexity", "pushdown_config",
           "right_branching_trees", "score_records", "table4_f1"]
