"""SyntaxGym test suites (Hu et al., ACL 2020): loading, prediction formulas, scores.

A suite (JSON) holds `items`; each item has `conditions`, each condition a
list of `regions` (numbered strings whose concatenation is a sentence), and
the suite has `predictions`: formulas over region surprisals that a model
with the right syntactic generalisation should satisfy, e.g.

    [(7;%match_sing%) < (7;%mismatch_sing%)] & [(7;%match_plural%) < (7;%mismatch_plural%)]

(`(7;%match_sing%)` is the surprisal of region 7 of condition `match_sing`).

    suite = load_suite("../shared/data/sg_test_suites/number_orc.json")
    for sentence in suite.sentences():       # (item, condition, region texts)
        ...                                  # sentence.words: what the scorer scores
    result = score_suite(suite, word_surprisal_fn, unit="nats")   # or evaluate_suite(suite, ..., unit="nats")
    report = sg_report(results, load_circuits(".../circuits.json"))

Regions and words
-----------------
Region contents are stripped of surrounding blanks and tokenised with
`tgjax.eval.blimp.words_of` (PTB-style); a sentence's words are its
regions' words in order (empty regions have none), and its text is the
non-empty region contents joined by single spaces. A scorer returns one
surprisal per word, in the unit the caller names (`unit="nats"` for −ln p,
as the models give, or `"bits"` for −log₂ p); they are converted to bits
before any formula is evaluated, because SyntaxGym's surprisals are in bits
and the tolerance of `=` is an absolute one in bits. A region's surprisal is
the suite's `metric` (`meta.metric`: sum, as in all the shared suites, or
mean, median, range, max, min) over its words' surprisals. An empty region
has surprisal 0 under `sum`, NaN otherwise.

The formula language
--------------------
As SyntaxGym's `prediction.py` defines it, with two extensions (`*`, `/`
and unary minus; `[ ]` and `( )` both group):

* atoms: a region reference `(N;%condition%)` (N a region number, or `*`
  for the sum over all the condition's regions), or a number;
* `+ -` (left-associative), tighter than comparisons `< > =`, tighter than
  `& |`, which share one level and associate to the left (`a & b | c` is
  `(a & b) | c`); `* /` bind tighter than `+ -`;
* `x = y` holds when `|x − y| <= 1e-3 + 1e-5·|y|`, x and y in bits
  (numpy.isclose with SyntaxGym's EQUALITY_ATOL = 1e-3 and EQUALITY_RTOL =
  1e-5); `<` and `>`
  are strict;
* a comparison cannot be chained (`a < b < c` is an error), `&`/`|` need
  comparisons on both sides, and a whole formula must be a comparison or a
  `&`/`|` of them.

Anything else raises `FormulaError`, whose message names the suite, the
prediction, the column and what was expected.

Scores
------
For each item and prediction the formula holds or not. A prediction's
accuracy is the fraction of items where it holds; a suite's accuracy
(`SuiteResult.accuracy`) is the mean over its (item, prediction) pairs,
i.e. the mean of its prediction accuracies: this is how Hu et al.'s analysis
averages the `correct` column of SyntaxGym's per-(item, prediction) results.
Of the paper's suites only `fgd_hierarchy` has two predictions;
`SuiteResult.all_predictions_accuracy` (items where every prediction holds)
is there for the stricter reading. A circuit's score is the mean accuracy of
its suites, and the SG score is the mean accuracy over all suites not
excluded (Hu et al. leave out `fgd-embed3`, `fgd-embed4` and `nn-nv-rpl`,
which `circuits.json` lists as `excluded_in_paper`). Suites absent from the
results (the two Center Embedding suites are not in the shared data) are
reported as missing, never counted.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from tgjax.data.text_files import read_json
from tgjax.eval.blimp import words_of

__all__ = [
    "Circuits",
    "Formula",
    "FormulaError",
    "Item",
    "Prediction",
    "SGReport",
    "Suite",
    "SuiteResult",
    "SuiteSentence",
    "evaluate_suite",
    "load_circuits",
    "load_suite",
    "load_suites",
    "parse_formula",
    "score_suite",
    "sg_report",
]

EQUALITY_RTOL = 1e-5
EQUALITY_ATOL = 1e-3  # bits, as SyntaxGym's surprisals

# Surprisal unit -> the factor that converts it to bits (the unit the formulas are evaluated in).
BITS_PER_UNIT = {"bits": 1.0, "nats": 1.0 / math.log(2.0)}

METRICS: dict[str, Callable[[np.ndarray], float]] = {
    "sum": lambda x: float(np.sum(x)),
    "mean": lambda x: float(np.mean(x)) if x.size else math.nan,
    "median": lambda x: float(np.median(x)) if x.size else math.nan,
    "range": lambda x: float(np.ptp(x)) if x.size else math.nan,
    "max": lambda x: float(np.max(x)) if x.size else math.nan,
    "min": lambda x: float(np.min(x)) if x.size else math.nan,
}

# ---------------------------------------------------------------------------
# Formulas
# ---------------------------------------------------------------------------


class FormulaError(ValueError):
    """A prediction formula that cannot be parsed (or refers to a missing region).

    `str(err)` reads `suite: prediction K: column C: reason` followed by the
    formula and a caret under column C.
    """

    def __init__(self, reason: str, formula: str, column: int, suite: str | None = None,
                 prediction: int | None = None):
        self.reason, self.formula, self.column = reason, formula, column
        self.suite, self.prediction = suite, prediction
        where = []
        if suite is not None:
            where.append(f"suite {suite}")
        if prediction is not None:
            where.append(f"prediction {prediction}")
        where.append(f"column {column}")
        super().__init__(f"{', '.join(where)}: {reason}\n  {formula}\n  {' ' * (column - 1)}^")

    def __reduce__(self):
        return (type(self), (self.reason, self.formula, self.column, self.suite, self.prediction))


Values = Mapping[str, Mapping[int, float]]  # condition -> region number -> surprisal


class _Node:
    type: str  # "num" or "bool"
    column: int

    def evaluate(self, values: Values):  # pragma: no cover - abstract
        raise NotImplementedError


@dataclasses.dataclass
class _Region(_Node):
    region: int | None  # None: '*', all regions
    condition: str
    column: int
    type: str = "num"

    def evaluate(self, values: Values) -> float:
        regions = values[self.condition]
        return float(sum(regions.values())) if self.region is None else float(regions[self.region])

    def __str__(self) -> str:
        return f"({'*' if self.region is None else self.region};%{self.condition}%)"


@dataclasses.dataclass
class _Number(_Node):
    value: float
    column: int
    type: str = "num"

    def evaluate(self, values: Values) -> float:
        return self.value

    def __str__(self) -> str:
        return repr(self.value)


@dataclasses.dataclass
class _Negate(_Node):
    operand: _Node
    column: int
    type: str = "num"

    def evaluate(self, values: Values) -> float:
        return -self.operand.evaluate(values)

    def __str__(self) -> str:
        return f"-{self.operand}"


def _divide(a: float, b: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


_OPERATIONS: dict[str, Callable] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "=": lambda a, b: abs(a - b) <= EQUALITY_ATOL + EQUALITY_RTOL * abs(b),
    "&": lambda a, b: a and b,
    "|": lambda a, b: a or b,
}


@dataclasses.dataclass
class _Binary(_Node):
    op: str
    left: _Node
    right: _Node
    column: int
    type: str = "num"

    def evaluate(self, values: Values):
        if self.op == "&":  # short-circuit like Python's `and`, same result
            return bool(self.left.evaluate(values)) and bool(self.right.evaluate(values))
        if self.op == "|":
            return bool(self.left.evaluate(values)) or bool(self.right.evaluate(values))
        return _OPERATIONS[self.op](self.left.evaluate(values), self.right.evaluate(values))

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


_REGION_START = re.compile(r"\(\s*(\d+|\*)\s*;")
_REGION = re.compile(r"\(\s*(\d+|\*)\s*;\s*%([^%]*)%\s*\)")
_CONDITION_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NUMBER = re.compile(r"(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_SYMBOLS = set("+-*/<>=&|()[]")


@dataclasses.dataclass
class _Token:
    kind: str  # "region", "number", a symbol, or "end"
    text: str
    column: int
    value: object = None


def _tokenise(text: str, fail: Callable[[str, int], FormulaError]) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        column = i + 1
        if char.isspace():
            i += 1
        elif char == "(" and _REGION_START.match(text, i):
            match = _REGION.match(text, i)
            if not match:
                raise fail("expected a region reference '(N;%condition%)', found a malformed one", column)
            name = match.group(2)
            if not _CONDITION_NAME.fullmatch(name):
                raise fail(f"expected a condition name of letters, digits, '_' or '-', found {name!r}", column)
            region = None if match.group(1) == "*" else int(match.group(1))
            tokens.append(_Token("region", match.group(0), column, (region, name)))
            i = match.end()
        elif (match := _NUMBER.match(text, i)) is not None:
            tokens.append(_Token("number", match.group(0), column, float(match.group(0))))
            i = match.end()
        elif char in _SYMBOLS:
            tokens.append(_Token(char, char, column))
            i += 1
        else:
            raise fail(f"unexpected character {char!r}", column)
    tokens.append(_Token("end", "end of formula", len(text) + 1))
    return tokens


class _Parser:
    """Recursive descent over the grammar in the module docstring."""

    def __init__(self, text: str, suite: str | None, prediction: int | None):
        self.text, self.suite, self.prediction = text, suite, prediction
        self.tokens = _tokenise(text, self.error)
        self.pos = 0

    def error(self, reason: str, column: int) -> FormulaError:
        return FormulaError(reason, self.text, column, self.suite, self.prediction)

    @property
    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def found(self, token: _Token) -> str:
        return "the end of the formula" if token.kind == "end" else repr(token.text)

    def expect_type(self, node: _Node, wanted: str, context: str) -> None:
        if node.type != wanted:
            what = "a comparison (true/false)" if wanted == "bool" else "a number (surprisal)"
            got = "a comparison" if node.type == "bool" else "a number"
            raise self.error(f"expected {what} {context}, found {got}", node.column)

    def formula(self) -> _Node:
        node = self.logical()
        if self.peek.kind != "end":
            raise self.error(f"expected an operator or the end of the formula, found {self.found(self.peek)}",
                             self.peek.column)
        self.expect_type(node, "bool", "as the whole formula")
        return node

    def logical(self) -> _Node:
        node = self.comparison()
        while self.peek.kind in ("&", "|"):
            op = self.take()
            self.expect_type(node, "bool", f"left of {op.text!r}")
            right = self.comparison()
            self.expect_type(right, "bool", f"right of {op.text!r}")
            node = _Binary(op.text, node, right, op.column, "bool")
        return node

    def comparison(self) -> _Node:
        node = self.additive()
        if self.peek.kind in ("<", ">", "="):
            op = self.take()
            self.expect_type(node, "num", f"left of {op.text!r}")
            right = self.additive()
            self.expect_type(right, "num", f"right of {op.text!r}")
            node = _Binary(op.text, node, right, op.column, "bool")
            if self.peek.kind in ("<", ">", "="):
                raise self.error("expected '&', '|' or the end after a comparison, found a second comparison "
                                 "(chained comparisons are not allowed; group them with '&')", self.peek.column)
        return node

    def additive(self) -> _Node:
        node = self.multiplicative()
        while self.peek.kind in ("+", "-"):
            op = self.take()
            self.expect_type(node, "num", f"left of {op.text!r}")
            right = self.multiplicative()
            self.expect_type(right, "num", f"right of {op.text!r}")
            node = _Binary(op.text, node, right, op.column)
        return node

    def multiplicative(self) -> _Node:
        node = self.unary()
        while self.peek.kind in ("*", "/"):
            op = self.take()
            self.expect_type(node, "num", f"left of {op.text!r}")
            right = self.unary()
            self.expect_type(right, "num", f"right of {op.text!r}")
            node = _Binary(op.text, node, right, op.column)
        return node

    def unary(self) -> _Node:
        if self.peek.kind == "-":
            op = self.take()
            operand = self.unary()
            self.expect_type(operand, "num", "after unary '-'")
            return _Negate(operand, op.column)
        return self.primary()

    def primary(self) -> _Node:
        token = self.take()
        if token.kind == "region":
            region, condition = token.value
            return _Region(region, condition, token.column)
        if token.kind == "number":
            return _Number(token.value, token.column)
        if token.kind in ("(", "["):
            closing = ")" if token.kind == "(" else "]"
            node = self.logical()
            end = self.take()
            if end.kind != closing:
                raise self.error(f"expected {closing!r} to close {token.kind!r} at column {token.column}, "
                                 f"found {self.found(end)}", end.column)
            node.column = token.column
            return node
        raise self.error(
            f"expected a region reference '(N;%condition%)', a number, '(' or '[', found {self.found(token)}",
            token.column,
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Formula:
    """A parsed prediction formula; call `evaluate(values)` with condition -> region number -> surprisal."""

    text: str
    _root: _Node = dataclasses.field(repr=False)

    def evaluate(self, values: Values) -> bool:
        return bool(self._root.evaluate(values))

    def references(self) -> list[tuple[str, int | None, int]]:
        """(condition, region number or None for '*', column) of every region reference, left to right."""
        found: list[tuple[str, int | None, int]] = []
        stack: list[_Node] = [self._root]
        while stack:
            node = stack.pop()
            if isinstance(node, _Region):
                found.append((node.condition, node.region, node.column))
            elif isinstance(node, _Binary):
                stack.extend((node.right, node.left))
            elif isinstance(node, _Negate):
                stack.append(node.operand)
        return found

    def __str__(self) -> str:
        """The formula fully parenthesised, e.g. `(((7;%a%) < (7;%b%)) & ...)`."""
        return str(self._root)


def parse_formula(text: str, *, suite: str | None = None, prediction: int | None = None) -> Formula:
    """Parses a SyntaxGym prediction formula; raises `FormulaError` naming suite, prediction and column."""
    return Formula(text, _Parser(text, suite, prediction).formula())


# ---------------------------------------------------------------------------
# Suites
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Condition:
    """One condition of an item: its region numbers and contents (stripped), in order."""

    name: str
    region_numbers: tuple[int, ...]
    contents: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Item:
    number: int
    conditions: tuple[Condition, ...]

    def condition(self, name: str) -> Condition:
        for condition in self.conditions:
            if condition.name == name:
                return condition
        raise KeyError(f"item {self.number} has no condition {name!r}")


@dataclasses.dataclass(frozen=True)
class Prediction:
    index: int  # 0-based position in the suite's `predictions`
    formula: Formula

    @property
    def text(self) -> str:
        return self.formula.text


@dataclasses.dataclass(frozen=True)
class SuiteSentence:
    """One (item, condition) sentence; unpacks as `(item, condition, regions)`.

    Attributes:
      item: the item number.
      condition: the condition name.
      regions: the region contents, in order (empty strings for empty regions).
      region_numbers: the matching region numbers.
    """

    item: int
    condition: str
    regions: tuple[str, ...]
    region_numbers: tuple[int, ...]

    def __iter__(self):
        return iter((self.item, self.condition, self.regions))

    @property
    def text(self) -> str:
        """The sentence: non-empty regions joined by single spaces."""
        return " ".join(region for region in self.regions if region)

    @property
    def region_words(self) -> tuple[tuple[str, ...], ...]:
        """Each region's words (`words_of`)."""
        return tuple(tuple(words_of(region)) for region in self.regions)

    @property
    def words(self) -> list[str]:
        """The sentence's words: the regions' words in order. A scorer gives one surprisal per word."""
        return [word for region in self.region_words for word in region]

    def region_surprisals(self, word_surprisals: Sequence[float], metric: str = "sum") -> dict[int, float]:
        """Region number -> the `metric` of its words' surprisals (`word_surprisals` aligned with `words`)."""
        values = np.asarray(word_surprisals, dtype=np.float64)
        sizes = [len(words) for words in self.region_words]
        if values.shape != (sum(sizes),):
            raise ValueError(
                f"item {self.item}, condition {self.condition!r}: got {values.shape} surprisals for "
                f"{sum(sizes)} words {self.words}"
            )
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
        aggregate = METRICS[metric]
        bounds = np.cumsum([0, *sizes])
        return {n: aggregate(values[a:b]) for n, a, b in zip(self.region_numbers, bounds[:-1], bounds[1:])}


