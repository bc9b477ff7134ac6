"""Logical inference (Bowman et al., 2015) as the Ordered Memory release uses it: reader, splits, semantics.

Files `trainN` / `testN`, N = 0..12, one pair a line:
`relation<TAB>left<TAB>right`, e.g.

    |<TAB>( not ( e ( or ( not c ) ) ) )<TAB>( d ( and e ) )

A formula is a variable a–f, a negation `( not X )`, or a binary
`( L ( op R ) )` with op `and` / `or`. The parentheses are input tokens for
the model. A pair's file N is the larger operator count of its two formulas
(`and`, `or` and `not` each count one), capped at 12; the reader checks it.

Relations (MacCartney's seven; ids in the release's order): `<` forward
entailment, `>` reverse entailment, `=` equivalence, `^` negation (disjoint
and exhaustive), `|` alternation (disjoint, not exhaustive), `v` cover
(overlapping and exhaustive), `#` independence. `relation_of` computes one
from the formulas over the 64 truth assignments of a–f.

Splits:
  * length generalization: train on train0..train6 (every 10th of those
    lines, counted across the files in order, held out for validation, as
    the release does), test on each of test7..test12 separately (the release
    also reports test0..test6);
  * systematicity A/B/C (thesis Table 3.4): drop from training every pair
    whose text contains the pattern, test on the test pairs that contain it:
      A: `( and ( not a ) )`      -> 128,969 training pairs
      B: `( and ( not * ) )`      ->  87,948
      C: `( {and,or} ( not * ) )` ->  51,896
    `*` is a whole formula; because a right operand that starts `( not` is a
    negation, B and C match the token prefixes `( and ( not` / `( or ( not`.
    The test holds the pairs of all of test0..test12 with the pattern (A
    2,472, B 17,544, C 27,232 pairs); the thesis' A / B / C columns are
    "aggregated over the unseen operation lengths", 7..12
    (`THESIS_SYSTEMATICITY_COUNTS`, `thesis_lengths`: A 1,369, B 9,257, C
    12,757 pairs), which is what results compare with the thesis; the
    figure over every length is reported apart.

Generator (`generate_pairs`, released-code.md §3.4, the release's
`generate_neg_set_data.py` restated): each pair draws a sub-universe of 4 of
the 6 variables; a formula with length budget m (12 at the root) is a binary
`and` / `or` node with probability 4/9 when m >= 2 (children get m // 2),
else a variable of the sub-universe; every node is then negated with
probability 1/3. Tautologies and contradictions are redrawn, pairs are kept
unique, and the label is `relation_of` over the truth table.
`split_generated` buckets pairs by operator count and splits each bucket
85/15 into train / test; `write_logic_files` writes them in the file format.
The original files stay the data of record: this generator makes more of
the same kind (and fresh data where the files are absent).

Malformed lines raise `LogicFormatError` naming file:line:column.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from tgjax.syntax.distance import brackets
from tgjax.syntax.trees import SourceLocationError, text_lines

VARIABLES = ("a", "b", "c", "d", "e", "f")
BINARY_OPERATORS = ("or", "and")
# Token ids of the release (proplog.py): '(' 0, ')' 1, a..f 2..7, or 8, and 9, not 10; padding 11.
TOKENS = ("(", ")", *VARIABLES, "or", "and", "not")
TOKEN_IDS = {token: token_id for token_id, token in enumerate(TOKENS)}
PAD_ID = len(TOKENS)
RELATIONS = ("<", ">", "=", "^", "|", "#", "v")  # label ids in the release's order
RELATION_IDS = {relation: relation_id for relation_id, relation in enumerate(RELATIONS)}
MAX_OPERATOR_COUNT = 12
_TOKEN = re.compile(r"\S+")
TRAIN_MAX_OPERATORS = 6
TEST_OPERATOR_COUNTS = tuple(range(7, 13))
THESIS_SYSTEMATICITY_COUNTS = TEST_OPERATOR_COUNTS  # the unseen lengths the thesis' A / B / C aggregate
T = TypeVar("T")

# Systematicity splits: token sequences whose presence excludes a training pair.
SYSTEMATICITY_PATTERNS: dict[str, tuple[tuple[str, ...], ...]] = {
    "A": (("(", "and", "(", "not", "a", ")", ")"),),
    "B": (("(", "and", "(", "not"),),
    "C": (("(", "and", "(", "not"), ("(", "or", "(", "not")),
}


class LogicFormatError(SourceLocationError):
    """A malformed logic line. `str(err)` is `source:line:column: reason` (1-based; columns count characters)."""


# --------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Not:
    operand: Formula


@dataclasses.dataclass(frozen=True)
class Binary:
    operator: str  # "and" | "or"
    left: Formula
    right: Formula


Formula = str | Not | Binary  # a variable name, or a node


def count_operators(formula: Formula) -> int:
    """and + or + not nodes."""
    if isinstance(formula, Not):
        return 1 + count_operators(formula.operand)
    if isinstance(formula, Binary):
        return 1 + count_operators(formula.left) + count_operators(formula.right)
    return 0


def tokens_of(formula: Formula) -> list[str]:
    """The file's tokens, parentheses included: `( d ( and e ) )`."""
    if isinstance(formula, Not):
        return ["(", "not", *tokens_of(formula.operand), ")"]
    if isinstance(formula, Binary):
        return ["(", *tokens_of(formula.left), "(", formula.operator, *tokens_of(formula.right), ")", ")"]
    return [formula]


