"""Parse F1 with the rules of EVALB (Sekine & Collins 1997), in pure Python.

`evalb(gold, pred, params="collins")` scores predicted trees against gold
trees and returns an `EvalbResult` holding what the C program prints: one row
per sentence and the summary for all sentences (`.all`) and for sentences of
length <= 40 (`.len40`). `evalb_files` reads two files, and `main_f1` is the
`tgjax eval f1 --gold G --pred P` command, which prints EVALB's layout.

Parameters
----------
`params="collins"` is EVALB's COLLINS.prm::

    LABELED 1
    DELETE_LABEL TOP, -NONE-, ",", ":", "``", "''", "."
    DELETE_LABEL_FOR_LENGTH -NONE-
    EQ_LABEL ADVP PRT
    CUTOFF_LEN 40

`params="keep_punct"` is the same without the five punctuation labels (TOP
and -NONE- are still deleted). An `EvalbParams`, or the path of a `.prm`
file (`read_prm`), may be given instead.

The scoring algorithm (what evalb.c does, and what is implemented here)
-----------------------------------------------------------------------
Reading a tree (one sentence; in files, one line, see `read_evalb_file`):

* `(X word)`, a label followed by blanks, one word and `)` right after it,
  is a pre-terminal: `word` is a terminal with tag `X`. Every other
  `(X ...` opens a bracket (constituent), which spans the terminals read
  until its `)`. So `(S (NN hi))` has one bracket, S, and `(NN hi)` alone has
  none. The PTB's unlabelled wrapper `( (S ...) )` is a bracket with the
  empty label, counted like any other (EVALB does not remove it; it matches
  when both files have it).
* A terminal whose tag is a DELETE_LABEL (exactly, as written: `-NONE-`,
  `,`, `.`, ...) is removed, word and all, before spans are computed, so
  spans count only the remaining words: in `(S (NP (DT a) (NN b)) (. .))`
  both S and NP span words [0, 2).
* The sentence length used for the `len<=40` statistics (the `Len.` column)
  counts every terminal whose tag is not a DELETE_LABEL_FOR_LENGTH; so with
  COLLINS.prm punctuation counts towards it but -NONE- does not.

Scoring a sentence:

* A bracket that spans no word (only deleted terminals below it, or `(X)`)
  is removed. Then the label is cut at its first `-` or `=` (`NP-SBJ-1` ->
  `NP`, `PP=2` -> `PP`; note `-LRB-` as a bracket label becomes the empty
  label), and a bracket whose cut label is a DELETE_LABEL (or EQ_LABEL-equal
  to one) is removed (`TOP`, a bracket labelled `,`); its children stay.
* Brackets are (label, start, end) triples and duplicates count: a unary
  chain `(NP (NP (DT a) (NN b)))` gives two NP brackets over the same span.
  Matching is greedy, in order: each gold bracket takes the first unmatched
  test bracket with the same span and an equal label (labels are equal when
  identical or an EQ_LABEL pair, ADVP = PRT). So n gold and m test copies of
  a bracket match min(n, m) times. With LABELED 0 only spans are compared.
* The top bracket counts like any other (unless its label is deleted, like
  TOP), so a one-bracket sentence `(S ...)` scores 1 match over 1.
* Crossing brackets: the number of test brackets that cross at least one gold
  bracket (a.start < b.start < a.end < b.end or the reverse).
* Tagging accuracy: tags of the remaining words, compared position by
  position with the same label equality (tags are not cut at `-`).
* Complete match: the sentence's matched, gold and test bracket counts are
  all equal (so a sentence with no brackets on either side is a complete
  match).

Sentence status (the `Stat.` column): 0 valid; 2 skip, when the test
sentence has no words (an empty line: a failed parse); 1 error, when the
two sentences have a different number of remaining words ("Length
unmatch (g|t)") or a word differs ("Words unmatch (g|t)"; EQ_WORD pairs
count as equal). Error and skip sentences count in "Number of sentence" but
contribute nothing else; their rows print zeros. Recall, precision and
tagging accuracy are corpus-level (summed counts), "Complete match", "No
crossing" and "2 or less crossing" are percentages of the valid sentences,
"Average crossing" is crossings per valid sentence, and the F-measure is
`2PR/(P+R)` of the printed percentages (NaN when both are 0, which the C
program prints as `nan` or `-nan`). A sentence belongs to `len<=40` when its
gold length (as above) is at most CUTOFF_LEN.

Where this differs from the C program
-------------------------------------
* Malformed input that makes evalb.c loop until it exits (a word outside a
  pre-terminal, `(X a b)`, unbalanced brackets) makes that sentence an error
  sentence here, with a message saying what was expected.
* evalb.c exits, printing no summary, at its (MAX_ERROR + 2)-th error
  (MAX_ERROR is 10 in COLLINS.prm). Here nothing stops unless `max_errors`
  is given, so the numbers are those of `evalb -e <large>`; with
  `max_errors=N` an `EvalbError` is raised at the (N + 2)-th error sentence.
* No fixed limits (evalb.c has 200 words or brackets per sentence, 5000
  characters per line); the QUOTE_LABEL fix-up of new.prm is not implemented
  (COLLINS.prm does not use it).
* Files whose trees span several lines (`.mrg`) are read too; see
  `read_evalb_file`. When the gold and test files have different numbers of
  sentences, the common prefix is scored (as evalb.c does) and the mismatch
  is reported in `EvalbResult.errors`.

Unlabelled F1 on binarised trees (the Pushdown Layers paper)
------------------------------------------------------------
Murty et al. (2023, §5 "Analysis", Parsing, Table 4) score their unlabelled
binary parses with EVALB, "unlabeled F1 ... over binarized ground-truth
parses"; their released script (eval_utils/eval_ptb.py) right-factors the
gold trees (NLTK `chomsky_normal_form`), collapses unary nodes and
pre-terminals, and keeps every leaf; the EVALB call itself is not in it, so
the settings below (LABELED 0, nothing deleted) are our reading of that
pipeline. `binarised=True` does the same to both sides: each
tree is read with `tgjax.syntax.trees.parse` (which drops -NONE- and function
tags), right-binarised, every unary node and pre-terminal is collapsed, and
the result is scored by the algorithm above with LABELED 0, nothing deleted
(punctuation is kept, as in their pipeline) and a dummy tag per word. So the
constituents are all spans of two or more words of the binarised tree, the
whole-sentence span included, each once; a sentence of n >= 2 words has
n - 1 brackets on each side, and precision = recall = F1. Trees without POS
tags (`(X the (X dog barks))`) are accepted in this mode.

`right_branching(words)` builds the right-branching baseline tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence

import numpy as np

from tgjax.syntax import trees as _trees
from tgjax.syntax.trees import Tree

__all__ = [
    "COLLINS",
    "KEEP_PUNCT",
    "EvalbError",
    "EvalbParams",
    "EvalbResult",
    "EvalbSummary",
    "SentenceResult",
    "evalb",
    "evalb_files",
    "main_f1",
    "read_evalb_file",
    "read_prm",
    "right_branching",
]

TreeLike = str | Tree | None

# ---------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter (.prm) file.

    Attributes:
      labeled: LABELED (True: a bracket must match span and label).
      delete_labels: DELETE_LABEL, in file order.
      delete_labels_for_length: DELETE_LABEL_FOR_LENGTH.
      eq_labels: EQ_LABEL pairs (symmetric).
      eq_words: EQ_WORD pairs (symmetric).
      cutoff_len: CUTOFF_LEN, the length limit of the second summary.
    """

    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()
    cutoff_len: int = 40