@dataclasses.dataclass(frozen=True)
class Suite:
    """A SyntaxGym test suite.

    Attributes:
      name: `meta.name` (else the file's stem).
      path: where it was read from ("" if built in memory).
      metric: how word surprisals aggregate over a region (`meta.metric`, default sum).
      region_meta: region number -> region name.
      predictions: the parsed predictions.
      items: the items, in file order.
    """

    name: str
    path: str
    metric: str
    region_meta: dict[int, str]
    predictions: tuple[Prediction, ...]
    items: tuple[Item, ...]

    def sentences(self) -> Iterator[SuiteSentence]:
        """Every (item, condition) sentence, items in order and conditions in order within an item."""
        for item in self.items:
            for condition in item.conditions:
                yield SuiteSentence(item.number, condition.name, condition.contents, condition.region_numbers)

    @property
    def num_sentences(self) -> int:
        return sum(len(item.conditions) for item in self.items)


def _suite_error(where: str, reason: str) -> ValueError:
    return ValueError(f"{where}: {reason}")


def _field(record: Mapping, key: str, kind: type | tuple[type, ...], where: str):
    if not isinstance(record, Mapping) or key not in record:
        raise _suite_error(where, f"expected a field {key!r}")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _suite_error(where, f"expected {key!r} to be {names}, found {type(value).__name__}")
    return value


