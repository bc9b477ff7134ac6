"""Pushdown stack tapes: the paper's worked examples, the release's labels, and replay properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree


def pt(tag: str, word: str) -> Tree:
    return Tree(tag, [word])


# [[The dog] [is happy]], with pre-terminals and a unary ADJP to collapse.
THE_DOG_IS_HAPPY = Tree(
    "S",
    [
        Tree("NP", [pt("DT", "The"), pt("NN", "dog")]),
        Tree("VP", [pt("VBZ", "is"), Tree("ADJP", [pt("JJ", "happy")])]),
    ],
)


# ---------------------------------------------------------------------------
# Hand-worked examples.


def test_paper_example_the_dog_is_happy():
    """Fig. 2 / §3.1: tape [1, 1, 0] for "[The dog] is", then [2, 2, 2, 2] once happy attaches to dog."""
    assert stt.tree_to_bracketing(THE_DOG_IS_HAPPY) == ((0, 1), (2, 3))
    tape = stt.stack_tape(THE_DOG_IS_HAPPY)
    np.testing.assert_array_equal(tape.attach, [0, 0, 2, 1])  # happy (3) -> dog (1)
    np.testing.assert_array_equal(tape.depths[2, :3], [1, 1, 0])  # after "is"
    np.testing.assert_array_equal(tape.depths[3], [2, 2, 2, 2])  # after "happy"
    np.testing.assert_array_equal(
        tape.depths, [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [2, 2, 2, 2]]
    )
    assert tape.depths.dtype == np.int32 and tape.attach.dtype == np.int32


def test_paper_example_stale_tape_in_the_park():
    """§3.4: in [[The dog] [in [the park]]], "in" sees [1, 1, 0] and "park" sees [2, 2, 2, ...]."""
    tape = stt.stack_tape(((0, 1), (2, (3, 4))))
    np.testing.assert_array_equal(tape.depths[2, :3], [1, 1, 0])
    np.testing.assert_array_equal(tape.depths[4], [2, 2, 2, 3, 3])
    np.testing.assert_array_equal(tape.attach, [0, 0, 2, 3, 1])


def test_reading_note_step_by_step():
    """The reading note's walk-through of Algorithm 1, one step at a time."""
    tape = stt.IncrementalStackTape()
    np.testing.assert_array_equal(tape.step(0), [0])  # The: shift
    np.testing.assert_array_equal(tape.step(0), [1, 1])  # dog: reduce with The
    np.testing.assert_array_equal(tape.step(2), [1, 1, 0])  # is: shift
    np.testing.assert_array_equal(tape.candidates(), [1, 2, 3])  # [The dog], [is], or shift
    np.testing.assert_array_equal(tape.step(1), [2, 2, 2, 2])  # happy -> dog
    assert tape.forest == [((0, 1), (2, 3))]


@pytest.mark.parametrize(
    "tree, labels",
    [
        # The examples documented in the authors' release (0-based labels).
        (((0, 1), (2, 3)), [0, 0, 2, 1]),
        ((0, (1, (2, 3))), [0, 1, 2, 0]),
        ((((0, 1), 2), 3), [0, 0, 1, 2]),
        (0, [0]),
    ],
)
def test_release_examples(tree, labels):
    np.testing.assert_array_equal(stt.attachments(tree), labels)


def test_sentence_with_root_and_eos_matches_release_labels():
    """<s> The man likes apples <eos>: the release labels 0, 1, 1, 3, 2, 0 (<s> plays ROOT)."""
    window = stt.window_stack_tape([((0, 1), (2, 3))], root=True, eos=True)
    np.testing.assert_array_equal(window.attach, [0, 1, 1, 3, 2, 0])
    np.testing.assert_array_equal(window.roles, [1, 0, 0, 0, 0, 2])
    np.testing.assert_array_equal(window.token_index, [-1, 0, 1, 2, 3, -1])
    # The EOS reduces twice, (S, EOS) then (<s>, ...): the release's depths.
    np.testing.assert_array_equal(window.depths[-1], [1, 4, 4, 4, 4, 2])


