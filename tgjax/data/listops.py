"""ListOps (Nangia & Bowman, 2018) as the Ordered Memory release uses it: generator, evaluator, reader, encoder.

An expression is a digit or a list `[OP a1 … an ]` whose arguments are
expressions. Operators: MIN, MAX, MED (median), SM (sum mod 10); the
vocabulary also holds FIRST, LAST, PM and FLSUM, which the release's
vocabulary lists but its generator never draws (FIRST and LAST evaluate here;
PM and FLSUM have no defined meaning in the sources and are refused).

File format (one example a line, `label<TAB>expression`), e.g.

    0<TAB>( ( ( ( ( [SM 6 ) 5 ) 9 ) 0 ) ] )

The parentheses spell the gold binary tree: a list is left-branching,
`( ( … ( ( OP a1 ) a2 ) … an ) ] )`, each argument its own subtree; a bare
digit has none. The model reads the tokens without the parentheses
(`[SM 6 5 9 0 ]`); the bracketing is what parse F1 is scored against.

Semantics (the release's): MED of an even number of values is the mean of
the two middle ones rounded down (`int(np.median(...))`; values are
non-negative, so truncation is flooring): MED [1 2] = 1, MED [3 8 1 6] = 4.

Reading policy: a syntax error (unbalanced brackets, unknown operator,
bad label, a bracketing other than the format's) always raises
`ListOpsFormatError` naming file:line:column and what was expected. A label
that disagrees with the evaluated value also raises by default
(`on_label_mismatch="error"`: the file or the semantics is wrong, and
training on it would hide that); "keep" or "drop" count them instead, in
`ListOpsData.label_mismatches`. The shipped 10,000-line test set has none.

Generator (released-code.md §3.3): a node at depth d < 20 is a leaf (a
uniform digit) with probability 0.75, otherwise a list of 2–5 arguments drawn
at depth d + 1 under a uniform operator; at depth 20 always a leaf; the root
is at depth 1. Trees are kept unique, and training data keeps only trees of
at most 50 tokens (the release discards longer ones when it loads).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Sequence
from typing import Literal, NoReturn

import numpy as np

from tgjax.syntax.distance import brackets
from tgjax.syntax.trees import SourceLocationError, text_lines

# --------------------------------------------------------------------------
# Vocabulary: the release's token ids, so its checkpoints' embeddings line up.
# --------------------------------------------------------------------------

PAD = "_PAD"
END = "]"
DIGITS = tuple(str(d) for d in range(10))
ALL_OPERATORS = ("[MIN", "[MAX", "[FIRST", "[LAST", "[MED", "[SM", "[PM", "[FLSUM")
# The operators the generator draws (released-code.md §3.3).
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
# Operators whose meaning is known (PM, FLSUM are in the vocabulary only).
EVALUABLE_OPERATORS = ("[MIN", "[MAX", "[MED", "[SM", "[FIRST", "[LAST")
TOKENS = (PAD, *DIGITS, *ALL_OPERATORS, END)  # id = index: _PAD 0, '0'..'9' 1..10, [MIN 11 … ] 19
_TOKEN = re.compile(r"\S+")
TOKEN_IDS = {token: token_id for token_id, token in enumerate(TOKENS)}
PAD_ID = 0
NUM_CLASSES = 10

# Generator constants of the release.
LEAF_PROBABILITY = 0.75
MIN_ARGS, MAX_ARGS = 2, 5
MAX_DEPTH = 20
MAX_TRAIN_TOKENS = 50


# --------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ListNode:
    """A list `[OP a1 … an ]`. `operator` is the token with its bracket ("[MAX")."""

    operator: str
    arguments: tuple[Expression, ...]


Expression = int | ListNode  # a digit 0..9, or a list


def apply_operator(operator: str, values: Sequence[int]) -> int:
    """The value of `operator` over `values` (each 0..9; at least one)."""
    if not values:
        raise ValueError(f"{operator} needs at least one argument")
    if operator == "[MIN":
        return min(values)
    if operator == "[MAX":
        return max(values)
    if operator == "[SM":
        return sum(values) % 10
    if operator == "[MED":
        ordered = sorted(values)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) // 2  # the release's int(np.median): mean, rounded down
    if operator == "[FIRST":
        return values[0]
    if operator == "[LAST":
        return values[-1]
    raise ValueError(f"operator {operator!r} has no defined value; expected one of {' '.join(EVALUABLE_OPERATORS)}")


def evaluate(expression: Expression) -> int:
    """The value 0..9 of an expression (post-order, no recursion limit concerns at depth ≤ 20)."""
    if isinstance(expression, ListNode):
        return apply_operator(expression.operator, [evaluate(a) for a in expression.arguments])
    return int(expression)


def tokens_of(expression: Expression) -> list[str]:
    """The model's input tokens: `[MAX 2 9 [MIN 4 7 ] 0 ]`, no parentheses."""
    if isinstance(expression, ListNode):
        out = [expression.operator]
        for argument in expression.arguments:
            out.extend(tokens_of(argument))
        out.append(END)
        return out
    return [str(expression)]


