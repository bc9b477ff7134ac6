"""Syntactic distance <-> tree (tgjax.syntax.distance): the release's greedy split, its inverse, preprocessing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.syntax import distance as D
from tgjax.syntax.trees import Tree, parse

W4 = ["w0", "w1", "w2", "w3"]


# ---------------------------------------------------------------------------
# The greedy split, worked by hand
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "distances, expected",
    [
        # argmax w2 -> [tree(w0 w1), [w2, w3]]; inside (w0 w1) the argmax is the last word -> [w0, w1].
        ([0.1, 0.2, 0.9, 0.3], [["w0", "w1"], ["w2", "w3"]]),
        # The argmax ranges over the span's first word too: w0 wins and is split off on the left;
        # then (w1 w2 w3) with [0.1, 0.5, 0.2] splits at w2 -> [w1, [w2, w3]]. (Excluding the first
        # position would give [[w0, w1], [w2, w3]].)
        ([0.9, 0.1, 0.5, 0.2], ["w0", ["w1", ["w2", "w3"]]]),
        # Ties go to the first maximum (w1, not w3): [w0, [w1, tree(w2 w3)]]; the last maximum would
        # give [[w0, [w1, w2]], w3].
        ([0.1, 0.7, 0.3, 0.7], ["w0", ["w1", ["w2", "w3"]]]),
        # All equal: always the first word -> right-branching.
        ([0.5, 0.5, 0.5, 0.5], ["w0", ["w1", ["w2", "w3"]]]),
        # Increasing: the last word each time -> [tree(rest), w_last], left-branching.
        ([0.1, 0.2, 0.3, 0.4], [[["w0", "w1"], "w2"], "w3"]),
        # The split word starts the right constituent and takes the rest right-branchingly:
        # argmax w1 -> [w0, [w1, tree(w2 w3)]], tree(w2 w3) with [0.3, 0.1] -> [w2, w3].
        ([0.2, 0.8, 0.3, 0.1], ["w0", ["w1", ["w2", "w3"]]]),
    ],
)
def test_greedy_split_by_hand(distances, expected):
    assert D.tree_from_distances(distances, W4) == expected


def test_greedy_split_five_words_by_hand():
    words = ["the", "old", "dog", "barked", "loudly"]
    # argmax "barked" (0.8): [tree(the old dog), [barked, loudly]]; (the old dog) with
    # [0.3, 0.2, 0.1]: the first word wins -> [the, tree(old dog)] = [the, [old, dog]].
    assert D.tree_from_distances([0.3, 0.2, 0.1, 0.8, 0.4], words) == [
        ["the", ["old", "dog"]], ["barked", "loudly"]]


def test_trivial_sentences():
    assert D.tree_from_distances([0.3], ["alone"]) == "alone"
    assert D.tree_from_distances([], []) == []
    assert D.tree_from_distances(np.zeros(2), ["a", "b"]) == ["a", "b"]


def test_bad_distances():
    with pytest.raises(ValueError, match="3 distances for 2 words"):
        D.tree_from_distances([0.1, 0.2, 0.3], ["a", "b"])
    with pytest.raises(ValueError, match=r"distance 1 \(word 'b'\) is nan"):
        D.tree_from_distances([0.1, float("nan")], ["a", "b"])
    with pytest.raises(ValueError, match=r"one distance per word, \[n\]"):
        D.tree_from_distances(np.zeros((2, 2)), ["a", "b"])


def test_long_sentence_needs_no_recursion():
    n = 5000  # deeper than Python's recursion limit
    words = [f"w{i}" for i in range(n)]
    tree = D.tree_from_distances(np.arange(n, dtype=float), words)  # increasing: left-branching
    assert D.brackets(tree) == D.brackets(D.left_branching(words)) == {(0, k) for k in range(2, n)}
    # Canonical: (w0 w1) is split at w0 (2), then word k splits the span of k + 1 words.
    assert np.array_equal(D.distances_from_tree(tree), np.r_[2.0, 1.0, np.arange(3, n + 1, dtype=float)])


# ---------------------------------------------------------------------------
# Distances from a tree, and the round trip
# ---------------------------------------------------------------------------


def test_distances_from_tree_by_hand():
    # [[w0, w1], [w2, w3]]: root span of 4 splits at w2 (4); (w0 w1) splits at w0 (2); w1, w3 alone (1).
    assert D.distances_from_tree([["w0", "w1"], ["w2", "w3"]]).tolist() == [2, 1, 4, 1]
    assert D.distances_from_tree(["w0", ["w1", ["w2", "w3"]]]).tolist() == [4, 3, 2, 1]
    assert D.distances_from_tree("w0").tolist() == [1]
    assert D.distances_from_tree([]).tolist() == []


def test_unreachable_and_non_binary_trees_are_refused():
    with pytest.raises(ValueError, match="cannot produce this node"):
        D.distances_from_tree([["a", "b"], [["c", "d"], "e"]])
    with pytest.raises(ValueError, match="binary tree, found a node with 3 children"):
        D.distances_from_tree(["a", "b", "c"])


distinct_distances = st.integers(1, 40).flatmap(
    lambda n: st.lists(st.floats(-10, 10, allow_nan=False), min_size=n, max_size=n, unique=True))


@settings(max_examples=300, deadline=None)
@given(distinct_distances)
def test_round_trip_distances_tree_distances(values):
    words = [f"w{i}" for i in range(len(values))]
    tree = D.tree_from_distances(values, words)
    canonical = D.distances_from_tree(tree)
    assert D.nested_words(tree) == words
    assert D.tree_from_distances(canonical, words) == tree
    # The canonical distances are a fixed point: tree -> distances -> tree -> the same distances.
    assert np.array_equal(D.distances_from_tree(D.tree_from_distances(canonical, words)), canonical)
    # (The distances themselves need not come back: [w_a, [w_b, rest]] is made by a split at w_a or at
    # w_b alike, and the canonical form always picks w_a.)
    spans = D.brackets(tree, include_root=True)
    # A binary tree over n >= 2 words has n - 1 constituents of >= 2 words.
    assert len(spans) == max(len(words) - 1, 0)


# ---------------------------------------------------------------------------
# The gate -> word alignment
# ---------------------------------------------------------------------------


def test_syntactic_distance_and_word_alignment():
    # Master forget gates [T=5, chunks=2] over `<s> a b c </s>`; 1 - mean per step.
    gates = np.array([[0.0, 1.0], [0.8, 1.0], [0.0, 0.2], [0.6, 1.0], [0.4, 1.0]])
    steps = D.syntactic_distance(gates)
    np.testing.assert_allclose(steps, [0.5, 0.1, 0.9, 0.2, 0.3])
    # Word i's distance is the step whose input is word i: steps 1..3.
    np.testing.assert_allclose(D.word_distances(steps, 3), [0.1, 0.9, 0.2])
    np.testing.assert_allclose(D.word_distances(steps, 3, num_leading=0), [0.5, 0.1, 0.9])
    with pytest.raises(ValueError, match="5 steps cannot hold 1 leading input"):
        D.word_distances(steps, 5)
    assert D.syntactic_distance(np.ones((2, 3, 4))).shape == (2, 3)


def test_gate_alignment_decides_the_tree_by_hand():
    # `<eos> the dog barks <eos>`, one layer, 2 chunks. The step reading "barks" erases most (f~ = [0, 0.2],
    # d = 0.9): "barks" starts the right constituent -> [[the, dog], barks]. Taking the gate of the step
    # that *predicts* each word instead (one step early: .2 .1 .2) splits "the" off first -> [the, [dog, barks]].
    gates = np.array([[0.6, 1.0], [0.8, 1.0], [0.6, 1.0], [0.0, 0.2], [0.8, 1.0]])  # d = .2 .1 .2 .9 .1
    words = ["the", "dog", "barks"]
    steps = D.syntactic_distance(gates)
    np.testing.assert_allclose(D.word_distances(steps, 3), [0.1, 0.2, 0.9])
    assert D.tree_from_distances(D.word_distances(steps, 3), words) == [["the", "dog"], "barks"]
    assert D.tree_from_distances(D.word_distances(steps, 3, num_leading=0), words) == ["the", ["dog", "barks"]]


# ---------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------


def test_baselines_by_hand():
    w = ["a", "b", "c", "d", "e"]
    assert D.right_branching(w) == ["a", ["b", ["c", ["d", "e"]]]]
    assert D.left_branching(w) == [[[["a", "b"], "c"], "d"], "e"]
    assert D.balanced(w) == [[["a", "b"], "c"], ["d", "e"]]  # left half takes the extra word
    assert D.balanced(w[:4]) == [["a", "b"], ["c", "d"]]
    assert D.balanced(w[:3]) == [["a", "b"], "c"]
    for build in (D.right_branching, D.left_branching, D.balanced):
        assert build(["x"]) == "x"
        assert build([]) == []


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 60))
def test_baselines_are_greedy_trees(n):
    words = [f"w{i}" for i in range(n)]
    # Right- and left-branching trees come from decreasing and increasing distances.
    assert D.tree_from_distances(-np.arange(n, dtype=float), words) == D.right_branching(words)
    assert D.tree_from_distances(np.arange(n, dtype=float), words) == D.left_branching(words)
    assert len(D.brackets(D.balanced(words), include_root=True)) == n - 1


# ---------------------------------------------------------------------------
# Trees, nested lists and the release's preprocessing
# ---------------------------------------------------------------------------


def test_release_filter_by_hand():
    tree = parse(
        "(S (`` ``) (NP (NP (DT The) (NN dog)) (, ,) (NP ($ $) (CD 5))) (VP (VBZ barks) (PP (IN at) (NP (-NONE- *T*))"
        " (NP (NNP Mr.) (HYPH -) (NNP X)))) (. .))",
        normalise=False,
    )
    filtered = D.release_filter(tree)
    assert filtered.words == ["The", "dog", "5", "barks", "at", "Mr.", "X"]
    # NP($ 5) loses $ and collapses to the word; the (-NONE-) NP vanishes; PP keeps 3 children.
    assert filtered.tree == [[["The", "dog"], "5"], ["barks", ["at", ["Mr.", "X"]]]]
    assert filtered.dropped_tags == {"``": 1, ",": 1, "$": 1, "-NONE-": 1, "HYPH": 1, ".": 1}
    assert filtered.num_words == 7


def test_release_filter_flat_and_empty():
    assert D.release_filter(parse("(S (NP (DT a) (NN b) (NN c)) (. .))")).tree == ["a", "b", "c"]
    nothing = D.release_filter(parse("(S (. .) (: ;))"))
    assert (nothing.words, nothing.tree, nothing.dropped_tags) == ([], [], {".": 1, ":": 1})
    one = D.release_filter(parse("(NN hello)"))
    assert (one.words, one.tree) == (["hello"], "hello")
    with pytest.raises(ValueError, match=r"line 3: the word 'b' is not under a POS tag"):
        D.release_filter(parse("(S (DT a) b)"), where="line 3")


def test_release_tags_are_the_36_lexical_ptb_tags():
    assert len(D.RELEASE_WORD_TAGS) == 36
    for gone in (".", ",", ":", "``", "''", "-LRB-", "-RRB-", "-NONE-", "$", "#", "HYPH", "NFP"):
        assert gone not in D.RELEASE_WORD_TAGS
    for kept in ("SYM", "LS", "POS", "PRP$", "WP$", "FW", "UH"):
        assert kept in D.RELEASE_WORD_TAGS


def test_release_word_form():
    assert D.release_word_form("Rose") == "rose"
    assert D.release_word_form("1,250.75") == "N,N.N"
    assert D.release_word_form("B12x3") == "bNxN"


nested_trees = st.recursive(
    st.sampled_from(["a", "b", "c", "the", "dog"]),
    lambda children: st.lists(children, min_size=2, max_size=4),
    max_leaves=25,
)


@settings(max_examples=200, deadline=None)
@given(nested_trees)
def test_nested_tree_round_trip(tree):
    assert D.nested_from_tree(D.tree_from_nested(tree)) == tree
    assert D.nested_from_tree(D.tree_from_nested(tree, tag=None)) == tree
    assert D.tree_from_nested(tree).leaves() == D.nested_words(tree)


def test_tree_from_nested_by_hand():
    assert D.tree_from_nested([["a", "b"], "c"]).to_string() == "(X (X (XX a) (XX b)) (XX c))"
    assert D.tree_from_nested("a") == Tree("XX", ["a"])
    assert D.nested_from_tree(parse("(S (S (VP (VB go))) (. .))")) == ["go", "."]
    with pytest.raises(ValueError, match="no words"):
        D.tree_from_nested([])
