"""The logical-inference generator: every label against an independent truth-table checker, the grammar,
the sub-universe, determinism, the release's constants, and the file round trip."""

from __future__ import annotations

import collections
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import logic
from tgjax.data.logic import Binary, Not

# --------------------------------------------------------------------------
# An independent checker: formulas evaluated world by world from their tokens
# (a recursive-descent reading of the text, not the Formula objects), and
# MacCartney's relations from their set definitions (released-code.md §3.4).
# --------------------------------------------------------------------------


def truth(tokens: list[str], world: dict[str, bool]) -> bool:
    position = 0

    def formula() -> bool:
        nonlocal position
        token = tokens[position]
        position += 1
        if token != "(":
            return world[token]
        if tokens[position] == "not":
            position += 1
            value = not formula()
            position += 1  # ")"
            return value
        left = formula()
        position += 1  # "("
        operator = tokens[position]
        position += 1
        right = formula()
        position += 2  # ") )"
        return (left and right) if operator == "and" else (left or right)

    value = formula()
    assert position == len(tokens)
    return value


def relation_by_sets(left_tokens, right_tokens) -> str:
    worlds = [dict(zip("abcdef", bits)) for bits in itertools.product([False, True], repeat=6)]
    everything = set(range(len(worlds)))
    left = {i for i, w in enumerate(worlds) if truth(left_tokens, w)}
    right = {i for i, w in enumerate(worlds) if truth(right_tokens, w)}
    outside = everything - (left | right)
    if left == right:
        return "="
    if left < right and outside:
        return "<"
    if right < left and outside:
        return ">"
    if not left & right:
        return "^" if not outside else "|"
    if not outside:
        return "v"
    return "#"


def variables_of(formula) -> set[str]:
    if isinstance(formula, Not):
        return variables_of(formula.operand)
    if isinstance(formula, Binary):
        return variables_of(formula.left) | variables_of(formula.right)
    return {formula}


def binary_depth(formula) -> int:
    if isinstance(formula, Not):
        return binary_depth(formula.operand)
    if isinstance(formula, Binary):
        return 1 + max(binary_depth(formula.left), binary_depth(formula.right))
    return 0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_every_label_is_the_truth_table_relation(seed):
    pairs = logic.generate_pairs(150, seed=seed)
    assert len(pairs) == 150 and len({(p.left, p.right) for p in pairs}) == 150
    for pair in pairs:
        left, right = logic.tokens_of(pair.left), logic.tokens_of(pair.right)
        assert pair.relation == relation_by_sets(left, right)
        # The grammar: the file form parses back to the same formula.
        assert logic.parse_formula(" ".join(left)) == pair.left
        assert logic.parse_formula(" ".join(right)) == pair.right
        # One 4-variable sub-universe per pair; lengths halve 12 -> 6 -> 3 -> 1, so at most 3 binary levels.
        assert len(variables_of(pair.left) | variables_of(pair.right)) <= 4
        assert binary_depth(pair.left) <= 3 and binary_depth(pair.right) <= 3
        # Neither side is a tautology or a contradiction.
        for tokens in (left, right):
            values = {truth(tokens, dict(zip("abcdef", bits))) for bits in itertools.product([0, 1], repeat=6)}
            assert values == {False, True}
    assert logic.generate_pairs(150, seed=seed) == pairs


def test_release_constants_show_in_the_distribution():
    rng = np.random.default_rng(0)
    roots = [logic.sample_formula(rng, ["a", "b", "c", "d"]) for _ in range(20_000)]
    negated = sum(isinstance(r, Not) for r in roots) / len(roots)
    assert abs(negated - 1 / 3) < 0.015
    unwrapped = [r.operand if isinstance(r, Not) else r for r in roots]
    binary = sum(isinstance(r, Binary) for r in unwrapped) / len(unwrapped)
    assert abs(binary - 4 / 9) < 0.015
    operators = collections.Counter(r.operator for r in unwrapped if isinstance(r, Binary))
    assert abs(operators["and"] / sum(operators.values()) - 0.5) < 0.02
    assert logic.sample_formula(np.random.default_rng(1), ["a"], max_length=1) in ("a", Not("a"))


def test_relations_cover_all_seven_classes_and_buckets_reach_twelve():
    pairs = logic.generate_pairs(3000, seed=5)
    assert set(collections.Counter(p.relation for p in pairs)) == set(logic.RELATIONS)
    counts = collections.Counter(p.operator_count for p in pairs)
    assert min(counts) <= 1 and max(counts) >= 10


def test_split_write_and_read_back(tmp_path):
    pairs = logic.generate_pairs(400, seed=2)
    train, test = logic.split_generated(pairs, seed=0)
    for n in range(13):
        bucket = [p for p in pairs if p.operator_count == n]
        assert len(train[n]) + len(test[n]) == len(bucket)
        assert len(test[n]) == round(0.15 * len(bucket))
        assert not set(train[n]) & set(test[n])
    logic.write_logic_files(tmp_path, train, test)
    files = logic.LogicFiles.read(tmp_path)  # checks every line's operator count against its file
    for n in range(13):
        assert [(e.relation, e.left, e.right) for e in files.train[n]] == \
            [(e.relation, e.left, e.right) for e in train[n]]
        assert len(files.test[n]) == len(test[n])


@pytest.mark.parametrize("name", ["A", "B", "C"])
def test_the_thesis_systematicity_subset_is_exactly_the_unseen_pairs_of_7_to_12_operators(tmp_path, name):
    pairs = logic.generate_pairs(3000, seed=7)
    train, test = logic.split_generated(pairs, seed=0)
    logic.write_logic_files(tmp_path, train, test)
    split = logic.systematicity_split(tmp_path, name)
    everything = [e for bucket in split.test.values() for e in bucket]
    subset = [e for bucket in logic.thesis_lengths(split.test).values() for e in bucket]
    expected = [e for e in everything if 7 <= max(logic.count_operators(e.left), logic.count_operators(e.right))]
    assert subset == expected and 0 < len(subset) < len(everything)
    assert all(logic.contains_pattern(e, name) for e in subset)


def test_generator_arguments_are_checked():
    with pytest.raises(ValueError, match="num_pairs"):
        logic.generate_pairs(-1, seed=0)
    with pytest.raises(ValueError, match="universe_size"):
        logic.generate_pairs(5, seed=0, universe_size=7)
    with pytest.raises(RuntimeError, match="found only"):
        logic.generate_pairs(50, seed=0, max_attempts=20)  # 20 draws cannot give 50 pairs
