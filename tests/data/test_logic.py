"""Logical inference: formulas, operator counts, relations, the original files and their splits, malformed lines."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from tgjax.data import logic
from tgjax.data.logic import Binary, LogicFormatError, Not
from tgjax.syntax.trees import SourceLocationError

# --------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------


def test_parse_counts_and_gold_tree():
    formula = logic.parse_formula("( not ( e ( or ( not c ) ) ) )")
    assert formula == Not(Binary("or", "e", Not("c")))
    assert logic.count_operators(formula) == 3
    assert logic.tokens_of(formula) == "( not ( e ( or ( not c ) ) ) )".split()
    assert logic.gold_tree(formula) == ("not", ("e", ("or", ("not", "c"))))
    assert logic.count_operators(logic.parse_formula("d")) == 0
    nested = logic.parse_formula("( ( a ( and b ) ) ( or ( not ( c ( or d ) ) ) ) )")
    assert logic.count_operators(nested) == 4  # and, the outer or, not, the inner or


def test_gold_spans_over_the_words_by_hand():
    # `( d ( and e ) )`: words d, and, e; gold (d (and e)): the root and (and e).
    formula = logic.parse_formula("( d ( and e ) )")
    assert logic.gold_spans(formula) == [(0, 3), (1, 3)]
    assert logic.parenthesis_positions(formula) == {0, 2, 5, 6}
    # not / e / or / not / c: (not (e (or (not c)))), a right-branching chain of four nodes.
    formula = logic.parse_formula("( not ( e ( or ( not c ) ) ) )")
    assert logic.gold_spans(formula) == [(0, 5), (1, 5), (2, 5), (3, 5)]
    assert logic.parenthesis_positions(formula) == {0, 2, 4, 6, 9, 10, 11, 12}
    assert logic.gold_spans(logic.parse_formula("a")) == []
    # ((a and b) or (not c)): words a and b or not c.
    formula = logic.parse_formula("( ( a ( and b ) ) ( or ( not c ) ) )")
    assert logic.gold_spans(formula) == [(0, 6), (0, 3), (1, 3), (3, 6), (4, 6)]


def test_pair_bucket_is_the_larger_count_capped_at_12():
    example = logic.parse_line("|\t( not ( e ( or ( not c ) ) ) )\t( d ( and e ) )")
    assert (example.relation, example.label, example.operator_count) == ("|", 4, 3)
    deep = "a"
    for _ in range(14):
        deep = f"( not {deep} )"
    assert logic.parse_line(f"#\t{deep}\tb").operator_count == 12


@pytest.mark.parametrize(
    "left, right, relation",
    [
        ("a", "a", "="),
        ("a", "( not ( not a ) )", "="),
        ("a", "( not a )", "^"),  # disjoint and exhaustive
        ("( a ( and b ) )", "a", "<"),
        ("a", "( a ( or b ) )", "<"),
        ("a", "( a ( and b ) )", ">"),
        ("( a ( and b ) )", "( not a )", "|"),  # disjoint, not exhaustive
        ("( a ( or b ) )", "( not a )", "v"),  # overlap (b without a), exhaustive
        ("a", "b", "#"),
        ("( not ( a ( and b ) ) )", "( ( not a ) ( or ( not b ) ) )", "="),  # De Morgan
    ],
)
def test_relations_by_hand(left, right, relation):
    assert logic.relation_of(logic.parse_formula(left), logic.parse_formula(right)) == relation


def test_relations_are_refused_for_tautologies_and_contradictions():
    with pytest.raises(ValueError, match="left formula is a tautology"):
        logic.relation_of(logic.parse_formula("( a ( or ( not a ) ) )"), logic.parse_formula("b"))
    with pytest.raises(ValueError, match="right formula is a contradiction"):
        logic.relation_of(logic.parse_formula("b"), logic.parse_formula("( a ( and ( not a ) ) )"))


# --------------------------------------------------------------------------
# Malformed lines
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_line, column, message",
    [
        ("%\ta\tb", 1, "expected a relation among < > = ^ | # v, found '%'"),
        ("<\ta", 1, "expected 3 tab-separated fields"),
        ("<\ta\tb\tc", 6, "expected 3 tab-separated fields"),
        ("<\t( a ( and g ) )\tb", 13, "expected a variable a-f or '(', found 'g'"),
        ("<\t( a ( xor b ) )\tb", 9, "expected an operator 'and' or 'or', found 'xor'"),
        ("<\t( a ( and b ) \tb", 16, "expected ')', found the end of the formula"),
        ("<\ta\t( not b ) )", 15, "expected the end of the formula, found ')'"),
        ("<\ta\t( not b", 12, "expected ')', found the end of the formula"),
        ("<\ta\t( ( not b ) )", 17, "expected '(', found ')'"),
        ("", 1, "empty line"),
    ],
)
def test_malformed_lines_name_file_line_column(tmp_path, bad_line, column, message):
    path = tmp_path / "train1"
    path.write_text(f"<\t( not a )\t( not ( a ( and b ) ) )\n{bad_line}\n")
    with pytest.raises(LogicFormatError) as info:
        logic.read_logic(path)
    assert (info.value.line, info.value.column) == (2, column), str(info.value)
    assert str(info.value).startswith(f"{path}:2:{column}: ")
    assert message in info.value.reason


def test_a_pair_in_the_wrong_operator_file_is_refused(tmp_path):
    (tmp_path / "train2").write_text("=\t( not ( not a ) )\ta\n<\t( not a )\t( not ( a ( and b ) ) )\n")
    assert len(logic.read_bucket(tmp_path, "train", 2)) == 2
    (tmp_path / "train3").write_text("=\t( not ( not a ) )\ta\n")
    with pytest.raises(LogicFormatError, match=r"train3:1:1: a file of 3-operator pairs holds a pair with 2"):
        logic.read_bucket(tmp_path, "train", 3)


# --------------------------------------------------------------------------
# The original files
# --------------------------------------------------------------------------

TRAIN_LINES = [30, 2319, 12451, 23252, 30373, 34152, 32952, 26671, 18962, 12634, 8181, 4894, 4831]
TEST_LINES = [6, 410, 2198, 4104, 5361, 6027, 5816, 4707, 3347, 2230, 1444, 864, 853]


SYSTEMATICITY_SIZES = [("A", 128969, 1369, 2472), ("B", 87948, 9257, 17544), ("C", 51896, 12757, 27232)]


def logic_directory() -> Path:
    """../shared/data/ordered_memory/propositionallogic; skips the test when it is absent."""
    from tests.conftest import shared_data_dir

    data = shared_data_dir()
    directory = None if data is None else data / "ordered_memory" / "propositionallogic"
    if directory is None or not directory.is_dir():
        pytest.skip("../shared/data/ordered_memory/propositionallogic is absent")
    return directory


@pytest.fixture(scope="module")
def test_files() -> logic.LogicFiles:
    """Every test file and the two smallest training files (train0, train1): 40k of the 250k lines, read in a
    few seconds (operator counts checked per file). The CI tests read these; their slow twins, every file."""
    directory = logic_directory()
    return logic.LogicFiles({n: logic.read_bucket(directory, "train", n) for n in range(2)},
                            {n: logic.read_bucket(directory, "test", n) for n in range(13)})


@pytest.fixture(scope="module")
def files() -> logic.LogicFiles:
    return logic.LogicFiles.read(logic_directory())  # ~250k lines, read once, operator counts checked per file


def label_disagreements(files: logic.LogicFiles) -> list:
    return [
        (split, n, e.line, e.relation, logic.relation_of(e.left, e.right))
        for split, by_count in (("train", files.train), ("test", files.test))
        for n, examples in by_count.items()
        for e in examples
        if logic.relation_of(e.left, e.right) != e.relation
    ]


def test_real_test_files_line_counts_and_labels(test_files):
    """The test files and train0, train1 (`test_files`): their lines, and every label the relation of its pair."""
    assert [len(test_files.train[n]) for n in range(2)] == TRAIN_LINES[:2]
    assert [len(test_files.test[n]) for n in range(13)] == TEST_LINES
    disagreements = label_disagreements(test_files)
    assert disagreements == [], f"{len(disagreements)} labels disagree, first: {disagreements[:5]}"


def test_length_split_of_the_test_files(test_files):
    """The length split's test sets and its held-out lines, on `test_files` (training up to 1 operator)."""
    split = logic.length_split(test_files, train_max_operators=1)
    assert len(split.train) + len(split.valid) == sum(TRAIN_LINES[:2])
    # every 10th pooled line, counted across the files: train0 has 30 lines, so the 40th is train1's 10th
    assert split.valid[0] is test_files.train[0][9] and split.valid[3] is test_files.train[1][9]
    assert {n: len(v) for n, v in split.test.items()} == dict(zip(range(7, 13), TEST_LINES[7:]))
    assert all(e.operator_count == n for n, v in split.test.items() for e in v)