def num_tokens(expression: Expression) -> int:
    if isinstance(expression, ListNode):
        return 2 + sum(num_tokens(a) for a in expression.arguments)
    return 1


def operator_depth(expression: Expression) -> int:
    """How many lists nest at the deepest point (0 for a bare digit)."""
    if isinstance(expression, ListNode):
        return 1 + max(operator_depth(a) for a in expression.arguments)
    return 0


def gold_tree(expression: Expression) -> str | tuple:
    """The file's binary bracketing as nested pairs of tokens.

    `[SM 6 5 ]` -> `((("[SM", "6"), "5"), "]")`; a digit -> `"7"`. Leaves in
    order are `tokens_of(expression)`.
    """
    if isinstance(expression, ListNode):
        node: str | tuple = expression.operator
        for argument in expression.arguments:
            node = (node, gold_tree(argument))
        return (node, END)
    return str(expression)


def gold_spans(expression: Expression) -> list[tuple[int, int]]:
    """Every constituent of `gold_tree` over ≥ 2 tokens, as half-open [start, end) token ranges.

    Includes the root span; ordered by start, then by decreasing end.
    """
    spans = brackets(gold_tree(expression), include_root=True)  # every node is binary: each spans >= 2 tokens
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def to_bracketed(expression: Expression) -> str:
    """The file form, `( ( ( [MAX 2 ) 9 ) ] )`."""
    if isinstance(expression, ListNode):
        text = expression.operator
        for argument in expression.arguments:
            text = f"( {text} {to_bracketed(argument)} )"
        return f"( {text} {END} )"
    return str(expression)


# --------------------------------------------------------------------------
# Parsing, with positions
# --------------------------------------------------------------------------


class ListOpsFormatError(SourceLocationError):
    """A malformed ListOps line. `str(err)` is `source:line:column: reason` (1-based; columns count characters)."""


def _split_with_columns(text: str, first_column: int) -> list[tuple[str, int]]:
    """Space-separated tokens with their 1-based columns (the column of `text[0]` is `first_column`)."""
    return [(m.group(), first_column + m.start()) for m in _TOKEN.finditer(text)]