def test_window_root_attachments_and_frozen_sentences():
    sentences = [THE_DOG_IS_HAPPY, (0, (1, 2)), 0]
    window = stt.window_stack_tape(sentences, root=True)
    roots = np.flatnonzero(window.roles == stt.ROLE_ROOT)
    np.testing.assert_array_equal(roots, [0, 5, 9])
    np.testing.assert_array_equal(window.attach[roots], roots)  # ROOT only shifts
    last_tokens = np.r_[roots[1:], len(window)] - 1
    np.testing.assert_array_equal(window.attach[last_tokens], roots)  # final word -> its ROOT
    np.testing.assert_array_equal(window.sentence_ids, [0] * 5 + [1] * 4 + [2] * 2)
    # Sentence 0 ends at position 4; its depths never change afterwards.
    final = window.depths[4, :5]
    np.testing.assert_array_equal(final, [1, 3, 3, 3, 3])
    assert (window.depths[5:, :5] == final).all()
    # Replaying the labels gives one (ROOT, S) tree per sentence.
    depths, forest = stt.replay(window.attach)
    np.testing.assert_array_equal(depths, window.depths)
    assert forest == [(0, ((1, 2), (3, 4))), (5, (6, (7, 8))), (9, 10)]


def test_window_without_root_keeps_sentences_apart():
    window = stt.window_stack_tape([((0, 1), 2), (0, 1)], root=False)
    np.testing.assert_array_equal(window.attach, [0, 0, 1, 3, 3])
    np.testing.assert_array_equal(window.depths[-1], [2, 2, 1, 1, 1])


def test_subwords_right_branching_appendix_c():
    """A word's pieces form (ab, (ra, (ca, dabra))): they shift, and the last piece reduces them all."""
    word_index = np.array([0, 1, 1, 1, 1])  # "magic abracadabra"
    assert stt.expand_subwords((0, 1), word_index) == (0, (1, (2, (3, 4))))
    np.testing.assert_array_equal(stt.stack_tape((0, 1), word_index=word_index).attach, [0, 1, 2, 3, 0])
    left = stt.expand_subwords((0, 1), word_index, branching="left")
    assert left == (0, (((1, 2), 3), 4))
    # "The dog is hap py": happy's pieces are one constituent under [is happy].
    tape = stt.stack_tape(THE_DOG_IS_HAPPY, word_index=np.array([0, 1, 2, 3, 3]))
    np.testing.assert_array_equal(tape.attach, [0, 0, 2, 3, 1])
    np.testing.assert_array_equal(tape.depths[-1], [2, 2, 2, 3, 3])


def test_tree_conversion_collapses_unaries_and_folds_nary():
    tree = Tree("S", [Tree("NP", [pt("NNS", "dogs")]), Tree("VP", [pt("VBP", "bark")])])
    assert stt.tree_to_bracketing(tree) == (0, 1)
    flat = Tree("NP", [pt("DT", "the"), pt("JJ", "big"), pt("JJ", "red"), pt("NN", "dog")])
    with pytest.raises(ValueError, match="binarised"):
        stt.tree_to_bracketing(flat)
    assert stt.tree_to_bracketing(flat, nary="right") == (0, (1, (2, 3)))
    assert stt.tree_to_bracketing(flat, nary="left") == (((0, 1), 2), 3)
    with pytest.raises(ValueError, match="no children"):
        stt.tree_to_bracketing(Tree("S", [Tree("NP", [])]))


def test_bad_labels_and_maps_raise():
    with pytest.raises(ValueError, match="attachment 0 for token 2"):
        stt.replay(np.array([0, 0, 0]))  # 0 was merged into [0 1]: not a stack element's right end
    with pytest.raises(ValueError, match="attachment 3 for token 1"):
        stt.replay(np.array([0, 3]))
    with pytest.raises(ValueError, match="word_index"):
        stt.expand_subwords((0, 1), np.array([0, 2]))
    with pytest.raises(ValueError, match="covers 3 words"):
        stt.expand_subwords((0, 1), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="leaves must be"):
        stt.attachments((1, 0))