@pytest.mark.parametrize("name, thesis_test_size, test_size", [(n, thesis, test) for n, _, thesis, test in
                                                                 SYSTEMATICITY_SIZES])
def test_systematicity_test_sets_match_the_thesis_sizes(test_files, name, thesis_test_size, test_size):
    """The thesis' test sets of the systematicity splits, from every test file (`test_files`); the training sets,
    which read every training file, in `test_systematicity_splits_match_the_thesis_sizes` (slow)."""
    split = logic.systematicity_split(test_files, name, train_max_operators=1, validation_every=0)
    # The thesis' test: the unseen pairs of 7..12 operators; every length 0..12 is the larger set beside it.
    assert sum(len(v) for v in logic.thesis_lengths(split.test).values()) == thesis_test_size
    assert sum(len(v) for v in split.test.values()) == test_size
    assert not any(logic.contains_pattern(e, name) for e in split.train)
    assert all(logic.contains_pattern(e, name) for v in split.test.values() for e in v)


@pytest.mark.slow
def test_real_files_line_counts_and_labels(files):
    assert [len(files.train[n]) for n in range(13)] == TRAIN_LINES
    assert [len(files.test[n]) for n in range(13)] == TEST_LINES
    relations = collections.Counter(e.relation for by_count in (files.train, files.test)
                                    for examples in by_count.values() for e in examples)
    assert set(relations) == set(logic.RELATIONS)
    assert relations["#"] == 132201 and relations["="] == 4674 and sum(relations.values()) == 249069