def parse_expression(text: str, *, source: str = "<string>", line: int = 1, first_column: int = 1) -> Expression:
    """An expression from either form: the file's bracketed one or the bare token one.

    With parentheses, they must balance and equal the format's left-branching
    bracketing of the expression the other tokens spell. Raises
    `ListOpsFormatError` at the first offending token.
    """
    located = _split_with_columns(text, first_column)

    def fail(column: int, reason: str) -> NoReturn:
        raise ListOpsFormatError(source, line, column, reason)

    if not located:
        fail(first_column, "expected an expression, found nothing")
    # Balance first, so an unclosed '(' is reported where it opens.
    open_columns: list[int] = []
    for token, column in located:
        if token == "(":
            open_columns.append(column)
        elif token == ")":
            if not open_columns:
                fail(column, "unbalanced ')': no '(' is open")
            open_columns.pop()
    if open_columns:
        fail(open_columns[-1], "unbalanced '(': never closed")

    bare = [(t, c) for t, c in located if t not in ("(", ")")]
    position = 0

    def parse_at() -> Expression:
        nonlocal position
        if position >= len(bare):
            end_column = located[-1][1] + len(located[-1][0])
            fail(end_column, "expected a digit, an operator or ']', found the end of the line")
        token, column = bare[position]
        position += 1
        if token in DIGITS:
            return int(token)
        if token.startswith("["):
            if token not in EVALUABLE_OPERATORS:
                fail(column, f"unknown operator {token!r}; expected one of {' '.join(EVALUABLE_OPERATORS)}")
            arguments = []
            while True:
                if position >= len(bare):
                    fail(column, f"list {token} is never closed by ']'")
                if bare[position][0] == END:
                    position += 1
                    break
                arguments.append(parse_at())
            if not arguments:
                fail(column, f"list {token} has no arguments")
            return ListNode(token, tuple(arguments))
        fail(column, f"expected a digit 0-9 or an operator such as [MAX, found {token!r}")

    expression = parse_at()
    if position < len(bare):
        token, column = bare[position]
        fail(column, f"expected the end of the expression, found {token!r}")
    if len(bare) != len(located):  # bracketed form: must be exactly the format's bracketing
        expected = to_bracketed(expression).split(" ")
        for index, (token, column) in enumerate(located):
            if index >= len(expected) or token != expected[index]:
                want = expected[index] if index < len(expected) else "the end of the line"
                fail(
                    column,
                    f"bracketing differs from the format's left-branching form: expected {want!r}, found {token!r}",
                )
    return expression


# --------------------------------------------------------------------------
# Examples and files
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ListOpsExample:
    """One labelled expression. `label` is the file's (or the evaluator's, when generated)."""

    label: int
    expression: Expression

    @property
    def tokens(self) -> list[str]:
        return tokens_of(self.expression)


@dataclasses.dataclass(frozen=True)
class LabelMismatch:
    line: int
    label: int  # the file's
    value: int  # the evaluator's


@dataclasses.dataclass
class ListOpsData:
    """What `read_listops` returns: the examples in file order and the label disagreements it counted."""

    source: str
    examples: list[ListOpsExample]
    label_mismatches: list[LabelMismatch] = dataclasses.field(default_factory=list)


def parse_line(text: str, *, source: str = "<string>", line: int = 1) -> ListOpsExample:
    """`label<TAB>expression` -> example (the label as written; not checked against the value)."""
    text = text.rstrip("\r\n")
    if "\t" not in text:
        raise ListOpsFormatError(source, line, 1, "expected 'label<TAB>expression', found no tab")
    label_text, expression_text = text.split("\t", 1)
    if label_text not in DIGITS:
        raise ListOpsFormatError(source, line, 1, f"expected a label 0-9, found {label_text!r}")
    if "\t" in expression_text:
        column = len(label_text) + 2 + expression_text.index("\t")
        raise ListOpsFormatError(source, line, column, "expected one tab (label<TAB>expression), found another")
    expression = parse_expression(expression_text, source=source, line=line, first_column=len(label_text) + 2)
    return ListOpsExample(int(label_text), expression)


def read_listops(
    path: str | os.PathLike,
    *,
    on_label_mismatch: Literal["error", "keep", "drop"] = "error",
) -> ListOpsData:
    """Every line of a ListOps file. Syntax errors raise; label mismatches per `on_label_mismatch`."""
    if on_label_mismatch not in ("error", "keep", "drop"):
        raise ValueError(f"on_label_mismatch must be 'error', 'keep' or 'drop', not {on_label_mismatch!r}")
    source = os.fspath(path)
    data = ListOpsData(source, [])
    # text_lines: a byte that is not UTF-8 is named by file:line:column (a SourceLocationError), `.gz` is read.
    for line_number, text in enumerate(text_lines(path), start=1):
        if not text.strip():
            raise ListOpsFormatError(source, line_number, 1, "expected 'label<TAB>expression', found an empty line")
        example = parse_line(text, source=source, line=line_number)
        value = evaluate(example.expression)
        if value != example.label:
            if on_label_mismatch == "error":
                raise ListOpsFormatError(
                    source, line_number, 1, f"label {example.label} but the expression evaluates to {value}"
                )
            data.label_mismatches.append(LabelMismatch(line_number, example.label, value))
            if on_label_mismatch == "drop":
                continue
        data.examples.append(example)
    return data


