"""Pushdown data: hand-worked tensors for "The dog is happy", replay of gold labels, the compact tape, bad input."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from tests.strategies import random_trees
from tgjax.data import pushdown as pd
from tgjax.nn.pushdown_attention import stack_tape_from_nodes
from tgjax.syntax import stack_tape as stt
from tgjax.syntax.trees import Tree


def pt(tag, word):
    return Tree(tag, [word])


THE_DOG_IS_HAPPY = Tree("S", [Tree("NP", [pt("DT", "The"), pt("NN", "dog")]),
                              Tree("VP", [pt("VBZ", "is"), Tree("ADJP", [pt("JJ", "happy")])])])


class PieceVocab:
    """A stand-in vocabulary: words of more than `split` characters become two pieces."""

    bos_id, eos_id = 1, 2

    def __init__(self, split: int | None = None):
        self.split = split
        self.ids: dict[str, int] = {}

    def _id(self, piece):
        return self.ids.setdefault(piece, 10 + len(self.ids))

    def encode_with_alignment(self, words):
        ids, source = [], []
        for i, word in enumerate(words):
            pieces = [word] if self.split is None or len(word) <= self.split else [word[:self.split], word[self.split:]]
            ids += [self._id(p) for p in pieces]
            source += [i] * len(pieces)
        return np.asarray(ids, np.int32), np.asarray(source, np.int32)


def test_the_dog_is_happy_hand_worked():
    """The release's test vector (released-code.md §1.2): targets [1, 1, 3, 2, 0], tape rows 0/0/011/011/02222."""
    vocab = PieceVocab()
    sentence = pd.encode_tree(THE_DOG_IS_HAPPY, vocab, name="dog")
    the, dog, is_, happy = (vocab.ids[w] for w in ("The", "dog", "is", "happy"))
    np.testing.assert_array_equal(sentence.tokens, [1, the, dog, is_, happy, 2])
    np.testing.assert_array_equal(sentence.attach, [0, 1, 1, 3, 2, 0])
    # Nodes (The dog), (S), (is happy), (<s> ...), (S <eos>), by (end, start).
    np.testing.assert_array_equal(sentence.node_start, [1, 1, 3, 0, 1])
    np.testing.assert_array_equal(sentence.node_end, [2, 4, 4, 5, 5])
    batch, clipped = pd.make_batch([sentence, None], 6, num_depths=50, dense=True)
    np.testing.assert_array_equal(batch["inputs"][0], [1, the, dog, is_, happy, 0])
    np.testing.assert_array_equal(batch["targets"][0], [the, dog, is_, happy, 2, 0])
    np.testing.assert_array_equal(batch["attach_targets"][0, :5], [1, 1, 3, 2, 0])
    np.testing.assert_array_equal(batch["weights"][0], [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(batch["attach_weights"][0], [1, 1, 1, 1, 1, 0])
    want_tape = np.array([[0, 0, 0, 0, 0],
                          [0, 0, 0, 0, 0],
                          [0, 1, 1, 0, 0],
                          [0, 1, 1, 0, 0],
                          [0, 2, 2, 2, 2]])
    np.testing.assert_array_equal(batch["tape"][0, :5, :5], want_tape)
    assert (batch["tape"][1] == 0).all() and (batch["weights"][1] == 0).all() and clipped == 0
    # The device rebuild from the compact node spans.
    rebuilt = stack_tape_from_nodes(jnp.asarray(batch["node_start"]), jnp.asarray(batch["node_end"]), 6)
    np.testing.assert_array_equal(np.asarray(rebuilt)[0, :5, :5], want_tape)
    assert (np.asarray(rebuilt)[1] == 0).all()  # an idle row has no nodes
    # (Rows past the sentence, padding, may differ: nodes ending at <eos> reach them; no query reads them.)


def test_subwords_form_right_branching_subtrees():
    """happy -> hap + py: (hap py) is one constituent under [is [hap py]] (Appendix C)."""
    sentence = pd.encode_tree(THE_DOG_IS_HAPPY, PieceVocab(split=3), name="dog")
    assert len(sentence) == 7
    # stack_tape's own example [0, 0, 2, 3, 1] for these pieces, shifted by <s>, then <eos> -> <s>.
    np.testing.assert_array_equal(sentence.attach, [0, 1, 1, 3, 4, 2, 0])
    np.testing.assert_array_equal(sentence.depths[5, 1:6], [2, 2, 2, 3, 3])


@settings(max_examples=40, deadline=None)
@given(tree=random_trees(max_depth=4, max_children=4))
def test_gold_labels_replay_to_the_tree(tree):
    """Replaying the labels rebuilds (<s>, (binarised S over pieces, <eos>)); the compact tape equals the stack's."""
    vocab = PieceVocab(split=2)
    sentence = pd.encode_tree(tree, vocab, name="t")
    _, word_index = vocab.encode_with_alignment(tree.leaves())
    expected = stt.expand_subwords(stt.tree_to_bracketing(tree, nary="right"), word_index)
    n = len(sentence)
    depths, forest = stt.replay(sentence.attach)
    assert len(forest) == 1
    assert stt.bracketing_spans(forest) == {(s + 1, e + 1) for s, e in stt.bracketing_spans(expected)} | {
        (1, n - 1), (0, n - 1)}
    np.testing.assert_array_equal(sentence.depths, depths)
    np.testing.assert_array_equal(sentence.attach, stt.window_stack_tape([expected], root=True, eos=True).attach)
    assert sentence.num_binarised == sum(len(t.children) > 2 for t in _nodes(tree))
    length = 1 << max(n - 2, 1).bit_length()  # a power-of-two bucket: few compiles over the examples
    batch, _ = pd.make_batch([sentence], length, dense=True, num_depths=1000)
    rebuilt = stack_tape_from_nodes(jnp.asarray(batch["node_start"]), jnp.asarray(batch["node_end"]), length)
    np.testing.assert_array_equal(np.asarray(rebuilt)[0, : n - 1, : n - 1], depths[: n - 1, : n - 1])


def _nodes(tree):
    out = [tree]
    for child in tree.children:
        if isinstance(child, Tree):
            out += _nodes(child)
    return out


def test_binarised_and_clipped_counts_reach_the_report():
    flat = Tree("NP", [pt("DT", "the"), pt("JJ", "big"), pt("JJ", "red"), pt("NN", "dog")])  # 4-ary: one node
    deep = Tree("S", [pt("A", "a"), Tree("S", [pt("B", "b"), Tree("S", [pt("C", "c"), pt("D", "d")])])])
    sentences, report = pd.encode_trees([flat, deep], PieceVocab(), source="toy")
    assert report.num_binarised == 1 and sentences[0].num_binarised == 1
    # flat -> (the (big (red dog))): same tape as deep. Read rows 0..4 (<s> a b c d): row 4 = [0, 1, 2, 3, 3].
    np.testing.assert_array_equal(sentences[1].depths[4, :5], [0, 1, 2, 3, 3])
    batches = pd.PushdownBatches(sentences, seq_len=6, batch_size=2, num_depths=3, report=report)
    for _ in batches.epoch(0):
        pass
    # Per sentence, entries >= 3 among the read rows: row 4's two 3s.
    assert report.num_clipped_entries == 4
    assert "4 tape entries clipped" in report.summary() and "1 n-ary" in report.summary()


def test_bad_input_names_the_sentence():
    with pytest.raises(ValueError, match="s7: empty sentence"):
        pd.encode_bracketing([], 0, bos_id=1, eos_id=2, name="s7")
    with pytest.raises(ValueError, match="s8: the tree has 2 words but the sentence has 3 tokens"):
        pd.encode_bracketing([5, 6, 7], (0, 1), bos_id=1, eos_id=2, name="s8")
    with pytest.raises(ValueError, match="s9: the tokens do not match the tree's 3 words"):
        pd.encode_bracketing([5, 6, 7], ((0, 1), 2), bos_id=1, eos_id=2, word_index=np.array([0, 1, 1]), name="s9")
    with pytest.raises(ValueError, match="s10: attachment 0 for token 2"):
        pd.sentence_from_attachments(np.array([1, 5, 6]), np.array([0, 0, 0]), name="s10")
    long = pd.encode_tree(THE_DOG_IS_HAPPY, PieceVocab())
    short = pd.encode_tree(Tree("S", [pt("A", "a")]), PieceVocab())
    with pytest.raises(ValueError, match="corpus: sentence 0 has 4 tokens; seq_len=4"):
        pd.PushdownBatches([long, short], seq_len=4, batch_size=1, num_depths=4)
    batches = pd.PushdownBatches([long, short], seq_len=4, batch_size=1, num_depths=4, on_too_long="skip")
    assert batches.report.num_skipped_too_long == 1 and len(batches) == 1


def test_pushdown_batches_walk_the_training_epochs_order():
    """`PushdownBatches` and the trainer's `train_epochs` share one order per (seed, epoch)."""
    from tgjax.data.batching import EpochBatches

    trees = [THE_DOG_IS_HAPPY, Tree("S", [pt("A", "a")]), Tree("S", [pt("A", "b"), pt("B", "c")])] * 3
    sentences, _ = pd.encode_trees(trees, PieceVocab())
    batches = pd.PushdownBatches(sentences, seq_len=8, batch_size=2, num_depths=50, seed=4)
    trainer = EpochBatches(pd.train_epochs(sentences, seq_len=8, batch_size=2, seed=4))
    for epoch in range(2):
        plan = pd.epoch_batches(len(sentences), 2, 4, epoch)
        assert sorted(np.concatenate(plan).tolist()) == list(range(len(sentences)))
        walked = list(batches.epoch(epoch))
        assert len(walked) == len(plan) == len(batches) == 5
        for batch in walked:
            trained = next(trainer)
            assert all(np.array_equal(batch[k], trained[k]) for k in trained)
