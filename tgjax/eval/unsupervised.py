"""Unsupervised constituency parsing from syntactic distances: ON-LSTM's protocol (thesis §3.4.2).

    tgjax eval unsupervised-parse --workdir W --treebank FILE [--treebank FILE2 ...] [--max-length N]
    tgjax eval unsupervised-parse --baselines-only --treebank FILE

Per layer of a trained ON-LSTM language model, the distances
d_t = 1 − mean_k f̃_{t,k} of the master forget gate are turned into a binary
tree by the release's top-down greedy split (`greedy_tree`, see
`tgjax.syntax.distance`), and scored against the gold trees beside three
baselines (right-branching, left-branching, balanced) scored by the same code.

Preprocessing (both sides, `tgjax.syntax.distance.release_filter`): only the
leaves with one of the release's 36 lexical POS tags are kept (punctuation,
`-NONE-`, `$`, `#` and non-PTB tags are dropped, and counted per tag); gold
constituents lose their labels, empty ones vanish and unary chains collapse.
A sentence left with no word is left out of every score (counted and
reported; the release would fail on it). (`-NONE-` elements are removed by
the tree reader before the filter, so they are not among the counted tags.) The LM reads each sentence alone,
from a zero state, with the words in the release's form (lower-cased, digit
runs -> N) unless `--word-form raw`.

Two F1s (released-code.md §2.4), each over all sentences and over those of
at most `--short-length` (10) words after preprocessing (the WSJ10 idea, here
within the given treebank):

* **sentence F1** (`sentence_f1`), the release's own script: per sentence,
  unlabelled spans of two or more words, the whole-sentence span excluded,
  as *sets*; precision = |P ∩ G| / (|P| + 1e-8), recall = |P ∩ G| / (|G| + 1e-8),
  except that recall is 1 when G is empty and precision then 1 too when P is
  empty; F1 = 2PR / (P + R + 1e-8); then the mean over sentences. So a one- or
  two-word sentence (no span on either side) scores 1 − 5e-9, and a flat gold
  sentence of three or more words (G empty, P not) scores 0.
* **corpus F1** (`corpus_f1`), what the paper reports (maintainer, issue #23):
  EVALB (`tgjax.eval.evalb`, COLLINS.prm, unlabelled) on trees written with
  every constituent labelled `X` and every word tagged `XX`; so the root span
  counts, counts are summed over the corpus, and a one-word sentence has no
  bracket on either side (it adds nothing, as `(<word> w)` in the release).

Per-layer distances come from a trained `onlstm_lm` workdir's parser
(`tgjax.load(workdir).parser()`, `tgjax.infer.onlstm`); this module only needs something with `num_layers` and
`layer_distances(sentences) -> [num_layers, n]` arrays per sentence.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tgjax.eval.arguments import check_counts
from tgjax.eval.evalb import EvalbResult, evalb
from tgjax.limits import UNSUPERVISED_MAX_WORDS, add_bad_input_args, add_max_words_arg, reader_policy
from tgjax.outputs import check_output, write_json
from tgjax.syntax import distance as dist
from tgjax.syntax import trees as trees_lib
from tgjax.syntax.distance import FilteredSentence, Nested
from tgjax.syntax.trees import Tree

__all__ = [
    "BASELINES",
    "ParseScores",
    "PreparedTreebank",
    "add_unsupervised_parse_arguments",
    "corpus_f1",
    "evalb_corpus",
    "greedy_tree",
    "main_unsupervised_parse",
    "prepare_treebank",
    "run_unsupervised_parse",
    "score_trees",
    "sentence_f1",
    "sentence_prf",
]

SHORT_LENGTH = 10
# The release's guards against division by zero, kept so that its numbers come out.
_EPS = 1e-8


def greedy_tree(distances: Sequence[float] | np.ndarray, words: Sequence[str]) -> Nested:
    """The release's parser: nested lists from one distance per word (`tgjax.syntax.distance.tree_from_distances`).

    Split before the first argmax of the span (its first word included); that
    word is then the left sister of the rest: `[tree(left), [w_m, tree(right)]]`.
    One word gives the word, none gives `[]`; a length mismatch is a ValueError.
    """
    return dist.tree_from_distances(distances, words)


# ---------------------------------------------------------------------------
# Sentence F1 (the release's script) and corpus F1 (EVALB)
# ---------------------------------------------------------------------------


def sentence_prf(predicted: Nested, gold: Nested) -> tuple[float, float, float]:
    """(precision, recall, F1) of one sentence as the release computes them (see the module docstring)."""
    predicted_spans = dist.brackets(predicted)
    gold_spans = dist.brackets(gold)
    overlap = len(predicted_spans & gold_spans)
    precision = overlap / (len(predicted_spans) + _EPS)
    recall = overlap / (len(gold_spans) + _EPS)
    if not gold_spans:
        recall = 1.0
        if not predicted_spans:
            precision = 1.0
    return precision, recall, 2 * precision * recall / (precision + recall + _EPS)


def sentence_f1(predicted: Nested, gold: Nested) -> float:
    """The release's per-sentence F1 in [0, 1] (unlabelled, sets of spans of >= 2 words, root excluded)."""
    return sentence_prf(predicted, gold)[2]