def suite_from_dict(data: Mapping, name: str | None = None, path: str = "") -> Suite:
    """Builds a `Suite` from the JSON structure (as `json.load` returns it); errors name `path`."""
    source = path or "<suite>"
    meta = data.get("meta", {}) if isinstance(data, Mapping) else {}
    name = str(meta.get("name") or name or Path(path).stem or "suite")
    metric = str(meta.get("metric", "sum"))
    if metric not in METRICS:
        raise _suite_error(source, f"meta.metric: expected one of {', '.join(METRICS)}, found {metric!r}")
    try:
        region_meta = {int(k): str(v) for k, v in (data.get("region_meta") or {}).items()}
    except (TypeError, ValueError, AttributeError):
        raise _suite_error(source, "region_meta: expected an object mapping region numbers to names") from None

    items: list[Item] = []
    for i, record in enumerate(_field(data, "items", list, source)):
        where = f"{source}: items[{i}]"
        number = _field(record, "item_number", int, where)
        conditions = []
        for j, cond in enumerate(_field(record, "conditions", list, where)):
            cwhere = f"{where}.conditions[{j}]"
            cname = _field(cond, "condition_name", str, cwhere)
            numbers, contents = [], []
            for k, region in enumerate(_field(cond, "regions", list, cwhere)):
                rwhere = f"{cwhere}.regions[{k}]"
                numbers.append(_field(region, "region_number", int, rwhere))
                contents.append(_field(region, "content", str, rwhere).strip())
            if len(set(numbers)) != len(numbers):
                raise _suite_error(cwhere, f"region numbers repeat: {numbers}")
            conditions.append(Condition(cname, tuple(numbers), tuple(contents)))
        items.append(Item(number, tuple(conditions)))
    if not items:
        raise _suite_error(source, "expected at least one item, found none")

    predictions = []
    for index, record in enumerate(_field(data, "predictions", list, source)):
        pwhere = f"{source}: predictions[{index}]"
        kind = record.get("type", "formula") if isinstance(record, Mapping) else None
        if kind != "formula":
            raise _suite_error(pwhere, f"expected a prediction of type 'formula', found {kind!r}")
        formula = parse_formula(_field(record, "formula", str, pwhere), suite=name, prediction=index)
        for condition, region, column in formula.references():
            for item in items:
                names = [c.name for c in item.conditions]
                if condition not in names:
                    raise FormulaError(f"condition {condition!r} is not in item {item.number} "
                                       f"(conditions: {', '.join(names)})", formula.text, column, name, index)
                if region is not None and region not in item.condition(condition).region_numbers:
                    raise FormulaError(f"region {region} is not in condition {condition!r} of item {item.number}",
                                       formula.text, column, name, index)
        predictions.append(Prediction(index, formula))
    if not predictions:
        raise _suite_error(source, "expected at least one prediction, found none")
    return Suite(name, path, metric, region_meta, tuple(predictions), tuple(items))


