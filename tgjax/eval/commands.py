"""The `tgjax eval score | ppl | rerank | merge` commands (argparse handlers; `tgjax.cli` dispatches to them).

    tgjax eval score  --workdir W [--workdir W2 ...] --input FILE [--output out.jsonl] [--per-token] [--surprisal]
    tgjax eval ppl    --workdir W ... --proposals FILE [--output out.jsonl] [--documents]
    tgjax eval rerank --workdir W ... --proposals FILE [--gold GOLD] [--trees best.txt] [--output out.jsonl]
    tgjax eval merge  SHARD_RESULTS... [--output merged.jsonl] [--gold GOLD] [--trees best.txt]

Every command takes `--shard I/N` (default: this host's shard in a multi-host
run, else 0/1; see `tgjax.eval.shards`), writes one JSON line per sentence
(stdout when there is no `--output` and one shard) and prints a summary to
stderr. Several `--workdir`s make a uniform ensemble (`tgjax.infer.ensemble`),
mixed per action as in the TG paper unless `--ensemble-mixture sequence`; the
settings and the summary name the mixture. What a model scores is chosen by
what it can do (`tgjax.infer.api.LoadedModel.scores_input`), never by its
family's name: its teacher-forced tree scorer (TG / TXL; a Pushdown-LM's
gold-tree joint in `score`), or an exact sentence scorer's log p(words </s>)
(ON-LSTM, the stack-attention LM), with a one-line error for what it cannot.
Each command is `add_X_arguments(parser)` (its description and arguments, on the
parser `tgjax.cli` makes for it, and `run`), `run_X(args)`, and `main_X(argv)`
(the same, parsed on a parser of its own). Each returns the exit status: 0,
or 2 with a one-line error for bad input (missing files, malformed trees,
mismatched proposals or shards). A malformed tree stops the command at the
first (file:line:column) unless `--on-bad-tree skip`: then they are left out,
counted and listed on stderr after the summary (the first few, with
file:line:column).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tgjax.limits import TREEBANK_MAX_WORDS, add_bad_input_args, add_max_words_arg
from tgjax.workdir import check_treebank_lm, workdir_path

STEP_HELP = "checkpoint: best (lowest validation loss, default), latest, or a step; comma-separated for one per workdir"


def _add_common(p: argparse.ArgumentParser, *, output_help: str = "results, one JSON line per sentence") -> None:
    p.add_argument("--workdir", action="append", required=True,
                   help="a training workdir; give several for a uniform ensemble of their models")
    p.add_argument("--step", default="best", help=STEP_HELP)
    p.add_argument("--ensemble-mixture", choices=("per-action", "sequence"), default="per-action",
                   help="with several --workdir: what logp is, the mean of the members' next-action "
                        "probabilities (per-action, the TG paper's ensemble, default) or of their whole-sequence "
                        "probabilities (sequence)")
    p.add_argument("--batch-size", type=int, default=32, help="rows per step (default 32)")
    p.add_argument("--chunk-size", type=int, default=1024,
                   help="sequences encoded and batched together while streaming (default 1024)")
    p.add_argument("--seq-len", type=int, default=None, help="segment length T for scoring (default: training's)")
    p.add_argument("--mem-len", type=int, default=None, help="memory length M for scoring (default: training's)")
    p.add_argument("--shard", default=None,
                   help="I/N: score sentences with index %% N == I (default: this host's in a multi-host run)")
    p.add_argument("--distributed", action="store_true",
                   help="call jax.distributed.initialize() first (multi-host; each host then takes its shard)")
    p.add_argument("-o", "--output", default=None, help=output_help + " (default: stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    add_max_words_arg(p, TREEBANK_MAX_WORDS)
    add_bad_input_args(p, too_long=False)
    p.add_argument("--pos-tags", choices=("yes", "no", "auto"), default="auto",
                   help="whether the file's trees carry POS tags, which the models drop: yes, no (every node is a "
                        "constituent, e.g. tgjax sample's trees), or auto (default): tagged iff every word is alone "
                        "under a node of its own; a file that mixes both is refused. The summary says which")


def _shard(args):
    from tgjax.eval.shards import job_shard

    if args.distributed:
        import jax

        if not jax.distributed.is_initialized():
            jax.distributed.initialize()
    shard = job_shard(args.shard)
    if shard.count > 1 and args.output is None:
        raise ValueError(f"--shard {shard}: give --output (each shard writes its own results file)")
    _check_outputs(args, shard)
    return shard


def _check_outputs(args, shard) -> None:
    """Every file the command writes, checked before any model is read (a bad name would lose the work)."""
    from tgjax.eval.shards import shard_path
    from tgjax.outputs import check_output

    inputs = [getattr(args, name) for name in ("input", "proposals", "gold") if getattr(args, name, None)]
    if args.output:
        check_output(shard_path(args.output, shard), inputs=inputs)
    if getattr(args, "trees", None):
        check_output(args.trees, option="--trees", inputs=inputs + ([args.output] if args.output else []))


def _steps(args) -> list[str]:
    steps = [s.strip() for s in args.step.split(",")]
    if len(steps) == 1:
        return steps * len(args.workdir)
    if len(steps) != len(args.workdir):
        raise ValueError(f"--step: {len(steps)} steps for {len(args.workdir)} workdirs")
    return steps


def _load_models(args) -> list:
    """`tgjax.load` of each `--workdir` at its `--step` (the family and step; parameters are read on use)."""
    from tgjax.infer.api import load

    return [load(workdir, step) for workdir, step in zip(args.workdir, _steps(args))]


def build_scorer(args, command: str = "tgjax eval score", models: list | None = None):
    """A `Scorer` (one workdir) or an `Ensemble`: the `tree_scorer` of each `--workdir`'s `tgjax.load` (`models`
    when loaded already), and the settings that identify it."""
    from tgjax.infer.ensemble import Ensemble

    members = [model.tree_scorer(command=command, batch_size=args.batch_size, sequence_length=args.seq_len,
                                 memory_length=args.mem_len) for model in (models or _load_models(args))]
    scorer = members[0] if len(members) == 1 else Ensemble(members, mixture=args.ensemble_mixture)
    settings = {
        "models": [{"workdir": str(workdir_path(m.loaded.workdir)), "step": m.loaded.step, "model": m.loaded.model_name}
                   for m in members],
        "rule": scorer.rule,
        "seq_len": members[0].loaded.model_config.sequence_length,
        "mem_len": members[0].loaded.model_config.memory_length,
    }
    if len(members) > 1:
        settings["ensemble_mixture"] = args.ensemble_mixture
    return scorer, members, settings


def _report(title: str, summary: dict, quiet: bool) -> None:
    if quiet:
        return
    print(title, file=sys.stderr)
    for key, value in summary.items():
        if value is None:  # nothing scored, or a perplexity too large for a float
            text = "none"
        else:
            text = f"{value:.6g}" if isinstance(value, float) and math.isfinite(value) else str(value)
        print(f"  {key:32s} {text}", file=sys.stderr)


def _warn_dropped(members, quiet: bool) -> None:
    """The TG stack entries that did not fit in the memory (the masking rules count them)."""
    for m in members:
        stats = m.stats
        if stats.dropped_stack_entries and not quiet:
            print(f"warning: {m.loaded.describe()}: {stats.dropped_stack_entries} stack entries in "
                  f"{stats.sequences_with_dropped_entries} sequences did not fit in the memory "
                  f"(M={m.loaded.model_config.memory_length}; raise it with --mem-len)", file=sys.stderr)


def _pos_tags_setting(settings: dict, tagged: bool, setting: str) -> None:
    """Records the POS-tag decision in the settings (and so the summary): `yes`/`no`, and `(auto)` if detected."""
    from tgjax.syntax.pos_tags import setting_name

    settings["pos_tags"] = setting_name(tagged) + (" (auto)" if setting == "auto" else "")


def _run(prog: str, body, args: argparse.Namespace, *, word_scorers: bool = False) -> int:
    from tgjax.infer.api import WORD_SCORERS
    from tgjax.infer.loading import CheckpointError

    try:  # another family's run: one line, before any load (`word_scorers`: a run that scores words alone too)
        check_treebank_lm(getattr(args, "workdir", None), prog, word_scorers=WORD_SCORERS if word_scorers else ())
        return body(args)
    except (ValueError, OSError, CheckpointError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2


def _write_records(args, command: str, shard, settings: dict, records, summary, members, *, verb: str = "scored",
                   complete=None) -> tuple[dict, Path | None]:
    """Streams a command's records into its shard's results file (stdout without --output), with progress.

    Each record goes to the writer and the summary; `complete(result)` may add
    to the summary's result before the meta file is written. Returns the result
    (with its wall time) and the results file.
    """
    from tgjax.eval.shards import ResultWriter, shard_path, with_qualifying_settings
    from tgjax.progress import Progress

    # on a terminal only: a scoring job's log keeps its summary, not a line per half second
    progress = Progress(None, label=verb, noun="sentence", enabled=not args.quiet and sys.stderr.isatty(),
                        min_interval=0.5)
    output = shard_path(args.output, shard) if args.output else None
    count = 0
    with ResultWriter(output, command, settings, shard) as writer:
        for record in records:
            writer.write(record)
            summary.add(record)
            count += 1
            progress.update(count)
        result = with_qualifying_settings(summary.result(), settings)
        if complete is not None:
            complete(result)
        writer.finish(result)
    result["seconds"] = progress.close()
    _warn_dropped(members, args.quiet)
    return result, output


def _report_shard(command: str, source: str, shard, output, result: dict, quiet: bool) -> None:
    _report(f"tgjax eval {command}: {source} (shard {shard}){' -> ' + str(output) if output else ''}", result, quiet)


def _skip_report(args, source: str, noun: str = "trees"):
    """A report that records the malformed records skipped (`--on-bad-tree skip`), or None (stop at the first)."""
    from tgjax.syntax.trees import ReadReport

    return ReadReport(os.fspath(source), noun=noun) if args.on_bad_tree == "skip" else None


def _report_skipped(report) -> None:
    """What `--on-bad-tree skip` left out: the count and the first few with file:line:column (even with --quiet)."""
    if report is not None and report.num_skipped:
        print(report.summary(max_errors=5), file=sys.stderr)


# -----------------------------------------------------------------------------
# score


def _scoring(args, command: str, input_format: str) -> tuple[str, list | None]:
    """How `command` scores its input (`tgjax.infer.api.LoadedModel.scores_input`: "tree_scorer", "gold_joint" or
    "scorer"), and the `tgjax.load` of each `--workdir`. A workdir that holds no run yet (the family its
    checkpoint records is read without JAX, `family_of`) is loaded later, once the input has been checked:
    ("tree_scorer", None)."""
    from tgjax.workdir import family_of

    if any(family_of(workdir) is None for workdir in args.workdir):
        return "tree_scorer", None
    models = _load_models(args)
    routes = [model.scores_input(input_format, command=command) for model in models]
    if len(set(routes)) > 1:
        raise ValueError("an ensemble's members must score alike; "
                         + ", ".join(f"{m.workdir} ({m.description}): {r}" for m, r in zip(models, routes)))
    return routes[0], models


def _scorer_settings(models, command: str) -> dict:
    """The settings of a command run with an exact sentence scorer (`_scoring`'s "scorer")."""
    return {"models": [{"workdir": str(workdir_path(m.workdir)), "step": m.step, "model": m.model_name}
                       for m in models], "rule": models[0].rule, "command": command}


def _sentence_scores(scorer, items, chunk_size: int):
    """`SequenceScore`s of (index, words) items by a `SentenceScorer` that is exact (the chain rule): per sentence
    its words then `</s>`, each token's log p (`chunk_size` sentences per `search`)."""
    import itertools

    import numpy as np

    from tgjax.data.vocab import EOS_TOKEN
    from tgjax.infer.scoring import SequenceScore

    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, chunk_size)):
        for (index, words), result in zip(chunk, scorer.search([words for _, words in chunk])):
            log_probs = np.concatenate([-result.surprisals, [-result.end_surprisal]])
            yield SequenceScore(index, result.log_prob, log_probs, log_probs, len(words), result.num_unknown,
                                [*words, EOS_TOKEN])