def write_listops(path: str | os.PathLike, examples: Iterable[ListOpsExample]) -> None:
    """The file format `read_listops` reads (one `label<TAB>bracketed expression` a line)."""
    with open(path, "w", encoding="utf-8") as f:
        for example in examples:
            f.write(f"{example.label}\t{to_bracketed(example.expression)}\n")


# --------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------


def sample_expression(
    rng: np.random.Generator,
    *,
    depth: int = 1,
    leaf_probability: float = LEAF_PROBABILITY,
    max_args: int = MAX_ARGS,
    max_depth: int = MAX_DEPTH,
    operators: Sequence[str] = OPERATORS,
) -> Expression:
    """One tree from the release's distribution, rooted at `depth` (the release starts at 1)."""
    if depth >= max_depth or rng.random() < leaf_probability:
        return int(rng.integers(10))
    num_args = int(rng.integers(MIN_ARGS, max_args + 1))
    operator = operators[int(rng.integers(len(operators)))]
    arguments = tuple(
        sample_expression(
            rng, depth=depth + 1, leaf_probability=leaf_probability, max_args=max_args,
            max_depth=max_depth, operators=operators,
        )
        for _ in range(num_args)
    )
    return ListNode(operator, arguments)


def generate(
    num_examples: int,
    *,
    seed: int,
    max_tokens: int | None = MAX_TRAIN_TOKENS,
    exclude: Iterable[Expression] = (),
    max_attempts: int | None = None,
) -> list[ListOpsExample]:
    """`num_examples` distinct labelled trees, deterministic per seed.

    Trees with more than `max_tokens` tokens (None: no cap) and trees in
    `exclude` (e.g. a training set, to make a disjoint test set) are
    redrawn. Raises RuntimeError after `max_attempts` draws (default
    100·num_examples + 10,000) rather than loop forever when the cap leaves
    too few distinct trees.
    """
    if num_examples < 0:
        raise ValueError(f"num_examples must be >= 0, not {num_examples}")
    rng = np.random.default_rng(seed)
    seen = set(exclude)
    examples: list[ListOpsExample] = []
    attempts_left = max_attempts if max_attempts is not None else 100 * num_examples + 10_000
    while len(examples) < num_examples:
        if attempts_left == 0:
            raise RuntimeError(
                f"found only {len(examples)} of {num_examples} distinct trees with at most {max_tokens} tokens"
            )
        attempts_left -= 1
        expression = sample_expression(rng)
        if max_tokens is not None and num_tokens(expression) > max_tokens:
            continue
        if expression in seen:
            continue
        seen.add(expression)
        examples.append(ListOpsExample(evaluate(expression), expression))
    return examples


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def encode(
    examples: Sequence[ListOpsExample],
    *,
    pad_to: int | None = None,
    pad_side: Literal["left", "right"] = "left",
) -> dict[str, np.ndarray]:
    """Model arrays for a batch (N examples, T = pad_to or the longest).

    Returns:
      inputs:  [N, T] int32 token ids (`TOKENS`), PAD_ID where padded.
      mask:    [N, T] bool, True on real tokens.
      lengths: [N] int32.
      labels:  [N] int32, 0..9.
    The release left-pads (`pad_side="left"`) and reads the last position.
    """
    if pad_side not in ("left", "right"):
        raise ValueError(f"pad_side must be 'left' or 'right', not {pad_side!r}")
    rows = [[TOKEN_IDS[t] for t in example.tokens] for example in examples]
    lengths = np.array([len(r) for r in rows], dtype=np.int32)
    width = int(lengths.max(initial=0))
    if pad_to is not None:
        if pad_to < width:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest example ({width} tokens)")
        width = pad_to
    inputs = np.full((len(rows), width), PAD_ID, dtype=np.int32)
    for i, row in enumerate(rows):
        if pad_side == "left":
            inputs[i, width - len(row) :] = row
        else:
            inputs[i, : len(row)] = row
    return {
        "inputs": inputs,
        "mask": inputs != PAD_ID,
        "lengths": lengths,
        "labels": np.array([e.label for e in examples], dtype=np.int32),
    }


def decode(ids: Sequence[int] | np.ndarray) -> list[str]:
    """Tokens of one row, padding dropped."""
    return [TOKENS[int(i)] for i in ids if int(i) != PAD_ID]