def load_suite(path: str | os.PathLike) -> Suite:
    """Reads a SyntaxGym suite JSON file; ValueError / FormulaError name the file and what was expected."""
    source = os.fspath(path)
    data = read_json(source)
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: expected a JSON object with 'items' and 'predictions'")
    return suite_from_dict(data, name=Path(source).stem, path=source)


def load_suites(directory: str | os.PathLike, *, skip: Iterable[str] = ("circuits.json",)) -> list[Suite]:
    """Every `*.json` suite in `directory` (sorted by file name), except the files named in `skip`."""
    directory = Path(directory)
    skip = set(skip)
    files = sorted(p for p in directory.glob("*.json") if p.name not in skip)
    if not files:
        raise ValueError(f"{directory}: no SyntaxGym suite (*.json) files")
    return [load_suite(p) for p in files]


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuiteResult:
    """Outcomes of one suite.

    Attributes:
      suite: the suite's name.
      predictions: the formulas, in order.
      item_numbers: the items, in order.
      outcomes: bool array [num_items, num_predictions]: whether each prediction holds on each item.
    """

    suite: str
    predictions: tuple[str, ...]
    item_numbers: tuple[int, ...]
    outcomes: np.ndarray

    @property
    def prediction_accuracies(self) -> np.ndarray:
        """Per prediction, the fraction of items where it holds."""
        return self.outcomes.mean(axis=0)

    @property
    def accuracy(self) -> float:
        """The suite's score: mean over (item, prediction) pairs (= mean of the prediction accuracies)."""
        return float(self.outcomes.mean())

    @property
    def all_predictions_accuracy(self) -> float:
        """Fraction of items where every prediction holds."""
        return float(self.outcomes.all(axis=1).mean())