def _score_sentences(args, models, shard) -> int:
    """`tgjax eval score` with an exact sentence scorer (ON-LSTM, the stack-attention LM): log p(words </s>) of
    each line's words (`--input-format words`) or of each tree's, by the chain rule."""
    from tgjax.eval.summaries import ScoreSummary, score_record
    from tgjax.infer.api import sentence_scorer
    from tgjax.infer.scoring import read_sentences, resolve_input_pos_tags, surprisals_from_score

    resolve_input_pos_tags(args.input, args.pos_tags, "words")  # the file is there; --pos-tags is a setting
    skipped = _skip_report(args, args.input)
    scorer = sentence_scorer(models, command="tgjax eval score")
    settings = _scorer_settings(models, "score")
    settings.update(input=os.path.abspath(args.input), input_format=args.input_format, per_token=args.per_token,
                    surprisal=args.surprisal)

    def items():
        index = -1
        for index, tree in enumerate(read_sentences(args.input, args.input_format, args.max_words, skipped)):
            if shard.takes(index):
                yield index, tree.leaves()
        if index < 0:  # as `score_treebank`: nothing is written
            raise ValueError(f"{args.input}: no sentences left: every tree is malformed ({skipped.num_skipped} "
                             f"skipped; the first: {skipped.errors[0]})" if skipped is not None and skipped.errors
                             else f"{args.input}: no sentences (the file is empty)")

    records = (score_record(s, per_token=args.per_token, surprisal=surprisals_from_score(s) if args.surprisal else None)
               for s in _sentence_scores(scorer, items(), args.chunk_size))
    result, output = _write_records(args, "score", shard, settings, records, ScoreSummary(settings["rule"]), [])
    result["sentences_per_second"] = result["sentences"] / max(result["seconds"], 1e-9)
    _report_shard("score", args.input, shard, output, result, args.quiet)
    _report_skipped(skipped)
    return 0