def gold_tree(formula: Formula) -> str | tuple:
    """The bracketing over the non-parenthesis tokens, as nested tuples.

    `( d ( and e ) )` -> `("d", ("and", "e"))`; `( not c )` -> `("not", "c")`.
    The release scores parses with the parenthesis tokens removed.
    """
    if isinstance(formula, Not):
        return ("not", gold_tree(formula.operand))
    if isinstance(formula, Binary):
        return (gold_tree(formula.left), (formula.operator, gold_tree(formula.right)))
    return formula


def gold_spans(formula: Formula) -> list[tuple[int, int]]:
    """Every constituent of `gold_tree` over >= 2 tokens, as [start, end) ranges over the non-parenthesis tokens.

    Includes the root span. `( d ( and e ) )` -> words d, and, e -> [(0, 3), (1, 3)].
    """
    spans = brackets(gold_tree(formula), include_root=True)  # every node is binary: each spans >= 2 tokens
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def parenthesis_positions(formula: Formula) -> set[int]:
    """Positions of "(" and ")" in `tokens_of(formula)`: what the release strips from a parse before scoring."""
    return {i for i, token in enumerate(tokens_of(formula)) if token in ("(", ")")}


def _world_sets() -> dict[str, int]:
    """Each variable's satisfying assignments as a 64-bit mask (bit w = assignment w of a..f)."""
    worlds = np.arange(64)
    return {
        v: int(sum(1 << int(w) for w in worlds[(worlds >> i) & 1 == 1])) for i, v in enumerate(VARIABLES)
    }


_VARIABLE_WORLDS = _world_sets()
_ALL_WORLDS = (1 << 64) - 1


def satisfying_worlds(formula: Formula) -> int:
    """The set of the 64 assignments of a..f that make `formula` true, as a bit mask."""
    if isinstance(formula, Not):
        return _ALL_WORLDS & ~satisfying_worlds(formula.operand)
    if isinstance(formula, Binary):
        left, right = satisfying_worlds(formula.left), satisfying_worlds(formula.right)
        return left & right if formula.operator == "and" else left | right
    return _VARIABLE_WORLDS[formula]


def relation_of(left: Formula, right: Formula) -> str:
    """MacCartney's relation between two formulas (the generator's definition).

    Restricting to a sub-universe of variables, as the generator does, does
    not change it: every test below is about emptiness of Boolean
    combinations of the two sets. The generator rejects tautologies and
    contradictions, and the relations are not defined for them here either:
    ValueError.
    """
    lw, rw = satisfying_worlds(left), satisfying_worlds(right)
    for side, worlds in (("left", lw), ("right", rw)):
        if worlds in (0, _ALL_WORLDS):
            kind = "a contradiction" if worlds == 0 else "a tautology"
            raise ValueError(f"the {side} formula is {kind}; relations are defined for contingent formulas only")
    both, union = lw & rw, lw | rw
    exhaustive = union == _ALL_WORLDS
    if lw == rw:
        return "="
    if not both:
        return "^" if exhaustive else "|"
    if exhaustive:
        return "v"
    if lw & ~rw == 0:
        return "<"
    if rw & ~lw == 0:
        return ">"
    return "#"


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def parse_formula(text: str, *, source: str = "<string>", line: int = 1, first_column: int = 1) -> Formula:
    """A formula from its space-separated file form; `LogicFormatError` at the first bad token."""
    located = [(m.group(), first_column + m.start()) for m in _TOKEN.finditer(text)]

    def fail(column: int, reason: str):
        raise LogicFormatError(source, line, column, reason)

    end_column = located[-1][1] + len(located[-1][0]) if located else first_column
    position = 0

    def peek() -> tuple[str, int]:
        return located[position] if position < len(located) else ("<end>", end_column)

    def take(expected: str) -> None:
        nonlocal position
        token, column = peek()
        if token != expected:
            fail(column, f"expected {expected!r}, found {_describe(token)}")
        position += 1

    def formula() -> Formula:
        nonlocal position
        token, column = peek()
        if token in VARIABLES:
            position += 1
            return token
        if token != "(":
            fail(column, f"expected a variable a-f or '(', found {_describe(token)}")
        position += 1
        if peek()[0] == "not":
            position += 1
            operand = formula()
            take(")")
            return Not(operand)
        left = formula()
        take("(")
        operator, operator_column = peek()
        if operator not in BINARY_OPERATORS:
            fail(operator_column, f"expected an operator 'and' or 'or', found {_describe(operator)}")
        position += 1
        right = formula()
        take(")")
        take(")")
        return Binary(operator, left, right)

    result = formula()
    if position < len(located):
        token, column = located[position]
        fail(column, f"expected the end of the formula, found {_describe(token)}")
    return result