RegionSurprisals = Mapping[tuple[int, str], Mapping[int, float] | Sequence[float]]


def _bits_per_unit(unit: str) -> float:
    if unit not in BITS_PER_UNIT:
        raise ValueError(f"surprisal unit: expected one of {', '.join(BITS_PER_UNIT)}, got {unit!r}")
    return BITS_PER_UNIT[unit]


def evaluate_suite(suite: Suite, region_surprisals: RegionSurprisals, *, unit: str) -> SuiteResult:
    """Evaluates every prediction on every item.

    Args:
      suite: a loaded suite.
      region_surprisals: (item number, condition name) -> the surprisal of
        each region, as region number -> value or as a sequence in the
        condition's region order (e.g. from `SuiteSentence.region_surprisals`).
      unit: "nats" or "bits", the unit of `region_surprisals`; the values are
        converted to bits first (the formulas' `=` tolerance is in bits).
    Raises:
      ValueError naming the suite, item and condition when one is missing or
      has the wrong number of regions.
    """
    to_bits = _bits_per_unit(unit)
    outcomes = np.zeros((len(suite.items), len(suite.predictions)), dtype=bool)
    for row, item in enumerate(suite.items):
        values: dict[str, dict[int, float]] = {}
        for condition in item.conditions:
            key = (item.number, condition.name)
            if key not in region_surprisals:
                raise ValueError(f"suite {suite.name}: no region surprisals for item {item.number}, "
                                 f"condition {condition.name!r}")
            given = region_surprisals[key]
            if isinstance(given, Mapping):
                missing = [n for n in condition.region_numbers if n not in given]
                if missing:
                    raise ValueError(f"suite {suite.name}: item {item.number}, condition {condition.name!r}: "
                                     f"no surprisal for regions {missing}")
                values[condition.name] = {n: float(given[n]) * to_bits for n in condition.region_numbers}
            else:
                given = list(given)
                if len(given) != len(condition.region_numbers):
                    raise ValueError(f"suite {suite.name}: item {item.number}, condition {condition.name!r}: "
                                     f"{len(given)} region surprisals for {len(condition.region_numbers)} regions")
                values[condition.name] = {n: float(v) * to_bits for n, v in zip(condition.region_numbers, given)}
        for col, prediction in enumerate(suite.predictions):
            outcomes[row, col] = prediction.formula.evaluate(values)
    return SuiteResult(suite.name, tuple(p.text for p in suite.predictions),
                       tuple(item.number for item in suite.items), outcomes)