def _score(args) -> int:
    from tgjax.eval import pushdown as pushdown_eval
    from tgjax.eval.summaries import ScoreSummary, score_record
    from tgjax.infer.scoring import resolve_input_pos_tags, score_treebank, surprisals_from_score

    shard = _shard(args)
    # By what the models can do: a Pushdown-LM's records are its own (gold joint, eq. 7; beam marginal); an exact
    # sentence scorer gives log p(words </s>); the others score with their teacher-forced tree scorer.
    route, models = _scoring(args, "tgjax eval score", args.input_format)
    if route == "gold_joint":
        return pushdown_eval.main_score_pushdown(args, models)
    if route == "scorer":
        return _score_sentences(args, models, shard)
    # Before loading any model: a sentence over --max-words is refused here, before any tree of it is built.
    tagged = resolve_input_pos_tags(args.input, args.pos_tags, args.input_format, args.max_words,
                                    skip_bad_trees=args.on_bad_tree == "skip")
    skipped = _skip_report(args, args.input)
    scorer, members, settings = build_scorer(args, models=models)
    settings.update(command="score", input=os.path.abspath(args.input), input_format=args.input_format,
                    per_token=args.per_token, surprisal=args.surprisal)
    if args.input_format == "trees":
        _pos_tags_setting(settings, tagged, args.pos_tags)
    records = (score_record(s, per_token=args.per_token,
                            surprisal=surprisals_from_score(s) if args.surprisal else None)
               for s in score_treebank(scorer, args.input, pos_tags=tagged, input_format=args.input_format, shard=shard,
                                       chunk_size=args.chunk_size, max_words=args.max_words, report=skipped))
    result, output = _write_records(args, "score", shard, settings, records, ScoreSummary(scorer.rule), members)
    result["sentences_per_second"] = result["sentences"] / max(result["seconds"], 1e-9)
    _report_shard("score", args.input, shard, output, result, args.quiet)
    _report_skipped(skipped)
    return 0


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval score`: log p of every sentence of a treebank (or words file) under a model or ensemble."""
    parser.description = (
        "Score every sentence of a file: log p(actions) (TG, TXL (CC): the joint log p(x, y) of the "
        "given tree; Pushdown-LM: log p(x, y) of the tree with its attachments) or log p(words </s>) (TXL "
        "(terminals), ON-LSTM, stack-attention LM: exact, of each line's words or each tree's). "
        "One JSON line per sentence: index, "
        "logp (natural log), num_predictions, num_words, num_unk; --per-token adds tokens and their "
        "log probs, --surprisal per-word surprisals. Streams files of any size.")
    _add_common(parser)
    parser.add_argument("--input", required=True, help="a treebank file (any layout; .gz ok), or words with "
                                                       "--input-format words")
    parser.add_argument("--input-format", choices=("trees", "words"), default="trees",
                        help="trees (default) or words: one sentence per line (the models that score words "
                             "exactly: TXL (terminals), ON-LSTM, stack-attention LM)")
    parser.add_argument("--per-token", action="store_true", help="add tokens and per-token log probs")
    parser.add_argument("--surprisal", action="store_true",
                        help="add per-word surprisals (nats; each word takes the actions before it) and the "
                             "end surprisal (closing actions after the last word; </s> for the words-only models)")
    from tgjax.eval.pushdown import add_pushdown_args

    add_pushdown_args(parser)
    parser.set_defaults(run=run_score)


def run_score(args: argparse.Namespace) -> int:
    return _run("tgjax eval score", _score, args, word_scorers=True)


def main_score(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval score ARGV`, parsed on a parser of its own (as in tests)."""
    parser = argparse.ArgumentParser(prog="tgjax eval score")
    add_score_arguments(parser)
    return run_score(parser.parse_args(argv))


# -----------------------------------------------------------------------------
# ppl


def _ppl(args) -> int:
    from tgjax.eval.shards import make_summary
    from tgjax.eval.summaries import ppl_record
    from tgjax.infer.perplexity import proposals_pos_tags, read_proposals, score_documents, score_proposals

    shard = _shard(args)
    tagged = proposals_pos_tags(args.proposals, args.pos_tags, documents=args.documents,  # before loading any model
                                max_words=args.max_words, skip_bad_trees=args.on_bad_tree == "skip")
    skipped = _skip_report(args, args.proposals, "proposals")
    route, models = _scoring(args, "tgjax eval ppl", "trees")
    if route == "scorer":  # exact: log p(words </s>) of each block's sentence, as for TXL (terminals)
        if args.documents:
            from tgjax.infer.api import CapabilityError

            raise CapabilityError(f"tgjax eval ppl --documents: {models[0].workdir} holds {models[0].description}, "
                                  f"which scores each sentence alone; --documents reads TG / TXL models")
        from tgjax.infer.api import sentence_scorer

        scorer, members, settings = (sentence_scorer(models, command="tgjax eval ppl"), [],
                                     _scorer_settings(models, "ppl"))
    else:
        scorer, members, settings = build_scorer(args, command="tgjax eval ppl", models=models)
    _pos_tags_setting(settings, tagged, args.pos_tags)
    settings.update(command="ppl", proposals=os.path.abspath(args.proposals), dedup=not args.keep_duplicates,
                    documents=args.documents, doc_label=args.doc_label if args.documents else None,
                    all_logps=args.all_logps)
    blocks = read_proposals(args.proposals, dedup=not args.keep_duplicates, documents=args.documents, shard=shard,
                            pos_tags=tagged, max_words=args.max_words, report=skipped)
    if route == "scorer":
        results = _exact_proposal_scores(scorer, blocks, args.chunk_size)
    elif args.documents:
        results = score_documents(scorer, blocks, label=args.doc_label)
    else:
        results = score_proposals(scorer, blocks, chunk_size=args.chunk_size)
    records = (ppl_record(r, all_logps=args.all_logps, documents=args.documents) for r in results)
    result, output = _write_records(args, "ppl", shard, settings, records, make_summary("ppl", settings), members)
    _report_shard("ppl", args.proposals, shard, output, result, args.quiet)
    _report_skipped(skipped)
    return 0


def _exact_proposal_scores(scorer, blocks, chunk_size: int):
    """`ProposalScores` of proposal blocks by an exact `SentenceScorer`: its log p(words </s>) is the bound, and
    the proposals only supply the sentence (`chunk_size` sentences per `search`)."""
    import itertools

    import numpy as np

    from tgjax.infer.perplexity import ProposalScores

    iterator = iter(blocks)
    while chunk := list(itertools.islice(iterator, chunk_size)):
        for block, result in zip(chunk, scorer.search([block.words for block in chunk])):
            yield ProposalScores(block.index, result.log_prob, np.array([result.log_prob]), 0, len(block.words),
                                 result.num_unknown, block.num_duplicates, block)


def add_ppl_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval ppl`: the word-perplexity upper bound from proposal trees (exact for TXL (terminals))."""
    parser.description = (
        "Upper bound on word perplexity from proposal trees (Sartran et al. 2022, §3.1): "
        "exp(-Σ_x log Σ_j p(x, y_j) / N_w) over J distinct proposals per sentence. Proposal file: one "
        "tree per line, one block per sentence, blocks separated by blank lines. TXL (terminals), ON-LSTM and "
        "the stack-attention LM: exact, log p(words </s>) of each block's sentence.")
    _add_common(parser)
    parser.add_argument("--proposals", required=True, help="the proposal trees (the same file for every model)")
    parser.add_argument("--keep-duplicates", action="store_true",
                        help="count repeated proposals every time (default: each distinct tree once, as the bound "
                             "requires); the perplexity is then no bound: word_perplexity_with_duplicates")
    parser.add_argument("--documents", action="store_true",
                        help="document-level models: a line '<doc>' starts a document; each sentence is scored "
                             "after the greedy best trees of the sentences before it (the paper's approximation, "
                             "reported as word_perplexity_greedy_documents, not as a bound)")
    parser.add_argument("--doc-label", default="DOC", help="label of the document node (default DOC)")
    parser.add_argument("--all-logps", action="store_true", help="add every proposal's log p to the records")
    parser.set_defaults(run=run_ppl)