_UNWRITABLE = re.compile(r"\s")


def _writable(word: str) -> str:
    # Both sides get the same words, so any spelling EVALB can read will do.
    return _UNWRITABLE.sub("_", word.replace("(", "-LRB-").replace(")", "-RRB-")) or "_"


def _evalb_tree(tree: Nested) -> Tree:
    if isinstance(tree, str):
        return Tree("XX", [_writable(tree)])
    writable = dist.tree_from_nested(tree)
    for node in _preterminals(writable):
        node.children[0] = _writable(node.children[0])
    return writable


def _preterminals(tree: Tree) -> Iterable[Tree]:
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.is_preterminal():
            yield node
        else:
            stack.extend(c for c in node.children if isinstance(c, Tree))


def evalb_corpus(predicted: Sequence[Nested], gold: Sequence[Nested]) -> EvalbResult:
    """EVALB (COLLINS.prm, unlabelled) on nested-list trees, labels `X`, tags `XX` (the release's `<unk>`, `<word>`)."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted trees for {len(gold)} gold trees")
    for i, (p, g) in enumerate(zip(predicted, gold)):
        if dist.nested_words(p) != dist.nested_words(g):
            raise ValueError(f"sentence {i}: the predicted tree's words {dist.nested_words(p)[:10]} differ from the "
                             f"gold tree's {dist.nested_words(g)[:10]}")
        if g == []:
            raise ValueError(f"sentence {i} has no words: leave it out before scoring")
    return evalb([_evalb_tree(g) for g in gold], [_evalb_tree(p) for p in predicted], "collins", unlabeled=True)


def corpus_f1(predicted: Sequence[Nested], gold: Sequence[Nested]) -> float:
    """EVALB's bracketing F-measure (in percent) of `evalb_corpus`; NaN when there is no bracket at all."""
    return evalb_corpus(predicted, gold).all.bracketing_fmeasure


# ---------------------------------------------------------------------------
# Treebanks and scores
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class PreparedTreebank:
    """Gold trees after the release's preprocessing.

    Attributes:
      source: what was read (file names, or the built-in split).
      sentences: the kept sentences (one or more words each), in order.
      num_trees: trees read.
      num_no_words: trees left out because no word survived the filter.
      num_too_long: trees left out by `max_length`.
      dropped_tags: leaves removed, per POS tag, over the kept and left-out trees.
      num_malformed: trees the reader skipped (malformed), with `read_errors` their messages.
    """

    source: str
    sentences: list[FilteredSentence]
    num_trees: int
    num_no_words: int = 0
    num_too_long: int = 0
    dropped_tags: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    num_malformed: int = 0
    read_errors: list[str] = dataclasses.field(default_factory=list)

    def describe(self, short_length: int = SHORT_LENGTH) -> str:
        short = sum(s.num_words <= short_length for s in self.sentences)
        lines = [f"treebank {self.source}: {self.num_trees} trees, {len(self.sentences)} scored "
                 f"({short} with <= {short_length} words)"]
        left_out = []
        if self.num_no_words:
            left_out.append(f"{self.num_no_words} with no word left after the tag filter")
        if self.num_too_long:
            left_out.append(f"{self.num_too_long} longer than --max-length")
        if self.num_malformed:
            left_out.append(f"{self.num_malformed} malformed (skipped by the reader)")
        if left_out:
            lines.append("left out: " + "; ".join(left_out))
        if self.dropped_tags:
            tags = ", ".join(f"{tag} {count}" for tag, count in self.dropped_tags.most_common())
            lines.append(f"leaves dropped by tag (not among the release's 36 word tags): {tags}")
        return "\n".join(lines)


