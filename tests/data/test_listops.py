"""ListOps: evaluator on hand-worked expressions, the file form, the generator, the shipped test set, encoding."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import listops
from tgjax.data.listops import ListNode, ListOpsFormatError
from tgjax.syntax.trees import SourceLocationError

# --------------------------------------------------------------------------
# A second evaluator, written differently (one pass over the tokens with a
# stack, the median from NumPy as the release computes it), so that the
# generator's labels are checked against something other than evaluate().
# --------------------------------------------------------------------------


def stack_value(tokens: list[str]) -> int:
    stack: list[list] = [[]]
    operators: list[str] = []
    for token in tokens:
        if token.startswith("["):
            operators.append(token)
            stack.append([])
        elif token == "]":
            values, operator = stack.pop(), operators.pop()
            value = {
                "[MIN": lambda v: min(v),
                "[MAX": lambda v: max(v),
                "[MED": lambda v: int(np.median(v)),
                "[SM": lambda v: sum(v) % 10,
            }[operator](values)
            stack[-1].append(value)
        else:
            stack[-1].append(int(token))
    (value,) = stack[0]
    return value


# --------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
        ("[MIN 2 9 [MAX 4 7 ] 3 ]", 2),
        ("[MIN [SM 5 6 ] [MAX 0 3 ] ]", 1),  # SM 11 -> 1, MAX 3, MIN 1
        ("[SM 6 5 9 0 ]", 0),  # 20 mod 10
        ("[SM 9 8 ]", 7),  # 17 mod 10
        ("[MED 5 1 9 ]", 5),  # odd count: the middle
        ("[MED 1 2 ]", 1),  # even count: mean 1.5, rounded down
        ("[MED 3 8 1 6 ]", 4),  # sorted 1 3 6 8: mean of 3 and 6 = 4.5 -> 4
        ("[MED 7 9 ]", 8),  # mean 8 exactly
        ("[MED 0 9 0 9 ]", 4),  # 4.5 -> 4
        ("[FIRST 3 1 2 ]", 3),
        ("[LAST 3 1 2 ]", 2),
        ("[MED [SM 9 9 ] [MAX 1 2 ] 6 [MIN 5 7 ] ]", 5),  # 8 2 6 5 -> 2 5 6 8 -> 5.5 -> 5
        ("4", 4),
    ],
)
def test_evaluator_on_hand_worked_expressions(text, value):
    expression = listops.parse_expression(text)
    assert listops.evaluate(expression) == value
    assert listops.tokens_of(expression) == text.split()


def test_even_median_rounds_down_like_the_release():
    # int(np.median(...)) of non-negative values: the mean of the middle pair, floored.
    for values in ([1, 2], [2, 5, 8, 9], [0, 1], [9, 8], [1, 4, 4, 7, 2, 3]):
        assert listops.apply_operator("[MED", values) == int(np.median(values))
    assert listops.apply_operator("[MED", [1, 2]) == 1 and listops.apply_operator("[MED", [2, 5, 8, 9]) == 6


def test_pm_and_flsum_are_in_the_vocabulary_but_not_evaluated():
    assert listops.TOKEN_IDS["[PM"] == 17 and listops.TOKEN_IDS["[FLSUM"] == 18
    with pytest.raises(ValueError, match="no defined value"):
        listops.apply_operator("[PM", [1, 2])


# --------------------------------------------------------------------------
# File form, gold tree
# --------------------------------------------------------------------------


def test_bracketed_and_bare_forms_are_the_same_expression():
    bracketed = "( ( ( ( ( [SM 6 ) 5 ) 9 ) 0 ) ] )"
    expression = listops.parse_expression(bracketed)
    assert expression == ListNode("[SM", (6, 5, 9, 0))
    assert expression == listops.parse_expression("[SM 6 5 9 0 ]")
    assert listops.to_bracketed(expression) == bracketed
    nested = ListNode("[MAX", (2, ListNode("[MIN", (4, 7))))
    assert listops.to_bracketed(nested) == "( ( ( [MAX 2 ) ( ( ( [MIN 4 ) 7 ) ] ) ) ] )"


def test_gold_tree_and_spans():
    expression = listops.parse_expression("[MAX 2 [MIN 4 7 ] ]")
    assert listops.gold_tree(expression) == (((("[MAX", "2"), ((("[MIN", "4"), "7"), "]"))), "]")
    # tokens: 0 [MAX, 1 2, 2 [MIN, 3 4, 4 7, 5 ], 6 ]
    assert listops.gold_spans(expression) == [(0, 7), (0, 6), (0, 2), (2, 6), (2, 5), (2, 4)]
    assert listops.gold_spans(listops.parse_expression("3")) == []


# --------------------------------------------------------------------------
# Malformed lines: file:line:column and what was expected
# --------------------------------------------------------------------------


def _write(tmp_path, lines: list[str]):
    path = tmp_path / "bad.tsv"
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    "bad_line, column, message",
    [
        ("4\t( ( [MAX 4 ) 2 ) ] )", 22, "unbalanced ')'"),  # one ')' too many, at the end
        ("4\t( ( ( [MAX 4 ) 2 ) ]", 3, "unbalanced '('"),  # the first '(' never closes
        ("4\t[MAX 4 2", 3, "never closed by ']'"),
        ("4\t[MAX 4 [FOO 2 ] ]", 10, "unknown operator '[FOO'"),
        ("4\t[MAX 4 x ]", 10, "expected a digit 0-9 or an operator"),
        ("4\t[MAX 4 ] 2", 12, "expected the end of the expression"),
        ("4\t( ( [MAX 4 2 ) ] )", 7, "bracketing differs"),  # 2 must get its own level
        ("x\t[MAX 4 ]", 1, "expected a label 0-9, found 'x'"),
        ("12\t[MAX 4 ]", 1, "expected a label 0-9, found '12'"),
        ("[MAX 4 ]", 1, "found no tab"),
        ("", 1, "empty line"),
        ("3\t[MAX 2 9 [MIN 4 7 ] 0 ]", 1, "label 3 but the expression evaluates to 9"),
    ],
)
def test_malformed_lines_name_file_line_column(tmp_path, bad_line, column, message):
    path = _write(tmp_path, ["9\t[MAX 2 9 [MIN 4 7 ] 0 ]", bad_line])
    with pytest.raises(ListOpsFormatError) as info:
        listops.read_listops(path)
    assert (info.value.line, info.value.column) == (2, column), str(info.value)
    assert str(info.value).startswith(f"{path}:2:{column}: ")
    assert message in info.value.reason


def test_label_mismatches_are_counted_when_asked(tmp_path):
    path = _write(tmp_path, ["9\t[MAX 2 9 ]", "3\t[MAX 2 9 ]", "2\t[MIN 2 9 ]", "0\t[SM 2 9 ]"])
    kept = listops.read_listops(path, on_label_mismatch="keep")
    assert [e.label for e in kept.examples] == [9, 3, 2, 0]
    assert kept.label_mismatches == [listops.LabelMismatch(2, 3, 9), listops.LabelMismatch(4, 0, 1)]
    dropped = listops.read_listops(path, on_label_mismatch="drop")
    assert [e.label for e in dropped.examples] == [9, 2]
    assert len(dropped.label_mismatches) == 2


# --------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_generator_labels_cap_uniqueness_and_determinism(seed, tmp_path_factory):
    examples = listops.generate(300, seed=seed)
    assert len(examples) == 300
    assert len({e.expression for e in examples}) == 300  # unique trees
    for example in examples:
        assert len(example.tokens) <= 50
        assert stack_value(example.tokens) == example.label
        assert all(t in listops.TOKEN_IDS for t in example.tokens)
        assert all(t in listops.OPERATORS or not t.startswith("[") for t in example.tokens)
    assert listops.generate(300, seed=seed) == examples
    # through the file form and back: the reader re-evaluates every label
    path = tmp_path_factory.mktemp("listops") / "gen.tsv"
    listops.write_listops(path, examples)
    assert listops.read_listops(path).examples == examples


def test_different_seeds_differ_and_length_cap_is_a_parameter():
    assert listops.generate(50, seed=1) != listops.generate(50, seed=2)
    long_ones = listops.generate(200, seed=3, max_tokens=None)
    assert max(len(e.tokens) for e in long_ones) > 50  # uncapped: some exceed the training cap
    capped = listops.generate(200, seed=3, max_tokens=10)
    assert max(len(e.tokens) for e in capped) <= 10


def test_generator_excludes_given_trees_and_stops_when_too_few_exist():
    train = listops.generate(200, seed=0)
    test = listops.generate(200, seed=0, exclude=[e.expression for e in train])
    assert not {e.expression for e in train} & {e.expression for e in test}
    with pytest.raises(RuntimeError, match="found only 10 of 11"):
        listops.generate(11, seed=0, max_tokens=1)  # only ten one-token trees: the digits


def test_generator_distribution_matches_the_release_constants():
    rng = np.random.default_rng(0)
    draws = [listops.sample_expression(rng) for _ in range(20_000)]
    roots = [d for d in draws if isinstance(d, ListNode)]
    assert abs(1 - len(roots) / len(draws) - 0.75) < 0.015  # a leaf with probability 0.75
    arity = collections.Counter(len(r.arguments) for r in roots)
    assert set(arity) == {2, 3, 4, 5} and min(arity.values()) > 0.2 * len(roots)
    operators = collections.Counter(r.operator for r in roots)
    assert set(operators) == set(listops.OPERATORS) and min(operators.values()) > 0.2 * len(roots)
    # depth cap: with leaves only forced at max_depth, lists nest exactly max_depth - 1 deep
    forced = listops.sample_expression(np.random.default_rng(1), leaf_probability=0.0, max_depth=6, max_args=2)
    assert listops.operator_depth(forced) == 5


# --------------------------------------------------------------------------
# The shipped test set
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped_test_set():
    from tests.conftest import shared_data_dir

    data = shared_data_dir()
    path = None if data is None else data / "ordered_memory" / "listops" / "test_d20s.tsv"
    if path is None or not path.is_file():
        pytest.skip("../shared/data/ordered_memory/listops/test_d20s.tsv is absent")
    return path, listops.read_listops(path, on_label_mismatch="keep")


def test_shipped_test_set_reads_and_every_label_is_the_value(shipped_test_set):
    path, data = shipped_test_set
    assert len(data.examples) == 10_000
    assert data.label_mismatches == [], f"{len(data.label_mismatches)} labels disagree with the evaluator"
    lines = path.read_text().splitlines()
    assert all(line.split("\t")[1] == listops.to_bracketed(e.expression) for line, e in zip(lines, data.examples))
    assert all(stack_value(e.tokens) == e.label for e in data.examples[:2000])
    labels = collections.Counter(e.label for e in data.examples)
    assert (labels[0], labels[6], labels[9]) == (1127, 895, 1141)


def test_shipped_test_set_statistics(shipped_test_set):
    _, data = shipped_test_set
    lengths = np.array([len(e.tokens) for e in data.examples])
    depths = np.array([listops.operator_depth(e.expression) for e in data.examples])
    assert (lengths.min(), lengths.max(), np.median(lengths)) == (1, 939, 16)
    assert (lengths <= 50).sum() == 7966
    assert (depths.max(), (depths == 19).sum()) == (19, 324)


def test_shipped_test_set_pins_the_even_median(shipped_test_set):
    # Rounding the even median up instead changes labels of real lines: the data decide the rule.
    _, data = shipped_test_set

    def value_rounding_up(expression):
        if not isinstance(expression, ListNode):
            return expression
        values = [value_rounding_up(a) for a in expression.arguments]
        if expression.operator == "[MED" and len(values) % 2 == 0:
            ordered = sorted(values)
            return -(-(ordered[len(values) // 2 - 1] + ordered[len(values) // 2]) // 2)
        return listops.apply_operator(expression.operator, values)

    changed = sum(value_rounding_up(e.expression) != e.label for e in data.examples)
    assert changed == 1117  # of 10,000 (the upper median instead: 1,873)


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------


def test_encode_left_pads_with_the_release_ids():
    examples = [listops.ListOpsExample(9, listops.parse_expression("[MAX 2 9 ]")), listops.ListOpsExample(4, 4)]
    batch = listops.encode(examples)
    assert batch["inputs"].tolist() == [[12, 3, 10, 19], [0, 0, 0, 5]]
    assert batch["mask"].tolist() == [[True] * 4, [False, False, False, True]]
    assert batch["lengths"].tolist() == [4, 1] and batch["labels"].tolist() == [9, 4]
    right = listops.encode(examples, pad_side="right", pad_to=6)
    assert right["inputs"].tolist() == [[12, 3, 10, 19, 0, 0], [5, 0, 0, 0, 0, 0]]
    assert right["inputs"].dtype == np.int32
    assert listops.decode(batch["inputs"][1]) == ["4"]
    assert listops.decode(batch["inputs"][0]) == ["[MAX", "2", "9", "]"]
    with pytest.raises(ValueError, match="shorter than the longest"):
        listops.encode(examples, pad_to=3)
    assert listops.TOKENS[11:16] == ("[MIN", "[MAX", "[FIRST", "[LAST", "[MED") and len(listops.TOKENS) == 20


def test_a_byte_that_is_not_utf8_is_named_by_file_line_column(tmp_path):
    path = tmp_path / "test_d20s.tsv"
    path.write_bytes(b"9\t[MAX 2 9 ]\n4\t[MAX 4 \xe9 ]\n")
    with pytest.raises(SourceLocationError, match=r"test_d20s.tsv:2:10: expected utf-8 text, found the byte 0xe9"):
        listops.read_listops(path)