def _describe(token: str) -> str:
    return "the end of the formula" if token == "<end>" else repr(token)


@dataclasses.dataclass(frozen=True)
class LogicExample:
    relation: str
    left: Formula
    right: Formula
    line: int = 0  # 1-based line in its file (0: not from a file)

    @property
    def label(self) -> int:
        return RELATION_IDS[self.relation]

    @property
    def operator_count(self) -> int:
        """The pair's bucket: max of the two formulas' counts, capped at 12 (the files' naming)."""
        return min(max(count_operators(self.left), count_operators(self.right)), MAX_OPERATOR_COUNT)

    @property
    def text(self) -> str:
        return f"{' '.join(tokens_of(self.left))} {' '.join(tokens_of(self.right))}"


def parse_line(text: str, *, source: str = "<string>", line: int = 1) -> LogicExample:
    """`relation<TAB>left<TAB>right` -> example."""
    text = text.rstrip("\r\n")
    fields = text.split("\t")
    if len(fields) != 3:
        column = 1 if len(fields) < 3 else len("\t".join(fields[:3])) + 1
        raise LogicFormatError(
            source, line, column, f"expected 3 tab-separated fields (relation, left, right), found {len(fields)}"
        )
    relation, left_text, right_text = fields
    if relation not in RELATION_IDS:
        raise LogicFormatError(source, line, 1, f"expected a relation among {' '.join(RELATIONS)}, found {relation!r}")
    left_column = len(relation) + 2
    left = parse_formula(left_text, source=source, line=line, first_column=left_column)
    right = parse_formula(right_text, source=source, line=line, first_column=left_column + len(left_text) + 1)
    return LogicExample(relation, left, right, line)


def read_logic(path: str | os.PathLike, *, operator_count: int | None = None) -> list[LogicExample]:
    """Every pair of a file. With `operator_count`, each pair's bucket must equal it (column 1 otherwise)."""
    source = os.fspath(path)
    examples = []
    # text_lines: a byte that is not UTF-8 is named by file:line:column (a SourceLocationError), `.gz` is read.
    for line_number, text in enumerate(text_lines(path), start=1):
        if not text.strip():
            raise LogicFormatError(
                source, line_number, 1, "expected 'relation<TAB>left<TAB>right', found an empty line"
            )
        example = parse_line(text, source=source, line=line_number)
        if operator_count is not None and example.operator_count != operator_count:
            raise LogicFormatError(
                source, line_number, 1,
                f"a file of {operator_count}-operator pairs holds a pair with {example.operator_count}",
            )
        examples.append(example)
    return examples


def read_bucket(directory: str | os.PathLike, split: Literal["train", "test"], count: int) -> list[LogicExample]:
    """`directory/{split}{count}`, operator counts checked."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    if not 0 <= count <= MAX_OPERATOR_COUNT:
        raise ValueError(f"operator count must be in 0..{MAX_OPERATOR_COUNT}, not {count}")
    return read_logic(Path(directory) / f"{split}{count}", operator_count=count)


@dataclasses.dataclass
class LogicSplits:
    """Training, validation and per-operator-count test pairs.

    `test` maps a name to its pairs: operator counts (7..12) for the length
    split; for a systematicity split, operator counts of the unseen pairs.
    """

    train: list[LogicExample]
    valid: list[LogicExample]
    test: dict[int, list[LogicExample]]


def _hold_out(examples: Sequence[LogicExample], every: int) -> tuple[list, list]:
    """The release's validation: the every-th, 2·every-th, … example (1-based) goes to validation."""
    train, valid = [], []
    for index, example in enumerate(examples, start=1):
        (valid if every and index % every == 0 else train).append(example)
    return train, valid


