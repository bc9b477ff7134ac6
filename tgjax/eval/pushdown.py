"""Pushdown-LM workdirs in the evaluation commands: the beam as a scorer, Table 4's F1, gold-tree scores.

`tgjax eval parse | sg | blimp` take a Pushdown-LM workdir like any other
(`tgjax.eval.parse` asks `pushdown_scorer` when the workdir's trainer is
`pushdown_lm`): the scorer is `tgjax.infer.pushdown_search.PushdownSearch`
(beam over (token, attachment), `--beam-size`, 300 as the paper;
`--final-attachment forced` and `--surprisal-marginal release` are the
release's behaviours). Parses are unlabelled and binary (labels `X`): the
paper scores them by unlabelled F1 against the right-binarised gold
(Table 4, `table4_f1`, EVALB's algorithm with `binarised=True`), beside the
right-branching tree scored the same way. `tgjax eval score` on a Pushdown
workdir (`score_records`) gives each gold tree's joint log p(x, y) (eq. 7,
one teacher-forced pass) and, with `--surprisal`, the beam's log p(x) and
per-word surprisals.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Iterator, Sequence

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


def is_pushdown(workdirs: Sequence[str] | None, step: str) -> bool:
    """Whether any of `workdirs` holds a Pushdown-LM run (the family its checkpoint records)."""
    from tgjax.workdir import family_of

    return bool(workdirs) and any((f := family_of(w)) is not None and f.trainer == "pushdown_lm" for w in workdirs)


def pushdown_scorer(workdirs: Sequence[str], step: str, config: PushdownBeamConfig):
    """(search, rule "pushdown", description) of one Pushdown-LM workdir; ensembles are refused."""
    from tgjax.infer.pushdown_loading import load_pushdown

    if len(workdirs) != 1:
        raise ValueError(f"a Pushdown-LM is searched alone: {len(workdirs)} --workdir given ({', '.join(workdirs)}); "
                         f"ensembles of Pushdown-LMs are not implemented")
    loaded = load_pushdown(workdirs[0], step=step)
    search = PushdownSearch(loaded.model, loaded.vocab, config)
    return search, PushdownSearch.rule, f"{loaded.describe()}, beam {config.beam_size}"


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


def main_score_pushdown(args) -> int:
    """`tgjax eval score` on a Pushdown-LM workdir (called by `tgjax.eval.commands` for such workdirs)."""
    import json
    import sys

    from tgjax.eval.shards import job_shard, shard_path, take
    from tgjax.syntax import trees as trees_lib

    if getattr(args, "input_format", "trees") != "trees":
        raise ValueError("a Pushdown-LM scores trees (--input-format trees); for words alone use tgjax eval blimp "
                         "or eval parse, which search the parses")
    search, _, described = pushdown_scorer(args.workdir, args.step, pushdown_config(args))
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


# -----------------------------------------------------------------------------
# tgjax sample


def main_sample_pushdown(args) -> int:
    """`tgjax sample` on a Pushdown-LM workdir (called by `tgjax.eval.sample_command` for such workdirs)."""
    import sys
    import time

    from tgjax.eval.sample_command import write_samples
    from tgjax.infer.pushdown_loading import load_pushdown
    from tgjax.infer.pushdown_sampling import PushdownSamplingConfig, sample

    try:
        if args.prompt:
            raise ValueError("--prompt is for TG / TXL (CC) action prefixes; a Pushdown-LM samples whole sentences")
        config = PushdownSamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                        max_tokens=min(args.max_actions, 512), allow_unk=not args.no_unk)
        loaded = load_pushdown(args.workdir, step=args.step)
        start = time.perf_counter()
        samples = sample(loaded.model, loaded.vocab, args.num_samples, config=config, seed=args.seed)
        seconds = time.perf_counter() - start
    except (ValueError, FileNotFoundError) as err:
        print(f"tgjax sample: error: {err}", file=sys.stderr)
        return 2
    write_samples(samples, args, lambda s: {"ids": s.ids.tolist(), "attachments": s.attach.tolist()})
    truncated = sum(s.truncated for s in samples)
    print(f"{len(samples)} samples from {loaded.describe()} in {seconds:.1f}s (words and attachments drawn token by "
          f"token; log p = log p(x, y)); {truncated} reached --max-actions and were ended there; unlabelled trees "
          f"(X): score them with `tgjax eval score --pos-tags no`", file=sys.stderr)
    return 0


__all__ = ["add_pushdown_args", "is_pushdown", "main_sample_pushdown", "main_score_pushdown", "marginal_perplexity",
           "pushdown_config", "pushdown_scorer", "right_branching_trees", "score_records", "table4_f1"]