def test_fill_value_and_deep_tree():
    n = 1500  # deeper than Python's recursion limit would allow recursively
    tree: stt.Bracketing = n - 1
    for i in range(n - 2, -1, -1):
        tree = (i, tree)
    tape = stt.stack_tape(tree, fill_value=-1)
    assert tape.attach[-1] == 0 and (tape.attach[:-1] == np.arange(n - 1)).all()
    np.testing.assert_array_equal(tape.depths[-1], np.r_[np.arange(1, n), n - 1])
    assert (tape.depths[np.triu_indices(n, 1)] == -1).all()
    assert (tape.depths[:-1][np.tril_indices(n - 1)] == 0).all()


# ---------------------------------------------------------------------------
# Properties over random binary trees.


@st.composite
def binary_trees(draw, max_leaves: int = 24, offset: int = 0):
    n = draw(st.integers(1, max_leaves))

    def build(lo: int, hi: int) -> stt.Bracketing:
        if lo == hi:
            return lo
        mid = draw(st.integers(lo, hi - 1))
        return (build(lo, mid), build(mid + 1, hi))

    return build(offset, offset + n - 1)


@st.composite
def forests(draw):
    trees, offset = [], 0
    for _ in range(draw(st.integers(1, 4))):
        tree = draw(binary_trees(max_leaves=10, offset=offset))
        trees.append(tree)
        offset += _count(tree)
    return trees


def _count(tree) -> int:
    return 1 if not isinstance(tree, tuple) else _count(tree[0]) + _count(tree[1])


def _oracle_depths(tree, n: int) -> np.ndarray:
    """Depth by definition: nodes containing j whose last token is <= k."""
    depths = np.zeros((n, n), dtype=np.int64)

    def visit(node):
        if not isinstance(node, tuple):
            return node, node
        (s, _), (_, e) = visit(node[0]), visit(node[1])
        for k in range(e, n):
            depths[k, s : e + 1] += 1
        return s, e

    for t in tree if isinstance(tree, list) else [tree]:
        visit(t)
    return depths


@settings(max_examples=150, deadline=None)
@given(binary_trees())
def test_replay_inverts_labels(tree):
    tape = stt.stack_tape(tree)
    n = len(tape)
    depths, forest = stt.replay(tape.attach)
    assert forest == [tree]
    assert stt.bracketing_spans(forest) == stt.bracketing_spans(tree)
    np.testing.assert_array_equal(depths, tape.depths)
    np.testing.assert_array_equal(tape.depths, _oracle_depths(tree, n))
    # The label only depends on the tree through its spans.
    assert stt.bracketing_from_spans(n, sorted(stt.bracketing_spans(tree))) == tree


@settings(max_examples=100, deadline=None)
@given(forests())
def test_forest_labels_replay_and_candidates(forest):
    attach = stt.attachments(forest)
    depths, rebuilt = stt.replay(attach, fill_value=-1)
    assert rebuilt == forest
    np.testing.assert_array_equal(depths, stt.depth_matrix(forest, fill_value=-1))
    np.testing.assert_array_equal(stt.depth_matrix(forest), _oracle_depths(forest, len(attach)))
    # The candidate mask equals the live stack before each step, and the gold label is in it.
    mask = stt.attachment_candidates(attach)
    tape = stt.IncrementalStackTape(capacity=1)
    for k, r in enumerate(attach):
        np.testing.assert_array_equal(np.flatnonzero(mask[k]), tape.candidates())
        assert mask[k, r]
        tape.step(r)


@settings(max_examples=60, deadline=None)
@given(binary_trees(max_leaves=8), st.data())
def test_subword_expansion_replays(tree, data):
    n_words = _count(tree)
    pieces = data.draw(st.lists(st.integers(1, 3), min_size=n_words, max_size=n_words))
    word_index = np.repeat(np.arange(n_words), pieces)
    tokens_tree = stt.expand_subwords(tree, word_index)
    tape = stt.stack_tape(tree, word_index=word_index)
    depths, forest = stt.replay(tape.attach)
    assert forest == [tokens_tree]
    np.testing.assert_array_equal(depths, tape.depths)
    # Every word's pieces but the last only shift (right-branching).
    last_piece = np.r_[word_index[1:] != word_index[:-1], True]
    assert (tape.attach[~last_piece] == np.flatnonzero(~last_piece)).all()