def score_suite(
    suite: Suite,
    surprisal_fn: Callable[[list[list[str]]], Sequence[Sequence[float]]],
    *,
    unit: str,
    batch_size: int | None = None,
) -> SuiteResult:
    """Scores a suite with a word-level scorer.

    `surprisal_fn(list of word lists)` returns, for each sentence, one
    surprisal per word (`SuiteSentence.words`) in `unit` ("nats" or "bits");
    regions aggregate them with the suite's metric, then `evaluate_suite`
    runs (in bits).
    """
    _bits_per_unit(unit)  # a bad unit fails before any scoring
    sentences = list(suite.sentences())
    step = batch_size or len(sentences)
    region_surprisals: dict[tuple[int, str], dict[int, float]] = {}
    for start in range(0, len(sentences), step):
        chunk = sentences[start:start + step]
        scores = surprisal_fn([s.words for s in chunk])
        if len(scores) != len(chunk):
            raise ValueError(f"suite {suite.name}: surprisal_fn returned {len(scores)} results "
                             f"for {len(chunk)} sentences")
        for sentence, word_surprisals in zip(chunk, scores):
            key = (sentence.item, sentence.condition)
            region_surprisals[key] = sentence.region_surprisals(word_surprisals, suite.metric)
    return evaluate_suite(suite, region_surprisals, unit=unit)