def run_ppl(args: argparse.Namespace) -> int:
    return _run("tgjax eval ppl", _ppl, args, word_scorers=True)


def main_ppl(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval ppl ARGV`, parsed on a parser of its own (as in tests)."""
    parser = argparse.ArgumentParser(prog="tgjax eval ppl")
    add_ppl_arguments(parser)
    return run_ppl(parser.parse_args(argv))


# -----------------------------------------------------------------------------
# rerank


def _write_trees(path: str, trees_text: Sequence[str]) -> None:
    from tgjax.outputs import atomic_write

    with atomic_write(path) as f:
        for t in trees_text:
            f.write(t + "\n")


def _f1(best: Sequence[str], gold_path: str, params: str, indices: Sequence[int] | None = None) -> dict:
    """F1 of the chosen trees against the gold ones; `indices`: the sentences reranked (the others' blocks were
    skipped as malformed), whose gold trees are compared."""
    from tgjax.eval.rerank import f1_summary, read_gold, rerank_f1

    gold = read_gold(gold_path)
    if indices is not None and list(indices) != list(range(len(indices))):  # some sentences were skipped
        if indices[-1] >= len(gold):
            raise ValueError(f"{gold_path}: {len(gold)} gold trees, but sentence {indices[-1]} was reranked")
        gold = [gold[i] for i in indices]
    return f1_summary(rerank_f1(best, gold, params=params, gold_source=gold_path))


def _rerank(args) -> int:
    from tgjax.eval.rerank import read_gold, rerank, rerank_record
    from tgjax.eval.shards import make_summary
    from tgjax.infer.perplexity import check_sentence, proposals_pos_tags, read_proposals

    shard = _shard(args)
    tagged = proposals_pos_tags(args.proposals, args.pos_tags, max_words=args.max_words,  # before loading any model
                                skip_bad_trees=args.on_bad_tree == "skip")
    skipped = _skip_report(args, args.proposals, "proposals")
    if shard.count > 1 and (args.gold or args.trees):
        raise ValueError("--gold and --trees need every sentence: with --shard, give them to `tgjax eval merge`")
    gold = read_gold(args.gold) if args.gold else None
    scorer, members, settings = build_scorer(args, command="tgjax eval rerank")
    settings.update(command="rerank", proposals=os.path.abspath(args.proposals))
    _pos_tags_setting(settings, tagged, args.pos_tags)

    def checked(blocks):
        for block in blocks:
            if gold is not None:
                if block.index >= len(gold):
                    raise ValueError(f"{args.gold}: {len(gold)} gold trees, but {args.proposals} has more blocks")
                check_sentence(block, gold[block.index].leaves(), f"{args.proposals} vs {args.gold} tree "
                                                                 f"{block.index}")
            yield block

    blocks = checked(read_proposals(args.proposals, shard=shard, pos_tags=tagged, max_words=args.max_words,
                                    report=skipped))
    best: list[str] = []
    indices: list[int] = []

    def records():
        for r in rerank(scorer, blocks, chunk_size=args.chunk_size):
            record = rerank_record(r)
            best.append(record["best_tree"])
            indices.append(record["index"])
            yield record

    def add_f1(result: dict) -> None:
        if gold is not None:
            result.update(_f1(best, args.gold, args.evalb_params, indices))

    result, output = _write_records(args, "rerank", shard, settings, records(), make_summary("rerank", settings),
                                    members, verb="reranked", complete=add_f1)
    if args.trees:
        _write_trees(args.trees, best)
    _report_shard("rerank", args.proposals, shard, output, result, args.quiet)
    _report_skipped(skipped)
    return 0


def add_rerank_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval rerank`: the most likely proposal tree per sentence, and F1 against gold trees."""
    parser.description = (
        "Rerank proposal trees by log p(x, y) under a TG or TXL (CC) model (or ensemble): write the "
        "best tree of each sentence and, with --gold, report bracketing F1 (EVALB rules).")
    _add_common(parser)
    parser.add_argument("--proposals", required=True, help="proposal trees, one block per sentence")
    parser.add_argument("--gold", default=None, help="gold trees in the same order: report F1")
    parser.add_argument("--trees", default=None, help="write the chosen trees here, one per line")
    parser.add_argument("--evalb-params", default="collins", help="collins (default), keep_punct or a .prm file")
    parser.set_defaults(run=run_rerank)


def run_rerank(args: argparse.Namespace) -> int:
    return _run("tgjax eval rerank", _rerank, args)


def main_rerank(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval rerank ARGV`, parsed on a parser of its own (as in tests)."""
    parser = argparse.ArgumentParser(prog="tgjax eval rerank")
    add_rerank_arguments(parser)
    return run_rerank(parser.parse_args(argv))


# -----------------------------------------------------------------------------
# merge


def _merge(args) -> int:
    from tgjax.eval.shards import merge, read_meta

    command = read_meta(args.inputs[0])["command"]
    if command != "rerank" and (args.gold or args.trees):
        raise ValueError(f"--gold and --trees are for rerank results; {args.inputs[0]} holds {command} results")
    _check_merge_outputs(args)
    best: list[str] = []
    indices: list[int] = []

    def on_record(record: dict) -> None:
        best.append(record["best_tree"])
        indices.append(record["index"])

    def finalize(summary: dict) -> None:
        if args.gold:
            summary.update(_f1(best, args.gold, args.evalb_params, indices))

    meta = merge(args.inputs, args.output, on_record=on_record if command == "rerank" else None, finalize=finalize)
    if args.trees:
        _write_trees(args.trees, best)
    _report(f"tgjax eval merge: {len(args.inputs)} shards of {command}{' -> ' + args.output if args.output else ''}",
            meta["summary"], args.quiet)
    return 0


def _check_merge_outputs(args) -> None:
    """The merged results (and --trees) may not overwrite a shard, its meta file, or the gold trees."""
    from tgjax.eval.shards import meta_path
    from tgjax.outputs import check_output

    inputs = [*args.inputs, *(meta_path(p) for p in args.inputs), *([args.gold] if args.gold else [])]
    if args.output:
        check_output(args.output, inputs=inputs)
    if args.trees:
        check_output(args.trees, option="--trees", inputs=inputs + ([args.output] if args.output else []))


def add_merge_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval merge`: combine the per-shard results of one sharded eval job."""
    parser.description = (
        "Merge the results files of the shards of one eval job (score, ppl or rerank): checks they "
        "cover every shard once with equal settings, merges records by index, recomputes the summary.")
    parser.add_argument("inputs", nargs="+", help="the shards' results files (their .meta.json files beside them)")
    parser.add_argument("-o", "--output", default=None, help="merged results (default: stdout)")
    parser.add_argument("--gold", default=None, help="rerank: gold trees, to report F1 over all sentences")
    parser.add_argument("--trees", default=None, help="rerank: write the chosen trees here, one per line")
    parser.add_argument("--evalb-params", default="collins", help="collins (default), keep_punct or a .prm file")
    parser.add_argument("--quiet", action="store_true", help="no summary on stderr")
    parser.set_defaults(run=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    return _run("tgjax eval merge", _merge, args)


def main_merge(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval merge ARGV`, parsed on a parser of its own (as in tests)."""
    parser = argparse.ArgumentParser(prog="tgjax eval merge")
    add_merge_arguments(parser)
    return run_merge(parser.parse_args(argv))
