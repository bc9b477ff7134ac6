"""tgjax.nn.onlstm: the NNX ON-LSTM layer, its release-checkpoint conversion and its Linen bridge."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.ops.onlstm_oracle import onlstm_oracle
from tgjax.nn.onlstm import ONLSTM, ONLSTMCell, released_parameters


def release_state_dict(rng, D, H, chunk_size, prefix):
    """Tensors named and shaped as in the release's ONLSTMCell ([out, in] weights)."""
    G = 2 * (H // chunk_size) + 4 * H
    return {
        prefix + "ih.0.weight": rng.normal(size=(G, D)).astype(np.float32) * 0.5,
        prefix + "ih.0.bias": rng.normal(size=G).astype(np.float32) * 0.5,
        prefix + "hh.weight": rng.normal(size=(G, H)).astype(np.float32) * 0.5,
        prefix + "hh.bias": rng.normal(size=G).astype(np.float32) * 0.5,
    }


def test_layer_with_released_weights_matches_the_equations():
    rng = np.random.default_rng(0)
    D, H, C, prefix = 5, 12, 3, "rnn.cells.1."
    state_dict = release_state_dict(rng, D, H, C, prefix)
    layer = ONLSTM(D, H, C, rngs=nnx.Rngs(0))
    layer.cell.load_released(state_dict, prefix)
    x = rng.normal(size=(2, 6, D)).astype(np.float32)
    hs, (h_last, c_last), (master_forget, master_input) = layer(jnp.asarray(x))

    zeros = np.zeros((2, H))
    want = onlstm_oracle(x, zeros, zeros, state_dict[prefix + "ih.0.weight"], state_dict[prefix + "ih.0.bias"],
                         state_dict[prefix + "hh.weight"], state_dict[prefix + "hh.bias"], C)
    for got, expected in zip((hs, h_last, c_last, master_forget, master_input), want):
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-5)
    # The release's distances from the returned master gates.
    assert np.asarray(master_forget).shape == (2, 6, 4)
    assert np.all(np.asarray(hs)[..., -C:] == 0)  # the top chunk, from the zero state


def test_cell_steps_equal_the_layer_and_state_carries_over():
    rng = np.random.default_rng(1)
    layer = ONLSTM(4, 8, 2, rngs=nnx.Rngs(3))
    x = jnp.asarray(rng.normal(size=(3, 5, 4)), jnp.float32)
    hs, (h_last, c_last), (master_forget, _) = layer(x)

    state = layer.cell.initial_state(3)
    for t in range(5):
        state, forget_t, _ = layer.cell(x[:, t], state)
        np.testing.assert_allclose(np.asarray(state[0]), np.asarray(hs[:, t]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(forget_t), np.asarray(master_forget[:, t]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state[1]), np.asarray(c_last), rtol=1e-5, atol=1e-6)

    # Two halves with the state carried over = one pass (truncated BPTT carries state like this).
    first, state_mid, _ = layer(x[:, :2])
    second, (h_end, c_end), _ = layer(x[:, 2:], state_mid)
    np.testing.assert_allclose(np.asarray(jnp.concatenate([first, second], 1)), np.asarray(hs), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(c_end), np.asarray(c_last), rtol=1e-5, atol=1e-6)


def test_parameters_have_the_release_shapes_and_initialisation():
    cell = ONLSTMCell(400, 1150, 10, rngs=nnx.Rngs(0))
    G = 2 * 115 + 4 * 1150
    shapes = {name: tuple(getattr(cell, name)[...].shape) for name in ("w_ih", "b_ih", "w_hh", "b_hh")}
    assert shapes == {"w_ih": (400, G), "b_ih": (G,), "w_hh": (1150, G), "b_hh": (G,)}
    # PyTorch nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    for name, fan_in in (("w_ih", 400), ("b_ih", 400), ("w_hh", 1150), ("b_hh", 1150)):
        values = np.asarray(getattr(cell, name)[...])
        bound = 1 / np.sqrt(fan_in)
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.95 * bound, name
    assert cell.w_ih.out_sharding == ("embed", None)  # NNX partition metadata


def test_released_parameters_transposes_and_checks():
    rng = np.random.default_rng(2)
    state_dict = release_state_dict(rng, 3, 4, 2, "")
    arrays = released_parameters(state_dict)
    np.testing.assert_array_equal(arrays["w_ih"], state_dict["ih.0.weight"].T)
    np.testing.assert_array_equal(arrays["w_hh"], state_dict["hh.weight"].T)
    with pytest.raises(KeyError, match="rnn.cells.0.hh.weight"):
        released_parameters({k: v for k, v in state_dict.items()}, prefix="rnn.cells.0.")
    cell = ONLSTMCell(3, 6, 2, rngs=nnx.Rngs(0))  # H = 6, the checkpoint has H = 4
    with pytest.raises(ValueError, match=r"w_ih: the checkpoint has shape \(3, 20\), this cell wants \(3, 30\)"):
        cell.load_released(state_dict)


def test_chunk_size_must_divide_the_hidden_size():
    with pytest.raises(ValueError, match="chunk_size 4 does not divide the hidden size 10"):
        ONLSTM(3, 10, 4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="chunk_size 7 does not divide the hidden size 1150"):
        ONLSTMCell(400, 1150, 7, rngs=nnx.Rngs(0))


def test_usable_from_linen_through_the_nnx_bridge():
    """A Linen user wraps the NNX layer with `nnx.bridge.to_linen`; it computes the same function."""
    from flax.nnx import bridge

    linen_layer = bridge.to_linen(ONLSTM, 4, 6, 2)
    x = jnp.asarray(np.random.default_rng(4).normal(size=(2, 5, 4)), jnp.float32)
    variables = linen_layer.init(jax.random.key(0), x)
    got_h, (got_hT, got_cT), (got_forget, got_input) = linen_layer.apply(variables, x)

    layer = ONLSTM(4, 6, 2, rngs=nnx.Rngs(9))
    params = variables["params"]["cell"]
    for name in ("w_ih", "b_ih", "w_hh", "b_hh"):
        value = params[name]
        getattr(layer.cell, name)[...] = value.value if hasattr(value, "value") else value
    want_h, (want_hT, want_cT), (want_forget, want_input) = layer(x)
    for got, want in ((got_h, want_h), (got_hT, want_hT), (got_cT, want_cT), (got_forget, want_forget),
                      (got_input, want_input)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-7)
    assert np.abs(np.asarray(got_h)).max() > 0


def test_jit_and_grad_through_the_module():
    layer = ONLSTM(3, 4, 2, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 4, 3))

    @nnx.jit
    def loss(model, x):
        return jnp.sum(model(x)[0] ** 2)

    grads = nnx.grad(loss)(layer, x)
    g = np.asarray(grads.cell.w_hh[...])
    assert g.shape == (4, 2 * 2 + 16) and np.all(np.isfinite(g)) and np.abs(g).max() > 0