# ---------------------------------------------------------------------------
# Circuits and the SG score
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Circuits:
    """Circuit name -> suite names, and the suites left out of the scores."""

    circuits: dict[str, tuple[str, ...]]
    excluded: tuple[str, ...] = ()


def load_circuits(path: str | os.PathLike) -> Circuits:
    """Reads `circuits.json`.

    The format is `{"circuits": {name: [suites]}, "excluded_in_paper": [suites]}`
    (keys starting with `_` are ignored), or just `{name: [suites]}`.
    """
    source = os.fspath(path)
    data = read_json(source)
    table = data.get("circuits", data) if isinstance(data, Mapping) else None
    if not isinstance(table, Mapping):
        raise ValueError(f"{source}: expected a JSON object mapping circuit names to lists of suites")
    circuits = {}
    for name, suites in table.items():
        if name.startswith("_"):
            continue
        if not isinstance(suites, list) or not all(isinstance(s, str) for s in suites):
            raise ValueError(f"{source}: circuit {name!r}: expected a list of suite names")
        circuits[name] = tuple(suites)
    excluded = data.get("excluded_in_paper", []) if "circuits" in data else []
    return Circuits(circuits, tuple(excluded))


@dataclasses.dataclass(frozen=True)
class CircuitScore:
    """Mean accuracy of a circuit's suites present in the results (NaN if none)."""

    name: str
    score: float
    suites: tuple[str, ...]
    missing: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SGReport:
    """Suite accuracies, circuit scores and the SG score (fractions in [0, 1]).

    Attributes:
      suites: suite name -> accuracy, for every result given (excluded ones too).
      circuits: circuit name -> `CircuitScore`.
      sg_score: mean accuracy over the suites not excluded.
      included, excluded: the suites counted in `sg_score`, and those left out.
      uncategorised: counted suites that belong to no circuit.
    """

    suites: dict[str, float]
    circuits: dict[str, CircuitScore]
    sg_score: float
    included: tuple[str, ...]
    excluded: tuple[str, ...]
    uncategorised: tuple[str, ...]

    def format(self) -> str:
        lines = [f"SG score {100 * self.sg_score:6.2f}  (mean over {len(self.included)} suites"
                 + (f"; excluded: {', '.join(self.excluded)}" if self.excluded else "") + ")", ""]
        width = max([len("circuit"), *(len(c) for c in self.circuits)])
        lines.append(f"{'circuit':<{width}}  score   suites")
        for circuit in self.circuits.values():
            note = f"  (missing: {', '.join(circuit.missing)})" if circuit.missing else ""
            lines.append(f"{circuit.name:<{width}}  {100 * circuit.score:6.2f}  {len(circuit.suites):6d}{note}")
        width = max([len("suite"), *(len(s) for s in self.suites)])
        lines += ["", f"{'suite':<{width}}  accuracy"]
        for suite, accuracy in self.suites.items():
            note = "  (excluded)" if suite in self.excluded else ""
            lines.append(f"{suite:<{width}}  {100 * accuracy:8.2f}{note}")
        return "\n".join(lines)


