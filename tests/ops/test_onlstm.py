"""tgjax.ops.onlstm_scan against the ON-LSTM equations, written out in tests/ops/onlstm_oracle.py."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

from tests.ops.onlstm_oracle import onlstm_oracle, plain_lstm_oracle
from tgjax.ops import onlstm_scan
from tgjax.ops.onlstm import cumax

scan = jax.jit(onlstm_scan, static_argnames="chunk_size")


def random_layer(rng, B, T, D, H, chunk_size, scale=1.0):
    """Inputs, states and weights; the weights in the release's [out, in] layout."""
    G = 2 * (H // chunk_size) + 4 * H
    return dict(
        x=rng.normal(size=(B, T, D)),
        h0=rng.normal(size=(B, H)) * 0.5,
        c0=rng.normal(size=(B, H)),
        ih_weight=rng.normal(size=(G, D)) * scale,
        ih_bias=rng.normal(size=G) * scale,
        hh_weight=rng.normal(size=(G, H)) * scale,
        hh_bias=rng.normal(size=G) * scale,
    )


def run_op(layer, chunk_size, op=scan):
    return op(layer["x"], layer["h0"], layer["c0"], layer["ih_weight"].T, layer["ih_bias"],
              layer["hh_weight"].T, layer["hh_bias"], chunk_size=chunk_size)


def run_oracle(layer, chunk_size):
    return onlstm_oracle(layer["x"], layer["h0"], layer["c0"], layer["ih_weight"], layer["ih_bias"],
                         layer["hh_weight"], layer["hh_bias"], chunk_size)


# Each shape compiles its own scan. In CI, shapes that reach every end of the ranges (T = 0, one chunk, chunks of
# one unit, the largest sizes), two random layers each; 25 random shapes with -m slow.
@pytest.mark.parametrize("B, T, D, n_chunks, chunk_size", [
    (1, 0, 2, 2, 2), (2, 5, 1, 1, 4), (3, 3, 5, 4, 1), (1, 4, 3, 3, 3), (3, 5, 4, 2, 2)])
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_matches_the_equations_in_float64(B, T, D, n_chunks, chunk_size, seed):
    check_against_the_equations(B, T, D, n_chunks, chunk_size, seed)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(0, 5), D=st.integers(1, 5), n_chunks=st.integers(1, 4),
       chunk_size=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_matches_the_equations_in_float64_at_random_shapes(B, T, D, n_chunks, chunk_size, seed):
    check_against_the_equations(B, T, D, n_chunks, chunk_size, seed)


def check_against_the_equations(B, T, D, n_chunks, chunk_size, seed):
    layer = random_layer(np.random.default_rng(seed), B, T, D, n_chunks * chunk_size, chunk_size)
    with jax.enable_x64(True):
        got = [np.asarray(a) for a in run_op(layer, chunk_size)]
    want = run_oracle(layer, chunk_size)
    for name, g, w in zip(("h", "hT", "cT", "master_forget", "master_input"), got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=name)


def test_float32_matches_float64_oracle_at_the_papers_chunk_size():
    rng = np.random.default_rng(3)
    layer = random_layer(rng, 2, 7, 6, 40, 10, scale=0.3)
    got = [np.asarray(a) for a in run_op(layer, 10)]
    assert all(g.dtype == np.float32 for g in got)
    for g, w in zip(got, run_oracle(layer, 10)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_hand_computed_step():
    """H = 2 units, chunk 1 (two chunks), zero weights: every gate is set by its bias.

    Columns: master input (2), master forget (2), o (2), c^ (2), i (2), f (2).
    master forget logits (0, ln 3) -> softmax (1/4, 3/4) -> cumax (1/4, 1);
    master input logits (ln 3, 0) -> softmax (3/4, 1/4) -> 1 - cumax (1/4, 0).
    f = sigmoid(+40) = 1, i = sigmoid(-40) = 0, o = sigmoid(0) = 1/2, tanh(c^) = tanh(40) = 1.
    Chunk 0: overlap 1/16, f^ = 1/16 + 3/16 = 1/4, i^ = 0 + 3/16, c = 2/4 + 3/16 = 11/16 from c0 = 2.
    Chunk 1 (the top one): f~ = 1, i~ = 0, so c stays c0 = -3.
    """
    ln3 = np.log(3.0)
    bias = np.array([ln3, 0.0, 0.0, ln3, 0.0, 0.0, 40.0, 40.0, -40.0, -40.0, 40.0, 40.0])
    with jax.enable_x64(True):
        h, hT, cT, master_forget, master_input = scan(
            np.ones((1, 1, 3)), np.zeros((1, 2)), np.array([[2.0, -3.0]]), np.zeros((3, 12)), bias,
            np.zeros((2, 12)), np.zeros(12), chunk_size=1)
        np.testing.assert_allclose(np.asarray(master_forget)[0, 0], [0.25, 1.0], rtol=1e-12)
        np.testing.assert_allclose(np.asarray(master_input)[0, 0], [0.25, 0.0], atol=1e-12)
        np.testing.assert_allclose(np.asarray(cT)[0], [11 / 16, -3.0], rtol=1e-12)
        np.testing.assert_allclose(np.asarray(h)[0, 0], 0.5 * np.tanh([11 / 16, -3.0]), rtol=1e-12)
        np.testing.assert_array_equal(np.asarray(hT), np.asarray(h)[:, -1])


def test_master_gates_are_ordered_cumax():
    """f~ is non-decreasing over chunks and ends at exactly 1; i~ is non-increasing and ends at exactly 0."""
    rng = np.random.default_rng(7)
    layer = random_layer(rng, 4, 9, 5, 48, 4, scale=2.0)
    _, _, _, master_forget, master_input = (np.asarray(a) for a in run_op(layer, 4))
    assert master_forget.shape == master_input.shape == (4, 9, 12)
    assert np.all(np.diff(master_forget, axis=-1) >= 0)
    assert np.all(np.diff(master_input, axis=-1) <= 0)
    assert np.all((master_forget >= 0) & (master_forget <= 1))
    assert np.all((master_input >= 0) & (master_input <= 1))
    assert np.all(master_forget[..., -1] == 1.0)
    assert np.all(master_input[..., -1] == 0.0)
    # Not all flat: the gates do vary over chunks (a constant 1 would pass the checks above).
    assert master_forget[..., 0].mean() < 0.5 and master_input[..., 0].mean() > 0.5


def test_cumax_is_cumsum_of_softmax_with_an_exact_top():
    logits = np.array([[0.3, -1.2, 2.0, 0.1], [50.0, 0.0, -50.0, 3.0]], np.float32)
    got = np.asarray(cumax(jnp.asarray(logits)))
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(got, np.cumsum(e / e.sum(-1, keepdims=True), -1), rtol=1e-6)
    assert np.all(got[:, -1] == 1.0)
    # Along another axis.
    np.testing.assert_allclose(np.asarray(cumax(jnp.asarray(logits.T), axis=0)), got.T, rtol=1e-6)


def test_top_chunk_never_changes():
    """The top chunk keeps c0 bit for bit; from the release's zero state its h is exactly 0."""
    rng = np.random.default_rng(11)
    chunk_size = 3
    layer = random_layer(rng, 3, 6, 4, 12, chunk_size)
    h, hT, cT, _, _ = (np.asarray(a) for a in run_op(layer, chunk_size))
    c0 = layer["c0"].astype(np.float32)
    np.testing.assert_array_equal(cT[:, -chunk_size:], c0[:, -chunk_size:])
    assert np.all(np.abs(cT[:, :-chunk_size] - c0[:, :-chunk_size]) > 1e-6)  # the other chunks do move
    layer["c0"] = np.zeros_like(layer["c0"])
    h, hT, cT, _, _ = (np.asarray(a) for a in run_op(layer, chunk_size))
    assert np.all(h[..., -chunk_size:] == 0.0) and np.all(cT[:, -chunk_size:] == 0.0)
    assert np.all(np.abs(h[..., :-chunk_size]).max(axis=-1) > 0)


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(5)
    layer = random_layer(rng, 2, 3, 2, 4, 2, scale=0.7)
    G = layer["ih_bias"].shape[0]
    weights = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3, 2))

    def loss(x, h0, c0, w_ih, b_ih, w_hh, b_hh):
        h, hT, cT, master_forget, master_input = onlstm_scan(x, h0, c0, w_ih, b_ih, w_hh, b_hh, chunk_size=2)
        return (jnp.sum(h * weights[0]) + jnp.sum(cT ** 2) + jnp.sum(master_forget * weights[1])
                + jnp.sum(master_input * weights[2]))

    with jax.enable_x64(True):
        args = (layer["x"], layer["h0"], layer["c0"], layer["ih_weight"].T, layer["ih_bias"],
                layer["hh_weight"].T, layer["hh_bias"])
        loss = jax.jit(loss)  # one program, called by check_grads at every perturbed point
        check_grads(loss, args, order=1, modes=("rev",), atol=1e-6, rtol=1e-6)
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(7))))(*args)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
    assert grads[3].shape == (2, G) and np.abs(np.asarray(grads[3])).max() > 0


