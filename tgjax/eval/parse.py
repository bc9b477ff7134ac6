"""Drivers built on word-synchronous beam search: parsing (F1), SyntaxGym (SG score), BLiMP.

    tgjax eval parse --workdir W --treebank test.txt [--output pred.txt]   labelled / unlabelled F1 and right-branching
    tgjax eval sg    --workdir W [--suites DIR] [--suite NAME ...]       per-suite accuracy, circuits, SG score
    tgjax eval blimp --workdir W [--data DIR] [--limit N]                per paradigm / field / overall accuracy

Each takes `--workdir` (a trained run, read with `tgjax.load`; its `scorer()`),
`--step` (best by default), the beam settings (`--word-beam`, `--action-beam`,
`--fast-track`, caps) and `--shard I/N` (round robin over sentences, suites
or paradigms, as `tgjax.eval.shards`; `--merge` joins the shards' outputs
and reports them together). `--workdir` repeated makes an ensemble: one beam
over the members' next-action distributions mixed per action (TG paper,
§3.7; `tgjax.infer.beam`), members sharing one vocabulary.

Words are tokenised as in training: treebank leaves as they are; SyntaxGym
regions and BLiMP sentences with `tgjax.eval.blimp.words_of` (PTB-style),
then mapped by the model's vocabulary (`vocab.encode`: unknown words become
UNK for a word dictionary; they are counted and reported).

Scores: syntactic models (TG, TXL (CC)) through the beam: surprisals from its
word-level marginal, log p(x) from the complete trees it finds (a lower bound
on p(x)); TXL (terminals) exactly by direct scoring. Surprisals are in nats
(SyntaxGym's formulas only compare them).

Parsing: the best tree of the beam over the gold sentence's words; POS
pre-terminals are not predicted (TG drops them), so the gold tags are put
back under the predicted tree for EVALB (COLLINS.prm deletes punctuation by
tag); the right-branching baseline (`right_branching`, label X, gold tags)
is scored the same way.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import inspect
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from tgjax.data.text_files import json_lines, parse_json_line, read_json, read_lines
from tgjax.eval import blimp as blimp_lib
from tgjax.eval import search_errors, shards
from tgjax.eval import syntaxgym as sg
from tgjax.eval.arguments import check_counts
from tgjax.eval.evalb import evalb, right_branching
from tgjax.infer.api import (  # noqa: F401  (SEARCHES, resolve_search, word_scorer: re-exported)
    EXACT_RULES,
    SEARCHES,
    WORD_SCORERS,
    resolve_search,
    word_scorer,
)
from tgjax.infer.beam import BeamConfig, BeamResult
from tgjax.infer.choe_charniak import ActionSpace
from tgjax.limits import (
    MINIMAL_PAIR_MAX_WORDS,
    PARSE_MAX_WORDS,
    add_bad_input_args,
    add_max_words_arg,
    reader_policy,
)
from tgjax.outputs import check_output, dumps_json, write_json, write_text
from tgjax.progress import Progress
from tgjax.syntax import pos_tags as tagging
from tgjax.syntax import trees as trees_lib
from tgjax.syntax.trees import Tree, too_long_reason
from tgjax.workdir import check_treebank_lm

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
# Longer gold sentences are refused (or skipped and counted): the search's time grows with the length, and a
# 20,000-word line is more likely a broken file than a sentence (the PTB's longest has 141 words).
MAX_WORDS = PARSE_MAX_WORDS


# -----------------------------------------------------------------------------
# Shared helpers.


def refuse_unknown(asked: Iterable[str], present: Iterable[str], *, kind: str, where: str, expected: str) -> None:
    """Raises one line naming what was `asked` for but is not `present`, with the first few that are.

    Shared by `--suite` and `--paradigm`: a misspelt name would otherwise select nothing, or, beside a right
    one, silently less than asked."""
    known = sorted(set(present))
    missing = sorted(set(asked).difference(known))
    if missing:
        shown = ", ".join(known[:5]) + (f", ... ({len(known)} in all)" if len(known) > 5 else "")
        raise ValueError(f"no {kind} {missing} {where}; expected {expected} such as: {shown or 'none (nothing read)'}")


def select_shard(items: Sequence, shard: shards.Shard) -> list:
    """This job's items: item k iff k % N == I (round robin, as every eval command)."""
    return [item for _, item in shards.take(items, shard)]