COLLINS = EvalbParams(
    labeled=True,
    delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",),
    eq_labels=(("ADVP", "PRT"),),
)
"""COLLINS.prm, the standard setting (Collins 1997)."""

KEEP_PUNCT = dataclasses.replace(COLLINS, delete_labels=("TOP", "-NONE-"))
"""COLLINS.prm with punctuation kept (no DELETE_LABEL for , : `` '' .)."""

_NAMED_PARAMS = {"collins": COLLINS, "keep_punct": KEEP_PUNCT}


class EvalbError(ValueError):
    """Bad parameters, or more errors than `max_errors` allows."""


def read_prm(path: str | os.PathLike) -> EvalbParams:
    """Reads an EVALB parameter file (COLLINS.prm, new.prm, ...).

    Lines starting with `#` and lines shorter than 3 characters are skipped,
    as in evalb.c. DEBUG and MAX_ERROR are accepted and ignored (pass
    `max_errors` to `evalb`); QUOTE_LABEL, which this module does not
    implement, and unknown keywords raise `EvalbError` naming the line.
    """
    source = os.fspath(path)
    values: dict[str, list[str]] = {}
    with open(source, encoding="utf-8", errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip()
            if line.startswith("#") or len(line) < 3:
                continue
            key, *rest = line.split(None, 1)
            value = rest[0].strip() if rest else ""
            if key not in ("DEBUG", "MAX_ERROR", "CUTOFF_LEN", "LABELED", "DELETE_LABEL",
                           "DELETE_LABEL_FOR_LENGTH", "EQ_LABEL", "EQ_WORD"):
                raise EvalbError(f"{source}:{number}: unknown or unsupported keyword {key!r}")
            if not value:
                raise EvalbError(f"{source}:{number}: expected a value after {key}")
            if key in ("EQ_LABEL", "EQ_WORD") and len(value.split()) != 2:
                raise EvalbError(f"{source}:{number}: {key} expects two values, found {value!r}")
            if key in ("CUTOFF_LEN", "LABELED", "DEBUG", "MAX_ERROR") and not re.fullmatch(r"-?\d+", value):
                raise EvalbError(f"{source}:{number}: {key} expects an integer, found {value!r}")
            values.setdefault(key, []).append(value)
    return EvalbParams(
        labeled=int(values.get("LABELED", ["1"])[-1]) != 0,
        delete_labels=tuple(values.get("DELETE_LABEL", [])),
        delete_labels_for_length=tuple(values.get("DELETE_LABEL_FOR_LENGTH", [])),
        eq_labels=tuple(tuple(v.split()) for v in values.get("EQ_LABEL", [])),  # type: ignore[misc]
        eq_words=tuple(tuple(v.split()) for v in values.get("EQ_WORD", [])),  # type: ignore[misc]
        cutoff_len=int(values.get("CUTOFF_LEN", ["40"])[-1]),
    )


def _resolve_params(params: str | os.PathLike | EvalbParams) -> EvalbParams:
    if isinstance(params, EvalbParams):
        return params
    if isinstance(params, str) and params in _NAMED_PARAMS:
        return _NAMED_PARAMS[params]
    if os.path.isfile(params):
        return read_prm(params)
    raise EvalbError(
        f"params must be 'collins', 'keep_punct', an EvalbParams or a .prm file, got {params!r}"
    )


def _equal(a: str, b: str, pairs: tuple[tuple[str, str], ...]) -> bool:
    """evalb.c's label_comp / word_comp: identical, or listed as a pair (either way round)."""
    return a == b or (a, b) in _symmetric(pairs)


@functools.lru_cache(maxsize=64)
def _symmetric(pairs: tuple[tuple[str, str], ...]) -> frozenset[tuple[str, str]]:
    return frozenset(pairs) | frozenset((y, x) for x, y in pairs)


@functools.lru_cache(maxsize=64)
def _deleted_bracket_labels(params: EvalbParams) -> frozenset[str]:
    """Cut labels whose bracket is removed: the DELETE_LABELs and their EQ_LABEL partners."""
    pairs = _symmetric(params.eq_labels)
    return frozenset(params.delete_labels) | frozenset(a for a, b in pairs if b in params.delete_labels)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

VALID, ERROR, SKIP = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class SentenceResult:
    """One row of EVALB's table.

    Attributes:
      id: 1-based sentence number (the line number for one-tree-per-line files).
      length: gold length as EVALB counts it for the cut-off (`Len.`).
      status: 0 valid, 1 error, 2 skip (`Stat.`).
      matched, gold_brackets, test_brackets, crossing: bracket counts.
      words, correct_tags: remaining words and correctly tagged ones.
      message: why an error or skip sentence was not scored, else None.
    """

    id: int
    length: int
    status: int
    matched: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0
    message: str | None = None

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test_brackets if self.test_brackets else 0.0

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0

    def format_row(self) -> str:
        """The row exactly as evalb.c prints it."""
        return (
            f"{self.id:4d}  {self.length:3d}    {self.status:d}  "
            f"{self.recall:6.2f} {self.precision:6.2f}   {self.matched:3d}    "
            f"{self.gold_brackets:3d}  {self.test_brackets:3d}    {self.crossing:3d}"
            f"   {self.words:4d}  {self.correct_tags:4d}   {self.tagging_accuracy:6.2f}"
        )


@dataclasses.dataclass(frozen=True)
class EvalbSummary:
    """One block of EVALB's summary (`-- All --` or `-- len<=40 --`).

    The raw counts are fields; the printed figures are properties:
    `bracketing_recall`, `bracketing_precision`, `bracketing_fmeasure`,
    `complete_match`, `no_crossing`, `two_or_less_crossing`,
    `tagging_accuracy` (percentages) and `average_crossing`.
    """

    title: str
    num_sentences: int = 0
    num_error_sentences: int = 0
    num_skip_sentences: int = 0
    matched_brackets: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    complete_match_sentences: int = 0
    crossing_brackets: int = 0
    no_crossing_sentences: int = 0
    two_or_less_crossing_sentences: int = 0
    words: int = 0
    correct_tags: int = 0

    @property
    def num_valid_sentences(self) -> int:
        return self.num_sentences - self.num_error_sentences - self.num_skip_sentences

    @property
    def bracketing_recall(self) -> float:
        return 100.0 * self.matched_brackets / self.gold_brackets if self.gold_brackets > 0 else 0.0

    @property
    def bracketing_precision(self) -> float:
        return 100.0 * self.matched_brackets / self.test_brackets if self.test_brackets > 0 else 0.0

    @property
    def bracketing_fmeasure(self) -> float:
        """2PR/(P+R) of the percentages, as evalb.c computes it; NaN when P + R = 0."""
        p, r = self.bracketing_precision, self.bracketing_recall
        return 2 * p * r / (p + r) if p + r else math.nan

    def _per_valid(self, count: int, scale: float) -> float:
        n = self.num_valid_sentences
        return scale * count / n if n > 0 else 0.0

    @property
    def complete_match(self) -> float:
        return self._per_valid(self.complete_match_sentences, 100.0)

    @property
    def average_crossing(self) -> float:
        return self._per_valid(self.crossing_brackets, 1.0)

    @property
    def no_crossing(self) -> float:
        return self._per_valid(self.no_crossing_sentences, 100.0)

    @property
    def two_or_less_crossing(self) -> float:
        return self._per_valid(self.two_or_less_crossing_sentences, 100.0)

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0

    def add(self, row: SentenceResult) -> EvalbSummary:
        """This summary with one more sentence counted (evalb.c's individual_result)."""
        counts = dict(num_sentences=self.num_sentences + 1)
        if row.status == ERROR:
            counts["num_error_sentences"] = self.num_error_sentences + 1
        elif row.status == SKIP:
            counts["num_skip_sentences"] = self.num_skip_sentences + 1
        else:
            counts.update(
                matched_brackets=self.matched_brackets + row.matched,
                gold_brackets=self.gold_brackets + row.gold_brackets,
                test_brackets=self.test_brackets + row.test_brackets,
                complete_match_sentences=self.complete_match_sentences
                + (row.gold_brackets == row.test_brackets == row.matched),
                crossing_brackets=self.crossing_brackets + row.crossing,
                no_crossing_sentences=self.no_crossing_sentences + (row.crossing == 0),
                two_or_less_crossing_sentences=self.two_or_less_crossing_sentences + (row.crossing <= 2),
                words=self.words + row.words,
                correct_tags=self.correct_tags + row.correct_tags,
            )
        return dataclasses.replace(self, **counts)

    def format(self) -> str:
        """The block as evalb.c prints it (title line first)."""
        return "\n".join([
            f"-- {self.title} --",
            f"Number of sentence        = {self.num_sentences:6d}",
            f"Number of Error sentence  = {self.num_error_sentences:6d}",
            f"Number of Skip  sentence  = {self.num_skip_sentences:6d}",
            f"Number of Valid sentence  = {self.num_valid_sentences:6d}",
            f"Bracketing Recall         = {self.bracketing_recall:6.2f}",
            f"Bracketing Precision      = {self.bracketing_precision:6.2f}",
            f"Bracketing FMeasure       = {self.bracketing_fmeasure:6.2f}",
            f"Complete match            = {self.complete_match:6.2f}",
            f"Average crossing          = {self.average_crossing:6.2f}",
            f"No crossing               = {self.no_crossing:6.2f}",
            f"2 or less crossing        = {self.two_or_less_crossing:6.2f}",
            f"Tagging accuracy          = {self.tagging_accuracy:6.2f}",
        ])


_HEADER = (
    "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
    " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
    "============================================================================"
)
_RULE = "============================================================================"


@dataclasses.dataclass(frozen=True)
class EvalbResult:
    """What EVALB prints: per-sentence rows and the two summaries.

    Attributes:
      all: the summary over all sentences (`-- All --`).
      len40: the summary over sentences of gold length <= `params.cutoff_len`.
      sentences: one `SentenceResult` per sentence, in order.
      errors: one message per error or skip sentence (and for a sentence-count
        mismatch between files), saying where and why.
      params: the settings used.
    """

    all: EvalbSummary
    len40: EvalbSummary
    sentences: list[SentenceResult]
    errors: list[str]
    params: EvalbParams

    @property
    def f1(self) -> float:
        """`all.bracketing_fmeasure`."""
        return self.all.bracketing_fmeasure

    def totals_line(self) -> str:
        """The line of column totals printed under the rows."""
        a = self.all
        line = ""
        if a.gold_brackets > 0 and a.test_brackets > 0:
            line = (f"                {a.bracketing_recall:6.2f} {a.bracketing_precision:6.2f} "
                    f"{a.matched_brackets:6d} {a.gold_brackets:5d} {a.test_brackets:5d}  {a.crossing_brackets:5d}")
        return line + f"  {a.words:5d} {a.correct_tags:5d}   {a.tagging_accuracy:6.2f}"

    def summary(self) -> str:
        """The `=== Summary ===` section, as evalb.c prints it."""
        return f"=== Summary ===\n\n{self.all.format()}\n\n{self.len40.format()}\n"

    def format(self) -> str:
        """The whole output of evalb.c: header, rows, totals and summary."""
        rows = "\n".join(row.format_row() for row in self.sentences)
        body = f"{_HEADER}\n{rows}\n" if rows else f"{_HEADER}\n"
        return f"{body}{_RULE}\n{self.totals_line()}\n{self.summary()}"


# ---------------------------------------------------------------------------
# Reading a sentence the way evalb.c's read_line does
# ---------------------------------------------------------------------------

# C's isspace() in the C locale: ASCII blanks only.
_BLANK = " \t\n\r\f\v"
_TOKEN = re.compile(r"\(([^ \t\n\r\f\v()]*)|\)|[^ \t\n\r\f\v()]+")


@dataclasses.dataclass
class _Sentence:
    """A sentence as evalb.c stores it: remaining terminals, brackets in opening order, the cut-off length."""

    words: list[str]
    tags: list[str]
    brackets: list[tuple[str, int, int]]  # (label as written, start, end) over remaining words
    length: int
    error: str | None = None


def _read_sentence(text: str, params: EvalbParams) -> _Sentence:
    words: list[str] = []
    tags: list[str] = []
    brackets: list[list] = []
    open_brackets: list[int] = []
    length = 0
    delete = set(params.delete_labels)
    delete_for_length = set(params.delete_labels_for_length)

    def fail(reason: str) -> _Sentence:
        return _Sentence(words, tags, [], length, reason)

    tokens = list(_TOKEN.finditer(text))
    i, n = 0, len(tokens)
    while i < n:
        token = tokens[i]
        first = token.group(0)[0]
        if first == "(":
            label = token.group(1)
            after_label = token.end()
            # Pre-terminal: the label, blanks, a word and ')' right after the word
            # (or, as in evalb.c, blanks and ')' at once: a terminal with an empty word).
            if after_label < len(text) and text[after_label] in _BLANK and i + 1 < n:
                nxt = tokens[i + 1].group(0)
                word = None
                if nxt == ")":
                    word, consumed = "", 2
                elif nxt[0] != "(":
                    close = tokens[i + 2] if i + 2 < n else None
                    if close is None or close.group(0) != ")" or close.start() != tokens[i + 1].end():
                        found = "the end of the sentence" if close is None else repr(close.group(0))
                        return fail(
                            f"expected ')' right after the word {nxt!r} of pre-terminal '({label} {nxt}', "
                            f"found {found} (words must each be in a pre-terminal '(TAG word)')"
                        )
                    word, consumed = nxt, 3
                if word is not None:
                    if label not in delete_for_length:
                        length += 1
                    if label not in delete:
                        words.append(word)
                        tags.append(label)
                    i += consumed
                    continue
            open_brackets.append(len(brackets))
            brackets.append([label, len(words), -1])
        elif first == ")":
            if not open_brackets:
                return fail("found ')' with no open bracket to close (too many close brackets)")
            brackets[open_brackets.pop()][2] = len(words)
        else:
            return fail(f"found the word {token.group(0)!r} outside a pre-terminal '(TAG word)'")
        i += 1
    if open_brackets:
        label = brackets[open_brackets[-1]][0]
        return fail(f"expected ')' to close '({label}', found the end of the sentence (unbalanced brackets)")
    return _Sentence(words, tags, [tuple(b) for b in brackets], length)


_TAIL = re.compile(r"[-=]")


@functools.lru_cache(maxsize=4096)
def _cut_label(label: str) -> str:
    """evalb.c's modify_label: the label up to its first '-' or '='."""
    match = _TAIL.search(label)
    return label[: match.start()] if match else label


def _kept_brackets(sentence: _Sentence, params: EvalbParams) -> list[tuple[str, int, int]]:
    """The brackets left after evalb.c's massage_data: no empty spans, cut labels, no deleted labels."""
    deleted = _deleted_bracket_labels(params)
    kept = []
    for label, start, end in sentence.brackets:
        if start == end:
            continue
        label = _cut_label(label)
        if label not in deleted:
            kept.append((label, start, end))
    return kept


def _score(sid: int, gold: _Sentence, test: _Sentence, params: EvalbParams) -> SentenceResult:
    """evalb.c's calc_result for one sentence pair."""
    if gold.error or test.error:
        side = "gold" if gold.error else "test"
        return SentenceResult(sid, gold.length, ERROR, message=f"{side}: {gold.error or test.error}")
    if not test.words:
        return SentenceResult(sid, gold.length, SKIP, message="test sentence is empty (skipped)")
    if len(gold.words) != len(test.words):
        return SentenceResult(sid, gold.length, ERROR,
                              message=f"Length unmatch ({len(gold.words)}|{len(test.words)})")
    for g, t in zip(gold.words, test.words):
        if not _equal(g, t, params.eq_words):
            return SentenceResult(sid, gold.length, ERROR, message=f"Words unmatch ({g}|{t})")

    gold_brackets = _kept_brackets(gold, params)
    test_brackets = _kept_brackets(test, params)

    # Greedy matching in order; test brackets grouped by span keep their order.
    by_span: dict[tuple[int, int], list[int]] = {}
    for j, (_, start, end) in enumerate(test_brackets):
        by_span.setdefault((start, end), []).append(j)
    used = [False] * len(test_brackets)
    matched = 0
    for label, start, end in gold_brackets:
        for j in by_span.get((start, end), ()):
            if not used[j] and (not params.labeled or _equal(label, test_brackets[j][0], params.eq_labels)):
                used[j] = True
                matched += 1
                break

    crossing = 0
    if gold_brackets and test_brackets:
        gs, ge = np.array([b[1:] for b in gold_brackets]).T[:, :, None]
        ts, te = np.array([b[1:] for b in test_brackets]).T[:, None, :]
        crosses = ((gs < ts) & (ge > ts) & (ge < te)) | ((gs > ts) & (gs < te) & (ge > te))
        crossing = int(crosses.any(axis=0).sum())

    correct_tags = sum(_equal(g, t, params.eq_labels) for g, t in zip(gold.tags, test.tags))
    return SentenceResult(
        sid, gold.length, VALID, matched=matched, gold_brackets=len(gold_brackets),
        test_brackets=len(test_brackets), crossing=crossing, words=len(gold.words), correct_tags=correct_tags,
    )


# ---------------------------------------------------------------------------
# Binarised, unlabelled trees (Pushdown Layers' parsing evaluation)
# ---------------------------------------------------------------------------

_DUMMY_TAG = "XX"
_DUMMY_LABEL = "X"


def _binarised_bracketing(tree: Tree) -> str:
    """The right-binarised tree with unary nodes and pre-terminals collapsed, in EVALB form.

    Every word gets the tag `XX`, every remaining node (two or more children)
    the label `X`: `(S (NP (DT a) (JJ b) (NN c)) (VP (VBZ d)))` ->
    `(X (X (XX a) (X (XX b) (XX c))) (XX d))`.
    """
    binary = _trees.binarise(tree, "right")
    parts: list[str] = []
    # Items: a node to write, or None for the ')' closing a written node.
    stack: list[Tree | str | None] = [binary]
    while stack:
        item = stack.pop()
        if item is None:
            parts.append(")")
            continue
        # Collapse unary chains (a pre-terminal is a unary node over a word).
        while isinstance(item, Tree) and len(item.children) == 1:
            item = item.children[0]
        if isinstance(item, str):
            parts.append(f" ({_DUMMY_TAG} {item})")
        elif not item.children:
            continue
        else:
            parts.append(f" ({_DUMMY_LABEL}")
            stack.append(None)
            stack.extend(reversed(item.children))
    return "".join(parts).strip()


# ---------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------


def _to_text(tree: TreeLike, binarised: bool) -> str:
    """The bracketed text of one sentence; raises ValueError (TreeSyntaxError) for bad binarised input."""
    if tree is None:
        return ""
    if binarised:
        if isinstance(tree, str):
            if not tree.strip():
                return ""
            tree = _trees.parse(tree)
        return _binarised_bracketing(tree)
    if isinstance(tree, Tree):
        return tree.to_string()
    if isinstance(tree, str):
        return tree
    raise TypeError(f"expected a bracketed string, a Tree or None, got {type(tree).__name__}")


def _evaluate(
    pairs: Iterable[tuple[TreeLike, TreeLike, str, str]],
    params: EvalbParams,
    binarised: bool,
    max_errors: int | None,
    extra_errors: Sequence[str] = (),
) -> EvalbResult:
    """Scores (gold, test, gold location, test location) pairs."""
    if binarised:
        params = EvalbParams(labeled=False, cutoff_len=params.cutoff_len)
    summary_all = EvalbSummary("All")
    summary_cut = EvalbSummary(f"len<={params.cutoff_len}")
    rows: list[SentenceResult] = []
    errors: list[str] = list(extra_errors)
    num_errors = len(extra_errors)
    for sid, (gold, test, gold_where, test_where) in enumerate(pairs, start=1):
        sentences = []
        for tree in (gold, test):
            try:
                sentences.append(_read_sentence(_to_text(tree, binarised), params))
            except ValueError as err:  # TreeSyntaxError from the binarised reader
                sentences.append(_Sentence([], [], [], 0, f"{err}"))
        row = _score(sid, sentences[0], sentences[1], params)
        rows.append(row)
        summary_all = summary_all.add(row)
        if row.length <= params.cutoff_len:
            summary_cut = summary_cut.add(row)
        if row.message is not None:
            errors.append(f"sentence {sid} ({gold_where}, {test_where}): {row.message}")
        if row.status == ERROR:
            num_errors += 1
            if max_errors is not None and num_errors > max_errors + 1:
                raise EvalbError(
                    f"{num_errors} errors, more than max_errors={max_errors} allows "
                    f"(evalb would stop here):\n  " + "\n  ".join(errors[-5:])
                )
    return EvalbResult(summary_all, summary_cut, rows, errors, params)


def evalb(
    gold_trees: Sequence[TreeLike],
    pred_trees: Sequence[TreeLike],
    params: str | os.PathLike | EvalbParams = "collins",
    *,
    unlabeled: bool = False,
    binarised: bool = False,
    max_errors: int | None = None,
) -> EvalbResult:
    """Scores predicted trees against gold trees with EVALB's rules.

    Args:
      gold_trees, pred_trees: one entry per sentence, in the same order: a
        bracketed string, a `Tree`, or None / "" for a missing parse (a
        "skip" sentence when it is the prediction).
      params: "collins" (COLLINS.prm), "keep_punct", an `EvalbParams`, or a
        .prm file.
      unlabeled: score spans only (LABELED 0), keeping the other settings.
      binarised: the Pushdown paper's unlabelled F1 on right-binarised trees
        with unary chains collapsed (see the module docstring).
      max_errors: raise `EvalbError` where evalb.c would exit (the
        (max_errors + 2)-th error sentence); None never stops.
    Returns:
      An `EvalbResult`; `result.all.bracketing_fmeasure` is the usual F1.
    """
    if len(gold_trees) != len(pred_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(pred_trees)} predicted trees")
    resolved = _resolve_params(params)
    if unlabeled:
        resolved = dataclasses.replace(resolved, labeled=False)
    pairs = ((g, p, f"gold #{i}", f"pred #{i}") for i, (g, p) in enumerate(zip(gold_trees, pred_trees), start=1))
    return _evaluate(pairs, resolved, binarised, max_errors)


def read_evalb_file(path: str | os.PathLike) -> list[tuple[int, str]]:
    """The sentences of a gold or test file, as (line number, text) pairs.

    One tree per line (what evalb reads): every line is a sentence, blank
    lines included, so a blank line in a test file is a skipped sentence, as
    in evalb. Files whose trees span several lines (the PTB's `.mrg` layout:
    a line that leaves a bracket open, followed by an indented line) are
    read tree by tree instead: a tree runs from a line at bracket depth 0
    until its brackets balance, or until a line that starts with '(' in
    column 1 (which starts the next tree, leaving the unbalanced one to be
    reported as an error sentence); blank lines between trees are ignored.
    Sentences are numbered by the line where they start.
    """
    source = os.fspath(path)
    with open(source, encoding="utf-8", errors="surrogateescape", newline="") as f:
        text = f.read()
    # Lines end at '\n' only, as for fgets ('\r' of CRLF files is a blank to the reader).
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    depths = [line.count("(") - line.count(")") for line in lines]
    multi_line = any(
        depths[i] > 0 and lines[i + 1][:1] in tuple(_BLANK) and lines[i + 1].strip() for i in range(len(lines) - 1)
    )
    if not multi_line:
        return [(number, line) for number, line in enumerate(lines, start=1)]
    sentences: list[tuple[int, str]] = []
    depth = 0
    for number, (line, change) in enumerate(zip(lines, depths), start=1):
        if depth > 0 and not line.startswith("("):
            start, joined = sentences[-1]
            sentences[-1] = (start, f"{joined} {line.strip()}")
            depth += change
        elif line.strip():
            sentences.append((number, line))
            depth = change
    return sentences


def evalb_files(
    gold_path: str | os.PathLike,
    pred_path: str | os.PathLike,
    params: str | os.PathLike | EvalbParams = "collins",
    *,
    unlabeled: bool = False,
    binarised: bool = False,
    max_errors: int | None = None,
) -> EvalbResult:
    """`evalb` on two files (see `read_evalb_file`); messages name `file:line`.

    When the files hold different numbers of sentences the common prefix is
    scored, as evalb.c does, and the mismatch is the first entry of
    `result.errors`.
    """
    gold = read_evalb_file(gold_path)
    pred = read_evalb_file(pred_path)
    extra = []
    if len(gold) != len(pred):
        which = "gold" if len(gold) > len(pred) else "test"
        extra.append(
            f"Number of lines unmatch (too many lines in {which} file): {os.fspath(gold_path)} has "
            f"{len(gold)} sentences, {os.fspath(pred_path)} has {len(pred)}; "
            f"scored the first {min(len(gold), len(pred))}"
        )
    resolved = _resolve_params(params)
    if unlabeled:
        resolved = dataclasses.replace(resolved, labeled=False)
    pairs = (
        (g_text, p_text, f"{os.fspath(gold_path)}:{g_line}", f"{os.fspath(pred_path)}:{p_line}")
        for (g_line, g_text), (p_line, p_text) in zip(gold, pred)
    )
    return _evaluate(pairs, resolved, binarised, max_errors, extra)


# ---------------------------------------------------------------------------
# Baseline
# ---------------------------------------------------------------------------


def right_branching(words: Sequence[str], label: str = "X", tags: Sequence[str] | str | None = None) -> Tree:
    """The right-branching tree over `words`: `(X w1 (X w2 (X w3 w4)))`.

    Args:
      words: at least one word.
      label: the label of every constituent.
      tags: None to leave words bare (fine for `binarised=True` scoring), a
        tag for every word (`"XX"`), or one tag per word (e.g. gold POS tags,
        for EVALB's labelled scoring), which wraps each word in a pre-terminal.
    Returns:
      A tree with n - 1 constituents for n >= 2 words; for one word, `(X w)`
      (or `(X (TAG w))` with tags).
    """
    words = list(words)
    if not words:
        raise ValueError("right_branching needs at least one word")
    if tags is None:
        leaves: list[Tree | str] = list(words)
    else:
        tag_list = [tags] * len(words) if isinstance(tags, str) else list(tags)
        if len(tag_list) != len(words):
            raise ValueError(f"{len(words)} words but {len(tag_list)} tags")
        leaves = [Tree(tag, [word]) for tag, word in zip(tag_list, words)]
    if len(leaves) == 1:
        return Tree(label, leaves)
    tree = Tree(label, leaves[-2:])
    for leaf in reversed(leaves[:-2]):
        tree = Tree(label, [leaf, tree])
    return tree


# ---------------------------------------------------------------------------
# Command line: tgjax eval f1
# ---------------------------------------------------------------------------


def add_f1_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval f1`'s description and arguments, on the parser `tgjax.cli` made for it; `run` is `run_f1`."""
    parser.description = "Parse F1 with EVALB's rules (COLLINS.prm by default)."
    parser.add_argument("--gold", required=True, help="gold trees, one per line (or a multi-line .mrg file)")
    parser.add_argument("--pred", required=True,
                        help="predicted trees, in the same order; a blank line is a failed parse")
    parser.add_argument("--params", default="collins",
                        help="'collins' (COLLINS.prm, default), 'keep_punct', or an EVALB .prm file")
    parser.add_argument("--unlabeled", action="store_true", help="compare spans only (LABELED 0)")
    parser.add_argument("--binarised", "--binarized", action="store_true",
                        help="unlabelled F1 on right-binarised trees, unary chains collapsed (Pushdown paper)")
    parser.add_argument("--per-sentence", action="store_true", help="print the per-sentence table too")
    parser.add_argument("--max-errors", type=int, default=None,
                        help="stop where evalb would with MAX_ERROR N (default: never stop)")
    parser.set_defaults(run=run_f1)


def main_f1(argv: Sequence[str] | None = None) -> int:
    """`tgjax eval f1 --gold G --pred P [--params collins|keep_punct|FILE.prm] [--unlabeled] [--binarised]`."""
    parser = argparse.ArgumentParser(prog="tgjax eval f1")
    add_f1_arguments(parser)
    return run_f1(parser.parse_args(argv))


def run_f1(args: argparse.Namespace) -> int:
    """Prints EVALB's summary (with `--per-sentence`, its whole output: rows,
    totals and summary) to stdout, and one line per error or skip sentence
    to stderr. Returns 0, or 2 for unreadable files or bad parameters.
    """
    try:
        result = evalb_files(args.gold, args.pred, args.params, unlabeled=args.unlabeled,
                             binarised=args.binarised, max_errors=args.max_errors)
    except (OSError, EvalbError) as err:
        print(f"tgjax eval f1: error: {err}", file=sys.stderr)
        return 2
    if result.all.num_sentences == 0:  # an F-measure of no sentence is no number
        print(f"tgjax eval f1: error: no sentence to score: {result.errors[0] if result.errors else ''}"
              f"{'' if result.errors else f'{args.gold} and {args.pred} are empty'}", file=sys.stderr)
        return 2
    for message in result.errors:
        print(message, file=sys.stderr)
    print(result.format() if args.per_sentence else result.summary(), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main_f1())