def test_float32_gradients_are_finite_at_the_papers_size_of_chunk():
    rng = np.random.default_rng(9)
    layer = random_layer(rng, 2, 8, 6, 30, 10, scale=3.0)  # large logits: saturated gates
    grad = jax.jit(jax.grad(lambda w: jnp.sum(run_op(dict(layer, hh_weight=w.T), 10, op=onlstm_scan)[0])))(
        jnp.asarray(layer["hh_weight"].T, jnp.float32))
    assert np.all(np.isfinite(np.asarray(grad)))


def good_args(B=2, T=3, D=4, H=6, chunk_size=2):
    G = 2 * (H // chunk_size) + 4 * H
    return dict(x=np.zeros((B, T, D)), h0=np.zeros((B, H)), c0=np.zeros((B, H)), w_ih=np.zeros((D, G)),
                b_ih=np.zeros(G), w_hh=np.zeros((H, G)), b_hh=np.zeros(G))


def test_chunk_size_must_divide_the_hidden_size():
    args = good_args(H=6, chunk_size=2)
    with pytest.raises(ValueError, match=r"chunk_size 4 does not divide the hidden size 6"):
        onlstm_scan(**args, chunk_size=4)
    with pytest.raises(ValueError, match="positive int"):
        onlstm_scan(**args, chunk_size=0)
    with pytest.raises(ValueError, match="positive int"):
        onlstm_scan(**args, chunk_size=2.0)


@pytest.mark.parametrize("name, shape, message", [
    ("x", (2, 3), r"x must be \[B, T, D\]"),
    ("h0", (3, 6), r"h0 must be \[B, H\] with x's batch B = 2"),
    ("c0", (2, 5), r"c0 must be \[B, H\] = \(2, 6\)"),
    ("w_ih", (4, 29), r"w_ih must have shape \(4, 30\) \(D = 4 inputs, H = 6 units, "
                      r"G = 2\*3 chunks \+ 4\*6 = 30 gate columns\), got \(4, 29\)"),
    ("w_ih", (5, 30), r"w_ih must have shape \(4, 30\)"),
    ("w_hh", (6, 28), r"w_hh must have shape \(6, 30\)"),
    ("b_ih", (24,), r"b_ih must have shape \(30,\)"),
    ("b_hh", (30, 1), r"b_hh must have shape \(30,\)"),
])
def test_shape_mismatches_are_refused(name, shape, message):
    args = good_args()
    jax.eval_shape(functools.partial(onlstm_scan, chunk_size=2), **args)  # the good arguments pass (trace only)
    args[name] = np.zeros(shape)
    with pytest.raises(ValueError, match=message):
        onlstm_scan(**args, chunk_size=2)


@settings(max_examples=10, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 5), D=st.integers(1, 4), n_chunks=st.integers(1, 3),
       chunk_size=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_unordered_is_a_plain_lstm_with_its_gates_chunk_means_in_the_master_gates_place(B, T, D, n_chunks,
                                                                                      chunk_size, seed):
    layer = random_layer(np.random.default_rng(seed), B, T, D, n_chunks * chunk_size, chunk_size)
    plain = functools.partial(jax.jit(onlstm_scan, static_argnames=("chunk_size", "ordered")), ordered=False)
    with jax.enable_x64(True):
        got = run_op({k: jnp.asarray(v, jnp.float64) for k, v in layer.items()}, chunk_size, op=plain)
    want = plain_lstm_oracle(**layer, chunk_size=chunk_size)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10, atol=1e-12)