def add_beam_args(parser: argparse.ArgumentParser) -> None:
    d = BeamConfig()
    group = parser.add_argument_group("beam search")
    group.add_argument("--word-beam", type=int, default=d.word_beam, help="hypotheses kept per word (k_w)")
    group.add_argument("--action-beam", type=int, default=d.action_beam, help="frontier per action step (k_a)")
    group.add_argument("--fast-track", type=int, default=d.fast_track, help="word successors fast-tracked (k_ft)")
    group.add_argument("--max-open-nts", type=int, default=d.max_open_nts)
    group.add_argument("--max-consecutive-opens", type=int, default=d.max_consecutive_opens)
    group.add_argument("--stop", default=d.stop, choices=("bound", "count"),
                       help="end of an action search: 'bound' (exact given the beams) or 'count' (Stern et al.)")
    group.add_argument("--batch-sentences", type=int, default=d.batch_sentences,
                       help="sentences searched together (one model call scores all their hypotheses)")
    group.add_argument("--max-batch", type=int, default=d.max_batch, help="most rows per model call")
    group.add_argument("--search", default="auto", choices=SEARCHES,
                       help="TG / TXL (CC): 'device' (the whole search one compiled loop, tgjax.infer.device_beam), "
                            "'host' (the host-steered search, tgjax.infer.beam; the same trees and log p(x)) or "
                            "'auto' (default: device, the faster on CPU and accelerators)")
    from tgjax.eval.pushdown import add_pushdown_args  # Pushdown-LM workdirs: their own beam

    add_pushdown_args(parser)


def pushdown_config(args: argparse.Namespace):
    """The Pushdown-LM beam's settings (`tgjax.eval.pushdown`)."""
    from tgjax.eval.pushdown import pushdown_config as config

    return config(args)


def beam_config(args: argparse.Namespace) -> BeamConfig:
    return BeamConfig(word_beam=args.word_beam, action_beam=args.action_beam, fast_track=args.fast_track,
                      max_open_nts=args.max_open_nts, max_consecutive_opens=args.max_consecutive_opens,
                      stop=args.stop, batch_sentences=args.batch_sentences, max_batch=args.max_batch)


def _load(workdir: str, step: str):
    """`tgjax.load(workdir, step)` (imported here: tests replace this function)."""
    from tgjax.infer.api import load

    return load(workdir, step)


def add_ensemble_args(parser: argparse.ArgumentParser) -> None:
    """`--workdir` (repeatable: an ensemble) and `--step`, for `_scorer`."""
    parser.add_argument("--workdir", action="append", default=None,
                        help="a trained run (tgjax train --workdir); repeat it for an ensemble (uniform mixture)")
    parser.add_argument("--step", default="best", help="checkpoint: 'best' (default), 'latest' or a step number")


# Scorers whose log p(x) is exact (the chain rule), not a beam's marginal over trees: `tgjax.infer.api.EXACT_RULES`.


def _scorer(workdirs: Sequence[str], step: str, config: BeamConfig, pushdown=None, search: str = "auto", *,
            command: str | None = None, parses: str | None = None):
    """(scorer, rule, description) of one workdir, or of the per-action uniform mixture of several
    (`tgjax.infer.api.sentence_scorer` on `tgjax.load` of each; `parses`: the trees a parser must give)."""
    return _models_scorer(_load_models(workdirs, step, command=command, parses=parses), config, pushdown, search,
                          command=command)


def _load_models(workdirs: Sequence[str], step: str, *, command: str | None = None, parses: str | None = None):
    """`tgjax.load` of each workdir (`parses`: the trees each one's parser must give)."""
    models = [_load(workdir, step) for workdir in workdirs]
    if parses is not None:
        for model in models:
            model.require("parser", command=command, parses=parses)
    return models


def _models_scorer(models, config: BeamConfig, pushdown=None, search: str = "auto", *, command: str | None = None):
    """`_scorer` of models loaded already."""
    from tgjax.infer.api import describe_scorer, sentence_scorer

    scorer = sentence_scorer(models, command=command, beam=config, pushdown=pushdown, search=search)
    return scorer, models[0].rule, describe_scorer(models, pushdown=pushdown)


def search_with_progress(scorer, sentences: Sequence[Sequence[str]], *, chunk: int = 32,
                         stream=None) -> list[BeamResult]:
    """`scorer.search(sentences)` a chunk at a time, with a progress line (sentences/s, words/s, ETA) on stderr."""
    progress = Progress(len(sentences), label="searched", noun="sentence", stream=stream)
    results: list[BeamResult] = []
    words = 0
    for first in range(0, len(sentences), chunk):
        results.extend(scorer.search(sentences[first:first + chunk]))
        words += sum(len(s) for s in sentences[first:first + chunk])
        progress.update(len(results), totals={"words": words})
    progress.close()
    return results


@dataclasses.dataclass
class UnknownWords:
    """Words mapped to UNK: token and type counts, and the most frequent types."""

    tokens: int = 0
    total: int = 0
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add(self, space: ActionSpace, words: Sequence[str]) -> None:
        for word in words:
            self.total += 1
            if space.encode_word(word)[1]:
                self.tokens += 1
                self.counts[word] += 1

    def format(self) -> str:
        share = self.tokens / self.total if self.total else 0.0
        common = ", ".join(f"{w} ({c})" for w, c in self.counts.most_common(8))
        return (f"unknown words (UNK): {self.tokens} of {self.total} tokens ({100 * share:.2f}%), "
                f"{len(self.counts)} types" + (f"; most frequent: {common}" if common else ""))