def sg_report(
    results: Iterable[SuiteResult] | Mapping[str, SuiteResult],
    circuits: Circuits | None = None,
    *,
    exclude: Iterable[str] | None = None,
) -> SGReport:
    """Circuit averages and the SG score (mean suite accuracy), as Hu et al. (2020) compute them.

    Args:
      results: one `SuiteResult` per suite (names must be unique).
      circuits: the circuit table (`load_circuits`); None reports no circuits.
      exclude: suites to leave out of circuit and SG scores; default
        `circuits.excluded` (or none).
    """
    results = list(results.values()) if isinstance(results, Mapping) else list(results)
    accuracy: dict[str, float] = {}
    for result in results:
        if result.suite in accuracy:
            raise ValueError(f"two results for suite {result.suite!r}")
        accuracy[result.suite] = result.accuracy
    if not accuracy:
        raise ValueError("sg_report needs at least one suite result")
    excluded = set(exclude if exclude is not None else (circuits.excluded if circuits else ()))
    included = tuple(s for s in accuracy if s not in excluded)
    if not included:
        raise ValueError("every suite is excluded; nothing to average")
    table = circuits.circuits if circuits else {}
    circuit_scores = {}
    for name, members in table.items():
        present = tuple(s for s in members if s in accuracy and s not in excluded)
        missing = tuple(s for s in members if s not in accuracy)
        score = float(np.mean([accuracy[s] for s in present])) if present else math.nan
        circuit_scores[name] = CircuitScore(name, score, present, missing)
    in_circuits = {s for members in table.values() for s in members}
    return SGReport(
        suites=accuracy,
        circuits=circuit_scores,
        sg_score=float(np.mean([accuracy[s] for s in included])),
        included=included,
        excluded=tuple(s for s in accuracy if s in excluded),
        uncategorised=tuple(s for s in included if s not in in_circuits),
    )
