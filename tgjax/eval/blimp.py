"""BLiMP: accuracy on minimal pairs (Warstadt et al., TACL 2020).

A BLiMP file (`*.jsonl`, one paradigm per file) holds one JSON object per
line with `sentence_good`, `sentence_bad`, `field`, `linguistics_term`,
`UID` (the paradigm) and `pairID`. A language model gets a pair right when
it gives the good sentence a strictly higher log-probability than the bad
one (ties count as wrong).

    pairs = load_blimp("../shared/data/blimp")          # a directory or one file
    result = evaluate_blimp(pairs, log_prob_fn)         # log_prob_fn(list[str]) -> np.ndarray
    print(format_blimp_report(result))

Accuracies are reported per paradigm (UID), per field and per linguistics
term, and overall. The overall BLiMP score is the mean of the paradigm
accuracies, as in the BLiMP paper (every paradigm has 1,000 pairs there, so
it equals the pooled accuracy on the full set); the pooled accuracy (correct
pairs over all pairs) is reported beside it. Field and term accuracies are
likewise means over their paradigms, with the pooled figure beside them.

Scorers turn sentences into words with `words_of`, which splits punctuation
and clitics the way the Penn Treebank does (see its docstring), so that
BLiMP and SyntaxGym sentences are tokenised like the treebanks the models
are trained on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from tgjax.data.text_files import json_lines
from tgjax.limits import MINIMAL_PAIR_MAX_WORDS
from tgjax.syntax.trees import ReadReport, SentenceTooLong, too_long_reason

__all__ = [
    "Accuracy",
    "BlimpPair",
    "BlimpResult",
    "evaluate_blimp",
    "format_blimp_report",
    "load_blimp",
    "words_of",
]

# ---------------------------------------------------------------------------
# PTB-style tokenisation
# ---------------------------------------------------------------------------

# Characters split off the start of a word: opening brackets and quotes, $ and #.
_OPENING = re.compile(r"^(``|[(\[{\"“‘$#])")
# Split off the end of a word: closing brackets and quotes, , ; : ? ! %, and "..." .
_CLOSING = re.compile(r"(''|\.\.\.|[)\]}\"”’,;:?!%])$")
# Clitics split off the end of a word (after closing punctuation is gone).
_CLITIC = re.compile(r"^(.+?)(n['’]t|['’](?:s|re|ve|ll|d|m))$", re.IGNORECASE)
# The apostrophe of a plural possessive: "guests'" -> "guests" "'".
_POSSESSIVE = re.compile(r"^(.*[A-Za-z])(['’])$")


def words_of(sentence: str) -> list[str]:
    """Splits a sentence into words the way Penn Treebank tokenisation does.

    On top of splitting at blanks:

    * opening brackets, quotes, `$` and `#` are split off the start of a
      word, closing brackets and quotes, `,` `;` `:` `?` `!` `%` and `...`
      off its end: `"(see` -> `(`, `see`; `dog,` -> `dog`, `,`;
    * a final `.` is split off only at the end of the sentence (possibly
      before closing quotes or brackets), so abbreviations inside it stay
      whole: `Mr. Smith left.` -> `Mr.`, `Smith`, `left`, `.`;
    * negation and clitics become words of their own: `isn't` -> `is`,
      `n't`; `can't` -> `ca`, `n't`; `won't` -> `wo`, `n't`; `It's` -> `It`,
      `'s`; `'re`, `'ve`, `'ll`, `'d`, `'m` likewise (case-insensitive,
      straight or curly apostrophe); a plural possessive's apostrophe too:
      `guests'` -> `guests`, `'`;
    * hyphenated words (`ex-husband`), numbers (`1,214`) and everything else
      stay whole, and no character is changed (quotes are not rewritten as
      `` and '').

    This covers what BLiMP and SyntaxGym contain; it is an approximation of
    the PTB tokenizer, not a reimplementation of it.
    """
    chunks = sentence.split()
    words: list[str] = []
    for index, chunk in enumerate(chunks):
        last = index == len(chunks) - 1
        before: list[str] = []
        while len(chunk) > 1 and (match := _OPENING.match(chunk)) and match.end() < len(chunk):
            before.append(match.group(0))
            chunk = chunk[match.end():]
        after: list[str] = []  # innermost last
        final_period = last
        while len(chunk) > 1:
            match = _CLOSING.search(chunk)
            if match and match.start() > 0:
                after.append(match.group(0))
                chunk = chunk[: match.start()]
            elif final_period and chunk.endswith(".") and not chunk.endswith(".."):
                after.append(".")
                chunk = chunk[:-1]
                final_period = False
            else:
                break
        middle = [chunk]
        if (clitic := _CLITIC.match(chunk)) is not None:
            middle = [clitic.group(1), clitic.group(2)]
        elif (possessive := _POSSESSIVE.match(chunk)) is not None:
            middle = [possessive.group(1), possessive.group(2)]
        words.extend(before + middle + after[::-1])
    return words


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

_REQUIRED = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID")


@dataclasses.dataclass(frozen=True)
class BlimpPair:
    """One minimal pair; `source` is `file:line` where it was read."""

    sentence_good: str
    sentence_bad: str
    uid: str
    field: str
    linguistics_term: str
    pair_id: str
    source: str = ""


def _malformed(where: str, record) -> str | None:
    """What is wrong with one parsed line of a BLiMP file (`where` is file:line), or None."""
    if not isinstance(record, dict):
        return f"{where}: expected a JSON object, found {type(record).__name__}"
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        return f"{where}: expected the fields {', '.join(_REQUIRED)}; missing {', '.join(missing)}"
    for key in ("sentence_good", "sentence_bad"):
        if not isinstance(record[key], str) or not record[key].strip():
            return f"{where}: expected {key} to be a non-empty string, found {record[key]!r}"
    return None


def _read_jsonl(path: Path, max_words: int | None, reports: list[ReadReport] | None = None) -> list[BlimpPair]:
    pairs: list[BlimpPair] = []
    report = ReadReport(str(path), noun="pairs") if reports is not None else None
    for number, line in json_lines(path):  # bad bytes: an error naming file:line:column
        where = f"{path}:{number}"
        if max_words is not None and line.count(" ") > 2 * max_words + 200:  # two sentences and the other fields
            raise SentenceTooLong(str(path), number, 1, too_long_reason(max_words))
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            problem = f"{where}: expected a JSON object, found invalid JSON ({err.msg})"
        else:
            problem = _malformed(where, record)
        if problem is not None:
            if report is None:
                raise ValueError(problem)
            report.errors.append(ValueError(problem))  # --on-bad-tree skip: counted, the first few listed
            continue
        for key in ("sentence_good", "sentence_bad"):
            if max_words is not None and len(record[key].split()) > max_words:
                raise SentenceTooLong(str(path), number, 1, f"{key}: {too_long_reason(max_words)}")
        pairs.append(BlimpPair(
            sentence_good=record["sentence_good"], sentence_bad=record["sentence_bad"],
            uid=str(record["UID"]), field=str(record["field"]),
            linguistics_term=str(record["linguistics_term"]), pair_id=str(record["pairID"]), source=where,
        ))
    if report is not None:
        report.num_trees = len(pairs)
        reports.append(report)
    if not pairs and report is not None and report.errors:
        raise ValueError(f"{path}: no BLiMP pairs left: every record is malformed ({report.num_skipped} skipped; "
                         f"the first: {report.errors[0]})")
    if not pairs:
        raise ValueError(f"{path}: no BLiMP pairs (the file is empty); expected one JSON object per line")
    return pairs


def load_blimp(path: str | os.PathLike, max_words: int | None = MINIMAL_PAIR_MAX_WORDS,
               reports: list[ReadReport] | None = None) -> list[BlimpPair]:
    """Reads BLiMP pairs from one `.jsonl` file, or from every `*.jsonl` in a directory (sorted by name).

    Raises ValueError naming the file (and line) for an empty file, invalid
    JSON or a missing field, a sentence over `max_words` words (refused while
    read: the scorer's time grows with it), and for a directory without `.jsonl` files.
    With `reports` (a list, `--on-bad-tree skip`), malformed records (invalid
    JSON, a missing field, an empty sentence) are skipped instead, and one
    `ReadReport` per file is appended to it, with what it skipped.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise ValueError(f"{path}: no *.jsonl files in this directory")
        return [pair for file in files for pair in _read_jsonl(file, max_words, reports)]
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    return _read_jsonl(path, max_words, reports)


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Accuracy:
    """Accuracy of a group of pairs.

    `accuracy` is the mean over the group's paradigms (for a paradigm, its
    own accuracy); `pooled` is correct / total over all its pairs.
    """

    correct: int
    total: int
    accuracy: float
    num_paradigms: int = 1

    @property
    def pooled(self) -> float:
        return self.correct / self.total if self.total else float("nan")


@dataclasses.dataclass(frozen=True)
class BlimpResult:
    """Per-pair outcomes and accuracies (fractions in [0, 1]).

    Attributes:
      pairs: the pairs scored, in order.
      log_prob_good, log_prob_bad: the scores given to each pair's sentences.
      correct: log_prob_good > log_prob_bad, per pair.
      per_paradigm, per_field, per_term: `Accuracy` by UID, field and linguistics term.
      accuracy: mean of the paradigm accuracies (the BLiMP score).
      pooled_accuracy: correct pairs / all pairs.
    """

    pairs: list[BlimpPair]
    log_prob_good: np.ndarray
    log_prob_bad: np.ndarray
    correct: np.ndarray
    per_paradigm: dict[str, Accuracy]
    per_field: dict[str, Accuracy]
    per_term: dict[str, Accuracy]
    accuracy: float
    pooled_accuracy: float


def _scores(log_prob_fn: Callable[[list[str]], np.ndarray], sentences: list[str], what: str) -> np.ndarray:
    scores = np.asarray(log_prob_fn(sentences), dtype=np.float64)
    if scores.shape != (len(sentences),):
        raise ValueError(f"log_prob_fn returned shape {scores.shape} for {len(sentences)} {what} sentences; "
                         f"expected ({len(sentences)},)")
    bad = np.flatnonzero(np.isnan(scores))
    if bad.size:
        raise ValueError(f"log_prob_fn returned NaN for {bad.size} {what} sentences, e.g. {sentences[bad[0]]!r}")
    return scores


def _group(pairs: Sequence[BlimpPair], correct: np.ndarray, key: Callable[[BlimpPair], str],
           paradigm_accuracy: dict[str, Accuracy]) -> dict[str, Accuracy]:
    members: dict[str, list[int]] = {}
    paradigms: dict[str, set[str]] = {}
    for index, pair in enumerate(pairs):
        members.setdefault(key(pair), []).append(index)
        paradigms.setdefault(key(pair), set()).add(pair.uid)
    return {
        name: Accuracy(
            correct=int(correct[idx].sum()), total=len(idx),
            accuracy=float(np.mean([paradigm_accuracy[uid].accuracy for uid in sorted(paradigms[name])])),
            num_paradigms=len(paradigms[name]),
        )
        for name, idx in sorted(members.items())
    }


def evaluate_blimp(
    pairs: Iterable[BlimpPair],
    log_prob_fn: Callable[[list[str]], np.ndarray],
    *,
    batch_size: int | None = None,
) -> BlimpResult:
    """Scores every pair with `log_prob_fn` and computes the accuracies.

    Args:
      pairs: BLiMP pairs (e.g. from `load_blimp`); at least one.
      log_prob_fn: maps a list of sentences to an array of their
        log-probabilities log p(sentence), one per sentence. It is called on
        the good sentences, then on the bad ones (in chunks of `batch_size`
        sentences if given).
      batch_size: the most sentences per call; None for one call per side.
    Raises:
      ValueError for no pairs, or when `log_prob_fn` returns the wrong shape or NaN.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("evaluate_blimp needs at least one pair")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")

    def score(sentences: list[str], what: str) -> np.ndarray:
        step = batch_size or len(sentences)
        return np.concatenate([
            _scores(log_prob_fn, sentences[i:i + step], what) for i in range(0, len(sentences), step)
        ])

    good = score([p.sentence_good for p in pairs], "good")
    bad = score([p.sentence_bad for p in pairs], "bad")
    correct = good > bad

    by_uid: dict[str, list[int]] = {}
    for index, pair in enumerate(pairs):
        by_uid.setdefault(pair.uid, []).append(index)
    per_paradigm = {
        uid: Accuracy(int(correct[idx].sum()), len(idx), float(correct[idx].mean()))
        for uid, idx in sorted(by_uid.items())
    }
    return BlimpResult(
        pairs=pairs, log_prob_good=good, log_prob_bad=bad, correct=correct,
        per_paradigm=per_paradigm,
        per_field=_group(pairs, correct, lambda p: p.field, per_paradigm),
        per_term=_group(pairs, correct, lambda p: p.linguistics_term, per_paradigm),
        accuracy=float(np.mean([a.accuracy for a in per_paradigm.values()])),
        pooled_accuracy=float(correct.mean()),
    )


def format_blimp_report(result: BlimpResult) -> str:
    """A plain-text table: overall, per field, per linguistics term, per paradigm (accuracies in %)."""
    lines = [
        f"BLiMP: {len(result.per_paradigm)} paradigms, {len(result.pairs)} pairs",
        f"  accuracy (mean over paradigms) {100 * result.accuracy:6.2f}",
        f"  pooled accuracy (all pairs)    {100 * result.pooled_accuracy:6.2f}",
    ]
    for title, table in (("field", result.per_field), ("linguistics term", result.per_term),
                         ("paradigm (UID)", result.per_paradigm)):
        width = max(len(title), *(len(name) for name in table))
        lines += ["", f"{title:<{width}}  accuracy  pooled  paradigms   pairs"]
        for name, acc in table.items():
            lines.append(f"{name:<{width}}  {100 * acc.accuracy:8.2f}  {100 * acc.pooled:6.2f}  "
                         f"{acc.num_paradigms:9d}  {acc.total:6d}")
    return "\n".join(lines)