class CachedScorer:
    """Beam / direct results per distinct sentence, computed once (SG and BLiMP repeat sentences)."""

    def __init__(self, scorer, unknown: UnknownWords | None = None):
        self.scorer = scorer
        self.unknown = unknown
        self.cache: dict[tuple[str, ...], BeamResult] = {}
        self.seconds = 0.0

    def results(self, sentences: Sequence[Sequence[str]]) -> list[BeamResult]:
        todo = list(dict.fromkeys(tuple(s) for s in sentences if tuple(s) not in self.cache))
        if todo:
            start = time.perf_counter()
            for words, result in zip(todo, search_with_progress(self.scorer, [list(s) for s in todo])):
                self.cache[words] = result
                if self.unknown is not None:
                    self.unknown.add(self.scorer.space, words)
            self.seconds += time.perf_counter() - start
        return [self.cache[tuple(s)] for s in sentences]

    def word_surprisals(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        return [r.surprisals for r in self.results(sentences)]

    def log_probs(self, sentences: Sequence[Sequence[str]]) -> np.ndarray:
        return np.array([r.log_prob for r in self.results(sentences)])


# -----------------------------------------------------------------------------
# Parsing.


def with_preterminals(tree: Tree, tags: Sequence[str]) -> Tree:
    """`tree` (no pre-terminals) with each word wrapped as `(TAG word)`, tags in word order."""
    tags = list(tags)
    position = 0

    def rebuild(node: Tree) -> Tree:
        nonlocal position
        children = []
        for child in node.children:
            if isinstance(child, str):
                if position >= len(tags):
                    raise ValueError(f"{len(tags)} tags for a tree with more words: {tree.to_string()}")
                children.append(Tree(tags[position], [child]))
                position += 1
            else:
                children.append(rebuild(child))
        return Tree(node.label, children)

    out = rebuild(tree)
    if position != len(tags):
        raise ValueError(f"{len(tags)} tags for a tree of {position} words")
    return out


@dataclasses.dataclass
class ParseReport:
    """Parses of a treebank and their scores (F1 in %, EVALB COLLINS.prm rules).

    Attributes:
      gold, predicted, baseline: trees with POS pre-terminals (predicted ones
        carry the gold tags; baseline is right-branching).
      results: the beam's result per sentence.
      labeled_f1, unlabeled_f1: of the predictions; baseline_labeled_f1,
        baseline_unlabeled_f1: of right-branching.
      seconds: beam search time.
    """

    gold: list[Tree]
    predicted: list[Tree]
    baseline: list[Tree]
    results: list[BeamResult]
    labeled_f1: float
    unlabeled_f1: float
    baseline_labeled_f1: float
    baseline_unlabeled_f1: float
    seconds: float
    unknown: UnknownWords
    # Pushdown-LM (Table 4): unlabelled F1 against the right-binarised gold, of the parses and right-branching.
    binarised_f1: float | None = None
    baseline_binarised_f1: float | None = None

    @property
    def sentences_per_second(self) -> float:
        return len(self.gold) / self.seconds if self.seconds > 0 else math.inf

    def perplexity_bound(self) -> float:
        """exp(-Σ log p(x) / Σ words): a per-word perplexity upper bound from the beam's p(x)."""
        words = sum(len(r.words) for r in self.results)
        return math.exp(-sum(r.log_prob for r in self.results) / max(words, 1))

    def format(self) -> str:
        words = sum(len(r.words) for r in self.results)
        return "\n".join([
            f"sentences {len(self.gold)}, words {words}; beam search {self.seconds:.1f}s "
            f"({self.sentences_per_second:.2f} sentences/s)",
            self.unknown.format(),
            f"per-word perplexity bound (beam marginal): {self.perplexity_bound():.2f}",
            f"{'':<20}{'labelled F1':>12}{'unlabelled F1':>15}",
            f"{'beam search':<20}{self.labeled_f1:12.2f}{self.unlabeled_f1:15.2f}",
            f"{'right-branching':<20}{self.baseline_labeled_f1:12.2f}{self.baseline_unlabeled_f1:15.2f}",
            f"unlabelled F1 over right-branching: {self.unlabeled_f1 - self.baseline_unlabeled_f1:+.2f}",
        ] + ([] if self.binarised_f1 is None else [
            "unlabelled F1 against the right-binarised gold (Pushdown paper, Table 4; punctuation kept): "
            f"beam {self.binarised_f1:.2f}, right-branching {self.baseline_binarised_f1:.2f} "
            "(the parses are unlabelled: the labelled F1 above means nothing for them)",
            _pushdown_perplexity(self.results)]))


def _pushdown_perplexity(results) -> str:
    """The Pushdown beam's p(x) per predicted token (what the trainer's teacher-forced validation loss counts)."""
    from tgjax.eval.pushdown import marginal_perplexity

    perplexity, tokens = marginal_perplexity(results)
    return (f"perplexity from the beam's p(x) per predicted token (pieces and <eos>, {tokens}): {perplexity:.2f} "
            f"({math.log(perplexity):.4f} nats; compare with the trainer's teacher-forced validation loss)")


def parse_treebank(search, gold_trees: Sequence[Tree], *, params: str = "collins") -> ParseReport:
    """Parses the gold trees' sentences with `search` (a `WordSynchronousBeamSearch`) and scores them."""
    gold_trees = list(gold_trees)
    if not gold_trees:
        raise ValueError("no trees to parse")
    tagged = [trees_lib.tagged_words(t) for t in gold_trees]
    words = [[w for w, _ in pairs] for pairs in tagged]
    tags = [[t for _, t in pairs] for pairs in tagged]
    unknown = UnknownWords()
    for sentence in words:
        unknown.add(search.space, sentence)
    start = time.perf_counter()
    results = search_with_progress(search, words)
    seconds = time.perf_counter() - start
    predicted = [with_preterminals(r.best_tree, t) for r, t in zip(results, tags)]
    baseline = [right_branching(w, tags=t) for w, t in zip(words, tags)]
    f1 = lambda pred, unlabeled: corpus_f1(gold_trees, pred, params, unlabeled)  # noqa: E731
    table4 = {}
    if getattr(search, "rule", None) == "pushdown":
        from tgjax.eval.pushdown import table4_f1

        table4 = dict(binarised_f1=table4_f1(gold_trees, predicted),
                      baseline_binarised_f1=table4_f1(gold_trees, baseline))
    return ParseReport(gold_trees, predicted, baseline, results, f1(predicted, False), f1(predicted, True),
                       f1(baseline, False), f1(baseline, True), seconds, unknown, **table4)


def corpus_f1(gold, predicted, params: str, unlabeled: bool) -> float:
    """EVALB's corpus F1 (%), 0 where nothing matches (evalb.c prints nan when P = R = 0)."""
    f1 = evalb(gold, predicted, params, unlabeled=unlabeled).all.bracketing_fmeasure
    return 0.0 if math.isnan(f1) else f1


def _read_gold(treebank: str, split: str, limit: int | None, max_words: int | None = PARSE_MAX_WORDS,
               on_bad_tree: str = "error", on_too_long: str = "error") -> tuple[list[Tree], str]:
    if treebank == "builtin":  # its sentences are short (`corpora.MAX_SENTENCE_LENGTH`)
        from tgjax.data.corpora import get_corpus

        gold, where = get_corpus("builtin", split), f"built-in treebank ({split})"
    else:
        gold, where = read_gold_file(treebank, max_words, on_bad_tree, on_too_long), treebank
    gold = gold[:limit] if limit is not None else gold
    check_gold_tagged(gold, where)
    return gold, where


def read_gold_file(path: str, max_words: int | None, on_bad_tree: str = "error", on_too_long: str = "error"
                   ) -> list[Tree]:
    """The trees of a gold file, each at most `max_words` words (the beam's time grows with length).

    A malformed tree, or one over the limit (refused while read, before it is
    built), stops with file:line:column; with `on_bad_tree` / `on_too_long`
    "skip" it is left out, and the count and first locations go to stderr. A
    file with no tree left is an error naming the first one skipped.
    """
    policies = dict(on_error=reader_policy(on_bad_tree), on_too_long=reader_policy(on_too_long))
    if "skip" not in policies.values():
        return trees_lib.read_treebank(path, max_words=max_words)
    gold, report = trees_lib.read_treebank(path, max_words=max_words, **policies)
    if not gold:
        skipped = report.errors + report.too_long
        if not skipped:
            raise trees_lib.TreeSyntaxError(path, 1, 1, "expected at least one tree, found an empty file")
        raise ValueError(f"{skipped[0]} (no tree left to parse: {len(skipped)} skipped)")
    if report.num_skipped or report.num_too_long:
        print(report.summary(max_errors=5), file=sys.stderr)
    return gold


def check_gold_tagged(gold: Sequence[Tree], where: str) -> None:
    """Refuses gold trees without POS tags: the parses are scored (EVALB) with the gold tags put on them.

    (Without tags a unary node over a word, `(VP barks)`, would be taken for a tag and its bracket lost.)
    """
    for tree, location in tagging.located_trees(gold, where):
        word = tagging.untagged_word(tree)
        if word is not None:
            raise ValueError(f"{location}: the word {word!r} is not alone under a POS tag; eval parse needs gold "
                             f"trees with every word under a POS tag (EVALB scores the parses with the gold tags)")


def _described(run) -> str:
    """A command's description: its run function's docstring after the usage line (argparse prints the usage)."""
    return inspect.cleandoc(run.__doc__ or "").split("\n\n")[1]


def add_parse_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval parse`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = _described(run_parse)
    add_ensemble_args(parser)
    parser.add_argument("--shard", default=None, help="I/N: sentence k iff k %% N == I (default: this host's share)")
    parser.add_argument("--treebank", default="builtin", help="gold trees (one per line) or 'builtin'")
    parser.add_argument("--split", default="test", help="split of the built-in treebank")
    parser.add_argument("--limit", type=int, default=None, help="first N trees only")
    add_max_words_arg(parser, PARSE_MAX_WORDS)
    add_bad_input_args(parser)
    parser.add_argument("--output", "-o", default=None, help="write the predicted trees here")
    parser.add_argument("--baseline-output", default=None, help="write the right-branching trees here")
    parser.add_argument("--params", default="collins", help="EVALB parameters: collins, keep_punct or a .prm file")
    parser.add_argument("--merge", nargs="+", default=None,
                        help="the N shards' prediction files, in shard order: interleave and score them")
    parser.add_argument("--search-errors", action="store_true",
                        help="also score each gold tree and the beam's tree teacher-forced and count the wrong "
                             "parses whose gold tree the model prefers (search errors) and the rest (model "
                             "errors); TG and TXL (CC)")
    add_beam_args(parser)
    parser.set_defaults(run=functools.partial(run_parse, parser=parser))


def main_parse(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval parse ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval parse")
    add_parse_arguments(parser)
    return run_parse(parser.parse_args(argv), parser)


def run_parse(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`tgjax eval parse --workdir W [--treebank FILE|builtin] [--output PRED] [--shard I/N] [beam options]`.

    Parses the treebank's sentences with the beam, writes the predicted trees
    (with gold POS tags) one per line, and prints labelled and unlabelled F1
    (EVALB, COLLINS.prm) of the parses and of a right-branching baseline.
    With `--shard I/N` the output holds this shard's sentences (k % N == I)
    and its name gets the shard (`shards.shard_path`); `--merge P0 P1 ...`
    (all N files, in shard order) interleaves them back into `--output` and
    scores the whole treebank. `--search-errors` adds how many wrong parses
    the model itself would have rejected (`tgjax.eval.search_errors`).
    """
    if not args.merge and not args.workdir:
        parser.error("--workdir is required (or --merge)")
    if args.merge and args.search_errors:
        parser.error("--search-errors scores the parses with the model: run it on the parse, not on --merge")
    try:
        check_treebank_lm(args.workdir, "tgjax eval parse")  # another family's run: refused in one line, first
        check_counts(limit=args.limit, max_words=args.max_words)
        shard = shards.Shard(0, 1) if args.merge else shards.job_shard(args.shard)
        _check_parse_outputs(args, shard)
        gold, where = _read_gold(args.treebank, args.split, args.limit, args.max_words, args.on_bad_tree,
                                 args.on_too_long)
        if args.merge:
            return _merge_parses(args, gold, where)
        gold = select_shard(gold, shard)
        if not gold:
            raise ValueError(f"no trees in shard {shard}")
        config = beam_config(args)
        models = _load_models(args.workdir, args.step, command="tgjax eval parse", parses="trees")
        search, rule, described = _models_scorer(models, config, pushdown_config(args), args.search,
                                                 command="tgjax eval parse")
        if args.search_errors and rule not in search_errors.RULES:
            raise ValueError(f"--search-errors: {described} has no teacher-forced tree scorer for its parses "
                             f"(TG and TXL (CC) only)")
        report = parse_treebank(search, gold, params=args.params)
        errors = (search_errors.count_search_errors(_tree_scorer(models), gold, report.predicted)
                  if args.search_errors else None)
        for path, trees in ((args.output, report.predicted), (args.baseline_output, report.baseline)):
            if path:
                write_text(shards.shard_path(path, shard), "".join(t.to_string() + "\n" for t in trees))
    except (ValueError, OSError, KeyError) as err:
        print(f"tgjax eval parse: error: {err}", file=sys.stderr)
        return 2
    print(f"model {described}, step {args.step}; treebank {where}"
          + (f", shard {shard}" if shard.count > 1 else ""))
    if rule == "pushdown":
        print(f"beam: {search.config.beam_size} (token, attachment) hypotheses, final attachment "
              f"{search.config.final_attachment}")
    else:
        print(f"beam: word {config.word_beam}, action {config.action_beam}, fast-track {config.fast_track}, "
              f"stop {config.stop}, caps {config.max_open_nts} open / {config.max_consecutive_opens} in a row")
    print(report.format())
    if errors is not None:
        print(errors.format())
    return 0


def _tree_scorer(models):
    """The teacher-forced scorer of the parse's model(s), on the parameters the beam restored: one `tree_scorer`,
    or their per-action mixture (the beam's own, TG paper §3.7)."""
    from tgjax.infer.ensemble import Ensemble

    members = [model.tree_scorer(command="tgjax eval parse --search-errors") for model in models]
    return members[0] if len(members) == 1 else Ensemble(members, mixture="per-action")


def _check_parse_outputs(args, shard: shards.Shard) -> None:
    """--output and --baseline-output (this shard's files), before any tree is read or model loaded."""
    inputs = [args.treebank, *(args.merge or [])]
    for option, path in (("-o", args.output), ("--baseline-output", args.baseline_output)):
        if path:
            check_output(shards.shard_path(path, shard), option=option, inputs=inputs)


def _merge_parses(args, gold: list[Tree], where: str) -> int:
    """Interleaves shard prediction files (shard order) and scores them against the whole treebank."""
    parts = [[line for line in read_lines(path) if line.strip()] for path in args.merge]
    count = len(parts)
    expected = [len(range(i, len(gold), count)) for i in range(count)]
    if [len(p) for p in parts] != expected:
        raise ValueError(f"{count} shard files with {[len(p) for p in parts]} trees; {where} split {count} ways "
                         f"gives {expected} (give every shard's file, in shard order)")
    predicted = [parts[k % count][k // count] for k in range(len(gold))]
    if args.output:
        write_text(args.output, "".join(t + "\n" for t in predicted))
    baseline = []
    for tree in gold:
        pairs = trees_lib.tagged_words(tree)
        baseline.append(right_branching([w for w, _ in pairs], tags=[t for _, t in pairs]))
    f1 = lambda pred, unlabeled: corpus_f1(gold, pred, args.params, unlabeled)  # noqa: E731
    print(f"merged {count} shards: {len(gold)} sentences of {where}")
    print(f"{'':<20}{'labelled F1':>12}{'unlabelled F1':>15}")
    print(f"{'beam search':<20}{f1(predicted, False):12.2f}{f1(predicted, True):15.2f}")
    print(f"{'right-branching':<20}{f1(baseline, False):12.2f}{f1(baseline, True):15.2f}")
    return 0


# -----------------------------------------------------------------------------
# SyntaxGym.


@dataclasses.dataclass
class SGRun:
    """SyntaxGym results: one `SuiteResult` per suite, the report, and what was unknown."""

    results: list[sg.SuiteResult]
    report: sg.SGReport
    unknown: UnknownWords
    seconds: float


def evaluate_sg(scorer, suites: Sequence[sg.Suite], circuits: sg.Circuits | None = None,
                progress: Callable[[str], None] | None = None) -> SGRun:
    """Scores every suite with the scorer's word surprisals and builds the SG report."""
    unknown = UnknownWords()
    cached = CachedScorer(scorer, unknown)
    results = []
    for suite in suites:
        results.append(sg.score_suite(suite, cached.word_surprisals, unit="nats"))  # the models give nats
        if progress:
            progress(f"{suite.name}: {100 * results[-1].accuracy:.2f} ({cached.seconds:.0f}s so far)")
    return SGRun(results, sg.sg_report(results, circuits), unknown, cached.seconds)


def _suite_result_to_json(result: sg.SuiteResult) -> dict:
    return {"suite": result.suite, "predictions": list(result.predictions), "items": list(result.item_numbers),
            "outcomes": result.outcomes.astype(int).tolist(), "accuracy": result.accuracy}


def _suite_result_from_json(data: dict) -> sg.SuiteResult:
    return sg.SuiteResult(data["suite"], tuple(data["predictions"]), tuple(data["items"]),
                          np.asarray(data["outcomes"], bool).reshape(len(data["items"]), len(data["predictions"])))


def _read_sg_shards(paths: Sequence[str]) -> list[sg.SuiteResult]:
    """The suite results in shards' --output files; a file that is not one is named."""
    results = []
    for path in paths:
        try:
            results.extend(_suite_result_from_json(r) for r in read_json(path)["suites"])
        except (KeyError, TypeError) as err:
            raise ValueError(f"{path}: not an `eval sg --output` file (no {err} in it)") from None
    return results


def check_sentence_lengths(suites: Sequence[sg.Suite], max_words: int) -> None:
    """Refuses (one line naming the suite's file, item and condition) an item sentence over `max_words` words,
    before any is scored: a beam's work grows with a sentence's length."""
    for suite in suites:
        for item in suite.items:
            for condition in item.conditions:
                words = sum(len(region.split()) for region in condition.contents)
                if words > max_words:
                    raise ValueError(f"{suite.path or suite.name}: item {item.number}, condition {condition.name!r}: "
                                     f"{too_long_reason(max_words)} ({words:,} words)")


def add_sg_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval sg`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = "SyntaxGym suites. " + _described(run_sg)
    add_ensemble_args(parser)
    parser.add_argument("--shard", default=None, help="I/N: suite k (by name) iff k %% N == I")
    parser.add_argument("--suites", default=str(SHARED_DATA / "sg_test_suites"), help="directory of suite JSON files")
    parser.add_argument("--suite", action="append", default=None, help="only this suite (repeatable)")
    parser.add_argument("--circuits", default=None, help="circuits.json (default: the one in --suites)")
    parser.add_argument("--output", "-o", default=None, help="write per-suite outcomes as JSON (for --merge)")
    parser.add_argument("--merge", nargs="+", default=None, help="shards' --output files: report them together")
    add_max_words_arg(parser, MINIMAL_PAIR_MAX_WORDS, "item sentence")
    add_beam_args(parser)
    parser.set_defaults(run=functools.partial(run_sg, parser=parser))


def main_sg(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval sg ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval sg")
    add_sg_arguments(parser)
    return run_sg(parser.parse_args(argv), parser)


def run_sg(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`tgjax eval sg --workdir W [--suites DIR] [--suite NAME ...] [--shard I/N] [--output J] [beam options]`.

    Region surprisals from the beam's word-level marginal (direct scoring for
    the word-level models: TXL (terminals), ON-LSTM, the stack-attention LM); prints per-suite accuracy, circuit
    scores and the SG score, and the unknown-word count. `--merge J1 J2 ...` prints the report
    of shards' `--output` files instead.
    """
    if not args.merge and not args.workdir:
        parser.error("--workdir is required (or --merge)")
    try:
        check_counts(max_words=args.max_words)
        check_treebank_lm(args.workdir, "tgjax eval sg", word_scorers=WORD_SCORERS)
        shard = shards.Shard(0, 1) if args.merge else shards.job_shard(args.shard)
        if args.output:
            check_output(shards.shard_path(args.output, shard), inputs=args.merge or ())
        circuits_path = Path(args.circuits) if args.circuits else Path(args.suites) / "circuits.json"
        circuits = sg.load_circuits(circuits_path) if circuits_path.exists() else None
        if args.merge:
            print(sg.sg_report(_read_sg_shards(args.merge), circuits).format())
            return 0
        suites = sg.load_suites(args.suites)
        check_sentence_lengths(suites, args.max_words)
        if args.suite:
            refuse_unknown(args.suite, [s.name for s in suites], kind="suite", where=f"in {args.suites}",
                           expected="a suite name")
            suites = [s for s in suites if s.name in args.suite]
        suites = select_shard(sorted(suites, key=lambda s: s.name), shard)
        if not suites:
            raise ValueError("no suites in this shard")
        scorer, rule, described = _scorer(args.workdir, args.step, beam_config(args), pushdown=pushdown_config(args),
                                          search=args.search, command="tgjax eval sg")
        run = evaluate_sg(scorer, suites, circuits, progress=lambda line: print(line, file=sys.stderr))
        if args.output:
            write_json(shards.shard_path(args.output, shard), {
                "model": described, "workdir": args.workdir, "step": args.step,
                "suites": [_suite_result_to_json(r) for r in run.results],
                "unknown_tokens": run.unknown.tokens, "tokens": run.unknown.total}, indent=1)
    except (ValueError, OSError, KeyError) as err:
        print(f"tgjax eval sg: error: {err}", file=sys.stderr)
        return 2
    print(f"model {described}; {len(suites)} suites"
          + (f", shard {args.shard}" if args.shard else "") + f"; {run.seconds:.1f}s")
    print(run.unknown.format())
    print(run.report.format())
    return 0


# -----------------------------------------------------------------------------
# BLiMP.


def select_pairs(pairs: Sequence[blimp_lib.BlimpPair], *, limit: int | None = None,
                 paradigms: Sequence[str] | None = None) -> list[blimp_lib.BlimpPair]:
    """The first `limit` pairs of each paradigm (all if None), of the given paradigms (all if None).

    A paradigm asked for but not among the pairs is refused by name, with some of those there (a typo would
    otherwise select nothing, or silently less than asked)."""
    kept, seen = [], collections.Counter()
    wanted = set(paradigms) if paradigms else None
    if wanted is not None:
        refuse_unknown(wanted, [pair.uid for pair in pairs], kind="paradigm", where="among the pairs read",
                       expected="a UID")
    for pair in pairs:
        if wanted is not None and pair.uid not in wanted:
            continue
        if limit is not None and seen[pair.uid] >= limit:
            continue
        seen[pair.uid] += 1
        kept.append(pair)
    return kept


@dataclasses.dataclass
class BlimpRun:
    result: blimp_lib.BlimpResult
    unknown: UnknownWords
    seconds: float


def evaluate_blimp_pairs(scorer, pairs: Sequence[blimp_lib.BlimpPair]) -> BlimpRun:
    """log p(sentence) of both sides of every pair (beam marginal, or exact for TXL (terminals))."""
    unknown = UnknownWords()
    cached = CachedScorer(scorer, unknown)
    result = blimp_lib.evaluate_blimp(pairs, lambda sentences: cached.log_probs(
        [blimp_lib.words_of(s) for s in sentences]))
    return BlimpRun(result, unknown, cached.seconds)


def _write_blimp_scores(path: Path, result: blimp_lib.BlimpResult) -> None:
    """One JSON line per pair (what --merge reads); a non-finite log p is an error naming the pair."""
    lines = []
    for pair, good, bad in zip(result.pairs, result.log_prob_good, result.log_prob_bad):
        record = {"sentence_good": pair.sentence_good, "sentence_bad": pair.sentence_bad, "uid": pair.uid,
                  "field": pair.field, "linguistics_term": pair.linguistics_term, "pair_id": pair.pair_id,
                  "log_prob_good": float(good), "log_prob_bad": float(bad)}
        lines.append(dumps_json(record, where=f"{path}: pair {pair.uid}/{pair.pair_id}") + "\n")
    write_text(path, "".join(lines))


def _merge_blimp(paths: Sequence[str]) -> blimp_lib.BlimpResult:
    """The BLiMP result of shards' --output files (JSON lines); a line that is not a score record is named."""
    pairs, scores = [], {}
    for path in paths:
        for number, line in json_lines(path):
            r = parse_json_line(line, path, number)
            try:
                pairs.append(blimp_lib.BlimpPair(r["sentence_good"], r["sentence_bad"], r["uid"], r["field"],
                                                 r["linguistics_term"], r["pair_id"]))
                scores[r["sentence_good"]], scores[r["sentence_bad"]] = r["log_prob_good"], r["log_prob_bad"]
            except (KeyError, TypeError) as err:
                raise ValueError(f"{path}:{number}: not an `eval blimp --output` record (no {err})") from None
    return blimp_lib.evaluate_blimp(pairs, lambda sentences: np.array([scores[s] for s in sentences]))


def add_blimp_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval blimp`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = "BLiMP minimal pairs. " + _described(run_blimp)
    add_ensemble_args(parser)
    parser.add_argument("--shard", default=None, help="I/N: paradigm k (by name) iff k %% N == I")
    parser.add_argument("--data", default=str(SHARED_DATA / "blimp"), help="a BLiMP .jsonl file or a directory")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of each paradigm")
    parser.add_argument("--paradigm", action="append", default=None, help="only this paradigm (UID; repeatable)")
    add_max_words_arg(parser, MINIMAL_PAIR_MAX_WORDS)
    add_bad_input_args(parser, too_long=False)
    parser.add_argument("--output", "-o", default=None, help="write per-pair log-probabilities (JSON lines)")
    parser.add_argument("--merge", nargs="+", default=None, help="shards' --output files: report them together")
    add_beam_args(parser)
    parser.set_defaults(run=functools.partial(run_blimp, parser=parser))


def main_blimp(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval blimp ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval blimp")
    add_blimp_arguments(parser)
    return run_blimp(parser.parse_args(argv), parser)


def run_blimp(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`tgjax eval blimp --workdir W [--data DIR|FILE] [--limit N] [--paradigm UID ...] [--shard I/N] [beam options]`.

    Accuracy per paradigm, field and linguistics term, and overall (a pair is
    right when log p(good) > log p(bad)). `--limit N` scores the first N
    pairs of each paradigm. `--output` writes per-pair scores (JSON lines);
    `--merge F1 F2 ...` reports shards' files together.
    """
    if not args.merge and not args.workdir:
        parser.error("--workdir is required (or --merge)")
    try:
        check_treebank_lm(args.workdir, "tgjax eval blimp", word_scorers=WORD_SCORERS)
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be positive, got {args.limit}")
        shard = shards.Shard(0, 1) if args.merge else shards.job_shard(args.shard)
        if args.output:
            check_output(shards.shard_path(args.output, shard), inputs=[*(args.merge or []), args.data])
        if args.merge:
            print(blimp_lib.format_blimp_report(_merge_blimp(args.merge)))
            return 0
        skipped = [] if args.on_bad_tree == "skip" else None  # one report per file read
        pairs = select_pairs(blimp_lib.load_blimp(args.data, args.max_words, skipped), limit=args.limit,
                             paradigms=args.paradigm)
        uids = select_shard(sorted({p.uid for p in pairs}), shard)
        pairs = [p for p in pairs if p.uid in set(uids)]
        if not pairs:
            raise ValueError("no BLiMP pairs selected (check --paradigm / --shard)")
        scorer, rule, described = _scorer(args.workdir, args.step, beam_config(args), pushdown=pushdown_config(args),
                                          search=args.search, command="tgjax eval blimp")
        run = evaluate_blimp_pairs(scorer, pairs)
        if args.output:
            _write_blimp_scores(shards.shard_path(args.output, shard), run.result)
    except (ValueError, OSError, KeyError) as err:
        print(f"tgjax eval blimp: error: {err}", file=sys.stderr)
        return 2
    how = "exact log p(x)" if rule in EXACT_RULES else "beam-marginal log p(x)"
    print(f"model {described} ({how}); {len(pairs)} pairs"
          + (f", shard {args.shard}" if args.shard else "") + f"; {run.seconds:.1f}s")
    print(run.unknown.format())
    print(blimp_lib.format_blimp_report(run.result))
    for report in skipped or ():  # what --on-bad-tree skip left out, file by file
        if report.num_skipped:
            print(report.summary(max_errors=5), file=sys.stderr)
    return 0


__all__ = ["BlimpRun", "CachedScorer", "ParseReport", "SGRun", "UnknownWords", "add_beam_args", "add_blimp_arguments",
           "add_parse_arguments", "add_sg_arguments", "beam_config", "evaluate_blimp_pairs", "evaluate_sg",
           "main_blimp", "main_parse", "main_sg", "parse_treebank", "run_blimp", "run_parse", "run_sg",
           "select_pairs", "select_shard", "with_preterminals"]