def prepare_treebank(trees: Iterable[Tree] | Iterable[tuple[Tree, str]], source: str = "treebank",
                     max_length: int | None = None,
                     word_tags: frozenset[str] = dist.RELEASE_WORD_TAGS) -> PreparedTreebank:
    """Applies the release's preprocessing to every tree; counts what is left out.

    Args:
      trees: gold trees with POS tags, or (tree, "where") pairs for messages.
      max_length: keep sentences of at most this many words (after the filter).
    """
    prepared = PreparedTreebank(source, [], 0)
    for number, item in enumerate(trees, start=1):
        tree, where = item if isinstance(item, tuple) else (item, f"{source}: tree {number}")
        prepared.num_trees += 1
        filtered = dist.release_filter(tree, word_tags, where=where)
        prepared.dropped_tags.update(filtered.dropped_tags)
        if not filtered.words:
            prepared.num_no_words += 1
        elif max_length is not None and filtered.num_words > max_length:
            prepared.num_too_long += 1
        else:
            prepared.sentences.append(filtered)
    return prepared


@dataclasses.dataclass(frozen=True)
class ParseScores:
    """Sentence-mean and corpus (EVALB) F1, in percent, over all sentences and the short ones.

    None where nothing was scored: no short sentence, or (corpus F1) no bracket at all, e.g. only one-word
    sentences. Printed as "none", written as JSON null; never NaN.
    """

    sentence_f1: float | None
    corpus_f1: float | None
    sentence_f1_short: float | None
    corpus_f1_short: float | None
    num_sentences: int
    num_short: int
    short_length: int = SHORT_LENGTH

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def score_trees(predicted: Sequence[Nested], sentences: Sequence[FilteredSentence],
                short_length: int = SHORT_LENGTH) -> ParseScores:
    """Both F1s of predicted trees against the prepared gold sentences (same order)."""
    if len(predicted) != len(sentences):
        raise ValueError(f"{len(predicted)} predicted trees for {len(sentences)} sentences")
    if not sentences:
        raise ValueError("no sentence to score")
    gold = [s.tree for s in sentences]
    short = [i for i, s in enumerate(sentences) if s.num_words <= short_length]
    per_sentence = np.array([sentence_f1(p, g) for p, g in zip(predicted, gold)])

    def mean(indices) -> float | None:
        return 100.0 * float(per_sentence[indices].mean()) if len(indices) else None

    def corpus(indices) -> float | None:
        f1 = corpus_f1([predicted[i] for i in indices], [gold[i] for i in indices]) if indices else math.nan
        return None if math.isnan(f1) else f1  # no bracket to score

    everything = list(range(len(sentences)))
    return ParseScores(mean(everything), corpus(everything), mean(short), corpus(short),
                       len(sentences), len(short), short_length)


BASELINES: dict[str, Callable[[Sequence[str]], Nested]] = {
    "right-branching": dist.right_branching,
    "left-branching": dist.left_branching,
    "balanced": dist.balanced,
}


def baseline_scores(sentences: Sequence[FilteredSentence], short_length: int = SHORT_LENGTH
                    ) -> dict[str, ParseScores]:
    """The three baselines, scored like the model."""
    return {name: score_trees([build(s.words) for s in sentences], sentences, short_length)
            for name, build in BASELINES.items()}


def layer_scores(layer_distances: Sequence[np.ndarray], sentences: Sequence[FilteredSentence],
                 short_length: int = SHORT_LENGTH) -> list[ParseScores]:
    """One `ParseScores` per layer from per-sentence `[num_layers, n]` word distances."""
    if len(layer_distances) != len(sentences):
        raise ValueError(f"{len(layer_distances)} distance arrays for {len(sentences)} sentences")
    num_layers = {np.shape(d)[0] for d in layer_distances}
    if len(num_layers) != 1:
        raise ValueError(f"sentences disagree on the number of layers: {sorted(num_layers)}")
    (layers,) = num_layers
    return [score_trees([greedy_tree(d[layer], s.words) for d, s in zip(layer_distances, sentences)],
                        sentences, short_length) for layer in range(layers)]