@dataclasses.dataclass
class LogicFiles:
    """The pairs of every file of a directory: `train[n]` = trainN, `test[n]` = testN (n = 0..12, where present)."""

    train: dict[int, list[LogicExample]]
    test: dict[int, list[LogicExample]]

    @classmethod
    def read(cls, directory: str | os.PathLike) -> LogicFiles:
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"no logic data directory {directory}")
        buckets: dict[str, dict[int, list[LogicExample]]] = {"train": {}, "test": {}}
        for split, by_count in buckets.items():
            for n in range(MAX_OPERATOR_COUNT + 1):
                if (directory / f"{split}{n}").is_file():
                    by_count[n] = read_bucket(directory, split, n)
        return cls(buckets["train"], buckets["test"])

    def bucket(self, split: Literal["train", "test"], count: int) -> list[LogicExample]:
        by_count = self.train if split == "train" else self.test
        if count not in by_count:
            raise FileNotFoundError(f"no {split}{count} file was read")
        return by_count[count]


def _as_files(files: LogicFiles | str | os.PathLike) -> LogicFiles:
    return files if isinstance(files, LogicFiles) else LogicFiles.read(files)


def length_split(
    files: LogicFiles | str | os.PathLike,
    *,
    train_max_operators: int = TRAIN_MAX_OPERATORS,
    test_counts: Sequence[int] = TEST_OPERATOR_COUNTS,
    validation_every: int = 10,
) -> LogicSplits:
    """Train on train0..train{max} (every `validation_every`-th held out; 0 holds none out), test per count.

    `files`: a directory, or `LogicFiles` already read (to read 250k lines once for several splits).
    """
    files = _as_files(files)
    pooled = [e for n in range(train_max_operators + 1) for e in files.bucket("train", n)]
    train, valid = _hold_out(pooled, validation_every)
    return LogicSplits(train, valid, {n: files.bucket("test", n) for n in test_counts})


def contains_pattern(example: LogicExample, name: Literal["A", "B", "C"]) -> bool:
    """Whether either formula contains the systematicity pattern `name` (token-exact)."""
    padded = f" {example.text} "
    return any(f" {' '.join(pattern)} " in padded for pattern in SYSTEMATICITY_PATTERNS[name])


def systematicity_split(
    files: LogicFiles | str | os.PathLike,
    name: Literal["A", "B", "C"],
    *,
    train_max_operators: int = TRAIN_MAX_OPERATORS,
    test_counts: Sequence[int] = tuple(range(MAX_OPERATOR_COUNT + 1)),
    validation_every: int = 10,
) -> LogicSplits:
    """Training pairs without the pattern; test pairs (of `test_counts`' files) with it, per count."""
    if name not in SYSTEMATICITY_PATTERNS:
        raise ValueError(f"systematicity split must be one of {', '.join(SYSTEMATICITY_PATTERNS)}, not {name!r}")
    files = _as_files(files)
    pooled = [
        e for n in range(train_max_operators + 1) for e in files.bucket("train", n) if not contains_pattern(e, name)
    ]
    train, valid = _hold_out(pooled, validation_every)
    test = {n: [e for e in files.bucket("test", n) if contains_pattern(e, name)] for n in test_counts}
    return LogicSplits(train, valid, test)


def thesis_lengths(by_count: dict[int, T]) -> dict[int, T]:
    """The buckets (test pairs, or their results) of 7..12 operators: what the thesis' systematicity
    columns aggregate (module docstring)."""
    return {n: bucket for n, bucket in by_count.items() if n in THESIS_SYSTEMATICITY_COUNTS}


# --------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------

ROOT_LENGTH = 12  # the release's length budget at the root
BINARY_PROBABILITY = 4 / 9  # an operator drawn from [and, or, and, or, 0 x 5]
NEGATION_PROBABILITY = 1 / 3
UNIVERSE_SIZE = 4  # variables per pair


