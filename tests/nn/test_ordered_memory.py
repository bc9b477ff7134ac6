"""tgjax.nn.ordered_memory: the NNX Ordered Memory layer against the float64 oracle, dropout modes,
slot count at call time, and its Linen bridge."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.ops.om_oracle import om_oracle
from tgjax.nn.ordered_memory import OrderedMemory
from tgjax.ops.ordered_memory import RELEASE, pointer_distances, pointer_tree


def oracle_params(layer):
    return {name: np.asarray(value, np.float64) for name, value in layer.parameters()._asdict().items()}


@pytest.mark.parametrize("options", [{}, RELEASE], ids=["thesis", "release"])
def test_layer_matches_the_equations(options):
    rng = np.random.default_rng(0)
    layer = OrderedMemory(3, 6, 5, rngs=nnx.Rngs(0), **options)
    assert hasattr(layer, "ln_q_scale") == bool(options)  # q/k LayerNorms exist only for the release
    x = rng.normal(size=(2, 7, 3)).astype(np.float32)
    valid = np.array([[1] * 7, [1, 1, 1, 1, 0, 0, 0]], bool)
    out = layer(jnp.asarray(x), valid)
    want = om_oracle(x, valid, oracle_params(layer), 5, **options)
    for got, expected in zip(out[:5], want):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-3, atol=1e-4)
    # The sequence representation is the root slot at the last real token.
    np.testing.assert_allclose(np.asarray(out.final_output)[1], np.asarray(out.outputs)[1, 3], rtol=1e-6)
    assert out.outputs.shape == (2, 7, 6) and out.pointer.shape == (2, 7, 5)
    trees = [pointer_tree(d) for d in pointer_distances(out.pointer, valid)]
    assert len(trees) == 2 and trees[1] != []


def test_slot_count_at_call_time_and_release_initialisation():
    layer = OrderedMemory(4, 8, 3, rngs=nnx.Rngs(1))
    bound = 1 / np.sqrt(2 * 8)
    assert np.all(np.abs(np.asarray(layer.w_1[...])) <= bound) and np.asarray(layer.w_1[...]).std() > bound / 4
    x = jnp.asarray(np.random.default_rng(1).normal(size=(1, 5, 4)), jnp.float32)
    assert layer(x).pointer.shape == (1, 5, 3)
    assert layer(x, n_slots=6).pointer.shape == (1, 5, 6)  # no parameter depends on N


def test_dropout_follows_train_and_eval_modes():
    layer = OrderedMemory(3, 4, 4, rngs=nnx.Rngs(0, dropout=1), attention_dropout=0.3, cell_dropout=0.3)
    x = jnp.asarray(np.random.default_rng(2).normal(size=(2, 5, 3)), jnp.float32)
    first, second = layer(x).outputs, layer(x).outputs
    assert not np.allclose(np.asarray(first), np.asarray(second))  # a fresh mask per call
    clean = layer(x, deterministic=True).outputs
    layer.eval()
    np.testing.assert_allclose(np.asarray(layer(x).outputs), np.asarray(clean), rtol=1e-6)
    want = om_oracle(np.asarray(x), np.ones((2, 5), bool), oracle_params(layer), 4)
    np.testing.assert_allclose(np.asarray(clean), want[0], rtol=1e-3, atol=1e-4)


def test_gradients_reach_every_parameter():
    layer = OrderedMemory(3, 4, 4, rngs=nnx.Rngs(3), **RELEASE)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(2, 6, 3)), jnp.float32)

    def loss(layer):
        return jnp.sum(jnp.sin(layer(x).final_output))

    grads = nnx.grad(loss)(layer)
    for path, g in nnx.to_flat_state(grads):
        g = np.asarray(g[...] if hasattr(g, "__getitem__") else g)
        assert np.all(np.isfinite(g)), path
        if path[-1] == "b_score":  # one bias on every slot's score: softmax does not see it
            assert np.all(np.abs(g) < 1e-5), path
        else:
            assert np.any(np.abs(g) > 1e-6), path


def test_usable_from_linen_through_the_nnx_bridge():
    from flax.nnx import bridge

    linen_layer = bridge.to_linen(OrderedMemory, 4, 6, 5)
    x = jnp.asarray(np.random.default_rng(4).normal(size=(2, 5, 4)), jnp.float32)
    variables = linen_layer.init(jax.random.key(0), x)
    got = linen_layer.apply(variables, x)

    layer = OrderedMemory(4, 6, 5, rngs=nnx.Rngs(9))
    for name, value in variables["params"].items():
        getattr(layer, name)[...] = value.value if hasattr(value, "value") else value
    want = layer(x)
    np.testing.assert_allclose(np.asarray(got.outputs), np.asarray(want.outputs), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got.pointer), np.asarray(want.pointer), rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="padding"):
        OrderedMemory(2, 3, 4, rngs=nnx.Rngs(0), padding="left")
    with pytest.raises(ValueError, match="n_slots"):
        OrderedMemory(2, 3, 0, rngs=nnx.Rngs(0))