def format_table(rows: dict[str, ParseScores], short_length: int = SHORT_LENGTH) -> str:
    """One line per model layer / baseline: sentence F1 and corpus F1, all and short."""
    width = max(len(name) for name in rows)
    header = (f"{'':{width}}  {'sentence F1':>16}  {'corpus F1 (EVALB)':>18}\n"
              f"{'':{width}}  {'all':>7} {f'<={short_length}':>8}  {'all':>8} {f'<={short_length}':>9}")
    lines = [header]
    for name, s in rows.items():
        lines.append(f"{name:{width}}  {_cell(s.sentence_f1, 7)} {_cell(s.sentence_f1_short, 8)}  "
                     f"{_cell(s.corpus_f1, 8)} {_cell(s.corpus_f1_short, 9)}")
    if any(None in (s.sentence_f1, s.sentence_f1_short, s.corpus_f1, s.corpus_f1_short) for s in rows.values()):
        lines.append(f"none: none scored (no sentence of <={short_length} words, or no bracket to score)")
    return "\n".join(lines)


def _cell(value: float | None, width: int) -> str:
    return f"{'none':>{width}}" if value is None else f"{value:{width}.2f}"


# ---------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------


def _read_treebanks(paths: Sequence[str], split: str, limit: int | None, max_words: int | None = UNSUPERVISED_MAX_WORDS,
                    on_bad_tree: str = "error", on_too_long: str = "error"
                    ) -> tuple[list[tuple[Tree, str]], str, int, list[str]]:
    """(tree, where) pairs from files or the built-in split.

    A malformed tree, or one over `max_words` (refused while read, before it is
    built), stops with file:line:column; with `on_bad_tree` / `on_too_long`
    "skip" it is skipped, counted and located.
    """
    if list(paths) == ["builtin"]:
        from tgjax.data.corpora import get_corpus

        gold = get_corpus("builtin", split)
        builtin = [(tree, f"built-in treebank ({split}): tree {i}") for i, tree in enumerate(gold, start=1)]
        return builtin[:limit] if limit is not None else builtin, f"built-in treebank ({split})", 0, []
    located: list[tuple[Tree, str]] = []
    num_malformed, errors = 0, []
    for path in paths:
        report = trees_lib.ReadReport(path)
        found = [(tree, f"{path}:{line}") for tree, line in trees_lib.iter_treebank_lines(
            path, max_words=max_words, on_error=reader_policy(on_bad_tree), on_too_long=reader_policy(on_too_long),
            report=report)]
        num_malformed += report.num_skipped + report.num_too_long
        errors.extend(str(e) for e in report.errors + report.too_long)
        if not found and not errors:
            raise trees_lib.TreeSyntaxError(path, 1, 1, "expected at least one tree, found an empty file")
        located.extend(found)
    if not located:
        raise ValueError(f"{errors[0]} (no well-formed tree: {num_malformed} malformed)")
    source = paths[0] if len(paths) == 1 else f"{len(paths)} files ({paths[0]}, ...)"
    return (located[:limit] if limit is not None else located), source, num_malformed, errors


def run(treebank: PreparedTreebank, parser=None, *, word_form: str = "release", layers: Sequence[int] | None = None,
        short_length: int = SHORT_LENGTH) -> dict[str, ParseScores]:
    """Scores of each model layer (`layer N`, from 1) and of the baselines, in print order.

    `parser` has `num_layers` and `layer_distances(list of word lists) -> list of [num_layers, n]`
    (a `tgjax.infer.onlstm.OnlstmParser`); None scores the baselines only.
    """
    rows: dict[str, ParseScores] = {}
    sentences = treebank.sentences
    if parser is not None:
        forms = [[dist.release_word_form(w) if word_form == "release" else w for w in s.words] for s in sentences]
        distances = parser.layer_distances(forms)
        for layer, scores in enumerate(layer_scores(distances, sentences, short_length), start=1):
            if layers is None or layer in layers:
                rows[f"layer {layer}"] = scores
    rows.update(baseline_scores(sentences, short_length))
    return rows


def _distance_parser(workdir: str, step: str, *, batch_size: int):
    """The parser of `tgjax.load(workdir, step)`, which must give syntactic distances (an ON-LSTM's)."""
    from tgjax.infer.api import load

    return load(workdir, step).parser(command="tgjax eval unsupervised-parse", parses="distances",
                                      batch_size=batch_size)