def sample_formula(rng: np.random.Generator, variables: Sequence[str], max_length: int = ROOT_LENGTH) -> Formula:
    """One formula over `variables` from the release's distribution (see the module docstring)."""
    if max_length >= 2 and rng.random() < BINARY_PROBABILITY:
        operator = BINARY_OPERATORS[int(rng.integers(len(BINARY_OPERATORS)))]
        node: Formula = Binary(operator, sample_formula(rng, variables, max_length // 2),
                               sample_formula(rng, variables, max_length // 2))
    else:
        node = variables[int(rng.integers(len(variables)))]
    if rng.random() < NEGATION_PROBABILITY:
        node = Not(node)
    return node


def _contingent(formula: Formula) -> bool:
    return satisfying_worlds(formula) not in (0, _ALL_WORLDS)


def generate_pairs(num_pairs: int, *, seed: int, universe_size: int = UNIVERSE_SIZE,
                   max_attempts: int | None = None) -> list[LogicExample]:
    """`num_pairs` distinct labelled pairs, deterministic per seed.

    Raises RuntimeError after `max_attempts` draws (default 100 * num_pairs + 10,000).
    """
    if num_pairs < 0:
        raise ValueError(f"num_pairs must be >= 0, not {num_pairs}")
    if not 1 <= universe_size <= len(VARIABLES):
        raise ValueError(f"universe_size must be in 1..{len(VARIABLES)}, not {universe_size}")
    rng = np.random.default_rng(seed)
    seen: set[tuple[Formula, Formula]] = set()
    pairs: list[LogicExample] = []
    attempts_left = max_attempts if max_attempts is not None else 100 * num_pairs + 10_000
    while len(pairs) < num_pairs:
        if attempts_left == 0:
            raise RuntimeError(f"found only {len(pairs)} of {num_pairs} distinct pairs")
        attempts_left -= 1
        # A sorted list, not a set: the release's random.sample(set) fails on Python >= 3.11 (quirk 4).
        chosen = sorted(rng.choice(len(VARIABLES), universe_size, replace=False))
        variables = [VARIABLES[i] for i in chosen]
        left, right = sample_formula(rng, variables), sample_formula(rng, variables)
        if not (_contingent(left) and _contingent(right)) or (left, right) in seen:
            continue
        seen.add((left, right))
        pairs.append(LogicExample(relation_of(left, right), left, right))
    return pairs


def split_generated(pairs: Sequence[LogicExample], *, seed: int, test_fraction: float = 0.15
                    ) -> tuple[dict[int, list[LogicExample]], dict[int, list[LogicExample]]]:
    """Per operator-count bucket, a seeded `test_fraction` of its pairs to test: (train[n], test[n])."""
    rng = np.random.default_rng(seed)
    train: dict[int, list[LogicExample]] = {}
    test: dict[int, list[LogicExample]] = {}
    for n in range(MAX_OPERATOR_COUNT + 1):
        bucket = [p for p in pairs if p.operator_count == n]
        order = rng.permutation(len(bucket))
        num_test = int(round(test_fraction * len(bucket)))
        test[n] = [bucket[i] for i in sorted(order[:num_test])]
        train[n] = [bucket[i] for i in sorted(order[num_test:])]
    return train, test


def format_line(example: LogicExample) -> str:
    """`relation<TAB>left<TAB>right`, the files' form."""
    return f"{example.relation}\t{' '.join(tokens_of(example.left))}\t{' '.join(tokens_of(example.right))}"


def write_logic_files(directory: str | os.PathLike, train: dict[int, list[LogicExample]],
                      test: dict[int, list[LogicExample]]) -> None:
    """`directory/trainN` and `testN` for every N in 0..12 (empty files where a bucket is empty)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split, by_count in (("train", train), ("test", test)):
        for n in range(MAX_OPERATOR_COUNT + 1):
            lines = [format_line(e) + "\n" for e in by_count.get(n, [])]
            (directory / f"{split}{n}").write_text("".join(lines), encoding="utf-8")


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def encode(examples: Sequence[LogicExample], *, pad_to: int | None = None) -> dict[str, np.ndarray]:
    """Model arrays for a batch of N pairs, right-padded as the release does (T = pad_to or the longest formula).

    Returns:
      left, right:  [N, T] int32 token ids (`TOKENS`), PAD_ID (11) where padded.
      left_lengths, right_lengths: [N] int32.
      labels: [N] int32 relation ids (`RELATIONS`).
    """
    lefts = [[TOKEN_IDS[t] for t in tokens_of(e.left)] for e in examples]
    rights = [[TOKEN_IDS[t] for t in tokens_of(e.right)] for e in examples]
    width = max((len(r) for r in lefts + rights), default=0)
    if pad_to is not None:
        if pad_to < width:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest formula ({width} tokens)")
        width = pad_to

    def pad(rows):
        out = np.full((len(rows), width), PAD_ID, dtype=np.int32)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    return {
        "left": pad(lefts),
        "right": pad(rights),
        "left_lengths": np.array([len(r) for r in lefts], dtype=np.int32),
        "right_lengths": np.array([len(r) for r in rights], dtype=np.int32),
        "labels": np.array([e.label for e in examples], dtype=np.int32),
    }