@pytest.mark.slow
def test_every_real_label_is_the_relation_of_its_formulas(files):
    disagreements = label_disagreements(files)
    assert disagreements == [], f"{len(disagreements)} labels disagree, first: {disagreements[:5]}"


@pytest.mark.slow
def test_length_split(files):
    split = logic.length_split(files)
    assert len(split.train) + len(split.valid) == 135529  # the thesis' "Full" training size
    assert len(split.valid) == 135529 // 10
    # every 10th pooled line, counted across the files: train0 has 30 lines, so the 40th is train1's 10th
    assert split.valid[0] is files.train[0][9] and split.valid[3] is files.train[1][9]
    assert {n: len(v) for n, v in split.test.items()} == dict(zip(range(7, 13), TEST_LINES[7:]))
    assert max(e.operator_count for e in split.train + split.valid) == 6
    assert all(e.operator_count == n for n, v in split.test.items() for e in v)


@pytest.mark.slow
@pytest.mark.parametrize("name, train_size, thesis_test_size, test_size", SYSTEMATICITY_SIZES)
def test_systematicity_splits_match_the_thesis_sizes(files, name, train_size, thesis_test_size, test_size):
    split = logic.systematicity_split(files, name, validation_every=0)
    assert len(split.train) == train_size and split.valid == []
    # The thesis' test: the unseen pairs of 7..12 operators; every length 0..12 is the larger set beside it.
    assert sum(len(v) for v in logic.thesis_lengths(split.test).values()) == thesis_test_size
    assert sum(len(v) for v in split.test.values()) == test_size
    assert not any(logic.contains_pattern(e, name) for e in split.train)
    assert all(logic.contains_pattern(e, name) for v in split.test.values() for e in v)


def test_systematicity_patterns_by_hand():
    def example(left):
        return logic.parse_line(f"#\t{left}\tb")

    a_case = example("( f ( and ( not a ) ) )")
    b_case = example("( c ( and ( not ( a ( or b ) ) ) ) )")
    c_case = example("( a ( or ( not e ) ) )")
    not_first = example("( ( not a ) ( and f ) )")  # negation on the left: no pattern
    assert [logic.contains_pattern(x, "A") for x in (a_case, b_case, c_case, not_first)] == [True, False, False, False]
    assert [logic.contains_pattern(x, "B") for x in (a_case, b_case, c_case, not_first)] == [True, True, False, False]
    assert [logic.contains_pattern(x, "C") for x in (a_case, b_case, c_case, not_first)] == [True, True, True, False]


def test_encode_right_pads_with_the_release_ids():
    examples = [logic.parse_line("<\t( not a )\tb"), logic.parse_line("v\tc\t( d ( or e ) )")]
    batch = logic.encode(examples)
    assert batch["left"].tolist() == [[0, 10, 2, 1, 11, 11, 11], [4, 11, 11, 11, 11, 11, 11]]
    assert batch["right"].tolist() == [[3, 11, 11, 11, 11, 11, 11], [0, 5, 0, 8, 6, 1, 1]]
    assert batch["left_lengths"].tolist() == [4, 1] and batch["right_lengths"].tolist() == [1, 7]
    assert batch["labels"].tolist() == [0, 6] and batch["labels"].dtype == np.int32


def test_a_byte_that_is_not_utf8_is_named_by_file_line_column(tmp_path):
    path = tmp_path / "train1"
    path.write_bytes(b"<\t( not a )\t( not ( a ( and b ) ) )\n=\t\xe9\ta\n")
    with pytest.raises(SourceLocationError, match=r"train1:2:3: expected utf-8 text, found the byte 0xe9"):
        logic.read_logic(path)