def add_unsupervised_parse_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval unsupervised-parse`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = (
        "Unsupervised constituency parsing from an ON-LSTM LM's master-forget distances (per layer), "
        "beside right-branching, left-branching and balanced trees: sentence-mean F1 (the release's "
        "script) and corpus F1 (EVALB), for all sentences and short ones.")
    parser.add_argument("--workdir", default=None, help="a trained onlstm_lm run")
    parser.add_argument("--step", default="best", help="checkpoint: best (default), latest, or a step")
    parser.add_argument("--baselines-only", action="store_true", help="score the baselines only (no --workdir)")
    parser.add_argument("--treebank", action="append", default=None,
                        help="gold trees with POS tags (one per line or .mrg); repeat to concatenate files; "
                             "'builtin' for the built-in treebank (default)")
    parser.add_argument("--split", default="test", help="split of the built-in treebank (default test)")
    parser.add_argument("--limit", type=int, default=None, help="first N trees only")
    parser.add_argument("--max-length", type=int, default=None,
                        help="score only sentences of at most this many words (after dropping punctuation); "
                             "the others are counted and reported")
    parser.add_argument("--short-length", type=int, default=SHORT_LENGTH,
                        help=f"the short subset: sentences of at most this many words (default {SHORT_LENGTH})")
    parser.add_argument("--word-form", choices=("release", "raw"), default="release",
                        help="words as the LM reads them: release (lower-cased, digit runs -> N; default) or raw")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default 64)")
    add_max_words_arg(parser, UNSUPERVISED_MAX_WORDS)
    add_bad_input_args(parser)
    parser.add_argument("--layer", type=int, action="append", default=None, help="print only this layer (repeat)")
    parser.add_argument("--output", "-o", default=None, help="write the scores as one JSON object here")
    parser.set_defaults(run=functools.partial(run_unsupervised_parse, parser=parser))


def main_unsupervised_parse(argv: Sequence[str] | None = None, *, load=None) -> int:
    """`tgjax eval unsupervised-parse ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval unsupervised-parse")
    add_unsupervised_parse_arguments(parser)
    return run_unsupervised_parse(parser.parse_args(argv), parser, load=load)


def run_unsupervised_parse(args: argparse.Namespace, parser: argparse.ArgumentParser, *, load=None) -> int:
    """`tgjax eval unsupervised-parse --workdir W --treebank FILE [...]`: per-layer and baseline F1s.

    `load(workdir, step, batch_size=...)` (for tests) replaces `_distance_parser`.
    Returns 0, or 2 with a one-line error for bad input.
    """
    if not args.baselines_only and not args.workdir:
        parser.error("--workdir is required (or --baselines-only)")
    try:
        check_counts(limit=args.limit, max_length=args.max_length, short_length=args.short_length,
                     batch_size=args.batch_size)
        if args.output:
            check_output(args.output, inputs=args.treebank or ())
        located, source, num_malformed, errors = _read_treebanks(args.treebank or ["builtin"], args.split, args.limit,
                                                                 args.max_words, args.on_bad_tree, args.on_too_long)
        treebank = prepare_treebank(located, source, max_length=args.max_length)
        treebank.num_malformed, treebank.read_errors = num_malformed, errors
        if not treebank.sentences:
            raise ValueError(f"{source}: no sentence left to score\n{treebank.describe(args.short_length)}")
        model = None
        if not args.baselines_only:
            model = (load or _distance_parser)(args.workdir, args.step, batch_size=args.batch_size)
        rows = run(treebank, model, word_form=args.word_form, layers=args.layer, short_length=args.short_length)
        if args.output:
            write_json(args.output, _record(args, source, treebank, rows))
    except (ValueError, FileNotFoundError, KeyError) as err:
        print(f"tgjax eval unsupervised-parse: error: {err}", file=sys.stderr)
        return 2
    for message in errors[:10]:
        print(message, file=sys.stderr)
    if model is not None:
        print(f"model {args.workdir}, step {args.step}; words in {args.word_form} form"
              + (f"; {model.describe()}" if hasattr(model, "describe") else ""))
    print(treebank.describe(args.short_length))
    print(format_table(rows, args.short_length))
    return 0


def _record(args, source: str, treebank, rows: dict) -> dict:
    """What `--output` holds: the treebank's counts and every row's scores."""
    return {"treebank": source, "num_trees": treebank.num_trees, "num_scored": len(treebank.sentences),
            "num_no_words": treebank.num_no_words, "num_too_long": treebank.num_too_long,
            "num_malformed": treebank.num_malformed, "dropped_tags": dict(treebank.dropped_tags),
            "workdir": args.workdir, "step": args.step,
            "scores": {name: scores.as_dict() for name, scores in rows.items()}}
