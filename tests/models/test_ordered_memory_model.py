"""tgjax.models.ordered_memory: the released classifier heads recomputed by hand from the layer's output,
padding invariance, dropout, and trees / spans read off the pointers."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.models.ordered_memory import (
    OMClassifierConfig,
    OrderedMemoryClassifier,
    pair_features,
    pointer_trees,
    remove_leaves,
    tree_spans,
)
from tgjax.ops.ordered_memory import pointer_tree


# Jitted calls: an eager call recompiles the scan every time (slow on a shared CPU); these compile once per shape.
@functools.partial(nnx.jit, static_argnames=("n_slots",))
def forward(model, inputs, valid, key=None, n_slots=None):
    return model(inputs, valid, dropout_key=key, n_slots=n_slots)


@nnx.jit
def encode_alone(layer, x, valid):
    return layer(x, valid)


def small(kind: str, **overrides) -> OMClassifierConfig:
    base = dict(kind=kind, vocab_size=12, num_classes=7 if kind == "pair" else 10, pad_id=11 if kind == "pair" else 0,
                embedding_size=6, slot_size=8, n_slots=4, mlp_hidden_size=5 if kind == "pair" else 0)
    return OMClassifierConfig(**{**base, **overrides})


def test_pair_features_are_u_v_product_and_absolute_difference():
    u = np.array([[1.0, -2.0], [0.5, 3.0]])
    v = np.array([[4.0, 1.0], [-0.5, 3.0]])
    want = np.array([[1, -2, 4, 1, 4, -2, 3, 3], [0.5, 3, -0.5, 3, -0.25, 9, 1, 0]], float)
    np.testing.assert_array_equal(np.asarray(pair_features(u, v)), want)


def _elu(z):
    return np.where(z > 0, z, np.expm1(np.minimum(z, 0)))


def test_siamese_head_equals_the_formula_on_separately_encoded_sides():
    model = OrderedMemoryClassifier(small("pair"), rngs=nnx.Rngs(3))
    rng = np.random.default_rng(0)
    left = rng.integers(0, 11, size=(3, 5)).astype(np.int32)
    right = rng.integers(0, 11, size=(3, 5)).astype(np.int32)
    left_valid = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], bool)
    right_valid = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], bool)
    logits, (left_pointer, right_pointer) = forward(model, (left, right), (left_valid, right_valid))
    # Each side alone through the layer module, then the release's head written out in NumPy.
    embed = np.asarray(model.embedding[...])
    u = np.asarray(encode_alone(model.encoder, jnp.asarray(embed[left]), left_valid).final_output, np.float64)
    v = np.asarray(encode_alone(model.encoder, jnp.asarray(embed[right]), right_valid).final_output, np.float64)
    features = np.concatenate([u, v, u * v, np.abs(u - v)], axis=1)
    hidden = _elu(features @ np.asarray(model.w_hidden[...]) + np.asarray(model.b_hidden[...]))
    want = hidden @ np.asarray(model.w_out[...]) + np.asarray(model.b_out[...])
    assert logits.shape == (3, 7)
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-4, atol=1e-5)
    # The premise's pointers are its own: those of encoding it alone.
    alone = encode_alone(model.encoder, jnp.asarray(embed[left]), left_valid).pointer
    np.testing.assert_allclose(np.asarray(left_pointer), np.asarray(alone), atol=1e-6)
    assert right_pointer.shape == (3, 5, 4)


def test_sequence_head_is_a_linear_map_of_the_root_output_at_the_last_token():
    model = OrderedMemoryClassifier(small("sequence"), rngs=nnx.Rngs(1))
    inputs = np.array([[0, 0, 3, 5, 19 % 12], [4, 2, 7, 1, 9]], np.int32)
    valid = inputs != 0
    logits, pointer = forward(model, inputs, valid)
    embed = np.asarray(model.embedding[...])
    root = np.asarray(encode_alone(model.encoder, jnp.asarray(embed[inputs]), valid).final_output)
    want = root @ np.asarray(model.w_out[...]) + np.asarray(model.b_out[...])
    np.testing.assert_allclose(np.asarray(logits), want, rtol=1e-5, atol=1e-6)
    assert pointer.shape == (2, 5, 4)


def test_left_padding_changes_nothing_in_the_thesis_form_and_something_in_the_release_form():
    tokens = np.array([[3, 5, 2, 7]], np.int32)
    padded = np.array([[0, 0, 3, 5, 2, 7]], np.int32)
    for release, same in ((False, True), (True, False)):
        model = OrderedMemoryClassifier(small("sequence", release_switches=release), rngs=nnx.Rngs(2))
        a, _ = forward(model, tokens, tokens != 0)
        b, _ = forward(model, padded, padded != 0)
        assert np.allclose(np.asarray(a), np.asarray(b), atol=1e-5) == same, release


def test_dropout_only_with_a_key_and_reproducible_per_key():
    model = OrderedMemoryClassifier(small("pair"), rngs=nnx.Rngs(0))
    x = np.array([[1, 2, 3, 11]], np.int32)
    args = ((x, x[:, ::-1].copy()), (x != 11, x[:, ::-1] != 11))
    plain = np.asarray(forward(model, *args)[0])
    np.testing.assert_array_equal(plain, np.asarray(forward(model, *args)[0]))
    one = np.asarray(forward(model, *args, jax.random.key(5))[0])
    np.testing.assert_array_equal(one, np.asarray(forward(model, *args, jax.random.key(5))[0]))
    assert not np.allclose(one, plain)
    assert not np.allclose(one, np.asarray(forward(model, *args, jax.random.key(6))[0]))


def test_slot_counts_training_and_test():
    model = OrderedMemoryClassifier(small("sequence", n_slots=3, test_n_slots=7), rngs=nnx.Rngs(0))
    x = np.array([[1, 2, 3]], np.int32)
    assert forward(model, x, x != 0)[1].shape == (1, 3, 7)  # no key: evaluation, test_n_slots
    assert forward(model, x, x != 0, jax.random.key(0))[1].shape == (1, 3, 3)
    assert forward(model, x, x != 0, n_slots=5)[1].shape == (1, 3, 5)


def test_initialisation_as_the_release():
    model = OrderedMemoryClassifier(small("pair", embedding_init_range=0.1), rngs=nnx.Rngs(0))
    table = np.asarray(model.embedding[...])
    assert np.all(table[11] == 0.0)  # padding_idx
    assert np.abs(table).max() <= 0.1 and np.abs(table).max() > 0.05
    bound = 1 / np.sqrt(4 * 8)  # nn.Linear(4D -> H): U(+-1/sqrt(fan_in))
    assert np.abs(np.asarray(model.w_hidden[...])).max() <= bound
    normal = OrderedMemoryClassifier(small("sequence"), rngs=nnx.Rngs(0))
    assert np.asarray(normal.embedding[...])[0].tolist() == [0.0] * 6
    assert np.abs(np.asarray(normal.embedding[...])).max() > 1.0  # N(0, 1), not a narrow uniform


@pytest.mark.parametrize("bad, message", [
    (dict(kind="tree"), "kind must be one of"),
    (dict(kind="pair", mlp_hidden_size=0), "mlp_hidden_size"),
    (dict(n_slots=0), "n_slots must be a positive int"),
    (dict(pad_id=12), "pad_id 12"),
    (dict(cell_dropout=1.0), "cell_dropout"),
])
def test_bad_configs_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        small(bad.pop("kind", "sequence"), **bad)


def test_trees_and_spans_from_hand_worked_pointers():
    # released-code.md §3.1's test vector: y_3 = N (the root) gives ((a b) c); y_3 = N - 1 gives (a (b c)).
    N = 4
    pointer = np.zeros((2, 3, N))
    pointer[:, 0, N - 1] = pointer[:, 1, N - 1] = 1.0
    pointer[0, 2, N - 1] = 1.0
    pointer[1, 2, N - 2] = 1.0
    valid = np.ones((2, 3), bool)
    trees = pointer_trees(pointer, valid, words=[list("abc"), list("abc")])
    assert trees == [[["a", "b"], "c"], ["a", ["b", "c"]]]
    assert tree_spans(pointer_trees(pointer, valid)[0]) == {(0, 2), (0, 3)}
    assert tree_spans(pointer_trees(pointer, valid)[1]) == {(1, 3), (0, 3)}
    # Padded steps are skipped: a left-padded row reads the same tree.
    padded = np.concatenate([np.zeros((2, 2, N)), pointer], axis=1)
    padded_valid = np.concatenate([np.zeros((2, 2), bool), valid], axis=1)
    assert pointer_trees(padded, padded_valid) == pointer_trees(pointer, valid)
    assert tree_spans(7) == set() and tree_spans([]) == set()


def _spans_by_recursion(tree, start=0):
    if not isinstance(tree, list):
        return set(), start + 1
    spans, position = set(), start
    for child in tree:
        inner, position = _spans_by_recursion(child, position)
        spans |= inner
    if position - start >= 2:
        spans.add((start, position))
    return spans, position


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=25))
def test_tree_spans_match_a_recursive_count(distances):
    tree = pointer_tree([6] + distances[1:])
    spans, length = _spans_by_recursion(tree)
    assert tree_spans(tree) == spans
    assert len(spans) == max(length - 1, 0)  # a binary tree over n leaves has n - 1 nodes


def test_remove_leaves_by_hand():
    # `( d ( and e ) )` read as 7 tokens; the parentheses (0, 2, 5, 6) leave before scoring.
    parentheses = {0, 2, 5, 6}
    left_branching = [[[[[[0, 1], 2], 3], 4], 5], 6]
    assert remove_leaves(left_branching, parentheses) == [[1, 3], 4]
    assert tree_spans(remove_leaves(left_branching, parentheses)) == {(0, 2), (0, 3)}  # vs gold (0, 3), (1, 3)
    right_branching = [0, [1, [2, [3, [4, [5, 6]]]]]]
    assert remove_leaves(right_branching, parentheses) == [1, [3, 4]]
    assert remove_leaves([[0, 2], [1, [5, 4]]], parentheses) == [1, 4]  # emptied nodes vanish, unary collapse
    assert remove_leaves([0, [2, 5]], {0, 2, 5}) is None
    assert remove_leaves(3, set()) == 3 and remove_leaves(3, {3}) is None


def _kept_spans_by_oracle(tree, drop):
    """Spans over the kept leaves, from the original tree: each node's kept leaves, ranked."""
    kept_order = []

    def leaves(node):
        return [node] if not isinstance(node, list) else [x for child in node for x in leaves(child)]

    kept_order = [leaf for leaf in leaves(tree) if leaf not in drop]
    rank = {leaf: i for i, leaf in enumerate(kept_order)}
    spans = set()

    def walk(node):
        if isinstance(node, list):
            kept = [rank[x] for x in leaves(node) if x not in drop]
            if len(kept) >= 2:
                spans.add((min(kept), max(kept) + 1))
            for child in node:
                walk(child)

    walk(tree)
    return spans


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=25), st.sets(st.integers(0, 24)))
def test_remove_leaves_keeps_every_constituent_over_the_kept_words(distances, drop):
    tree = pointer_tree([6] + distances[1:])
    pruned = remove_leaves(tree, drop)
    assert tree_spans(pruned if pruned is not None else []) == _kept_spans_by_oracle(tree, drop)
    assert remove_leaves(tree, set()) == tree
