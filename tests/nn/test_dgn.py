"""tgjax.nn.dgn: the dependency mask and the DGN layer against a per-(i, j, channel) loop
written from ../shared/reference/released-code.md §4.2-4.3, and the Linen bridge."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.nn.dgn import DependencyGraphLayer, dependency_mask, direction_features


def oracle_mask(P):
    """A_ij = H_ij + H_ji − H_ij H_ji with H = P, diagonal 0, one entry at a time."""
    B, T, _ = P.shape
    A = np.zeros_like(P)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                h_ij = 0.0 if i == j else P[b, i, j]
                h_ji = 0.0 if i == j else P[b, j, i]
                A[b, i, j] = h_ij + h_ji - h_ij * h_ji
    return A


def oracle_layer(x, A, valid, p, gated=True, nonlinear=True, competition="channels", direction_bias=True):
    """The released layer's equations, looping over batch, i, j and channel (float64)."""
    B, T, d = x.shape
    K, dc = p["direction_bias"].shape[1], p["w_in"].shape[-1]
    w_in = p["w_in"].reshape(d, 4 * K * dc)
    b_in = p["b_in"].reshape(4 * K * dc)
    y = np.zeros_like(x)
    for b in range(B):
        proj = x[b] @ w_in + b_in  # [T, 4·K·d_c], split q | k | v | g, each K blocks of d_c
        q, k, v, g = (proj[:, n * K * dc:(n + 1) * K * dc].reshape(T, K, dc) for n in range(4))
        for i in range(T):
            o = np.zeros((K, dc))
            for j in range(T):
                if valid is not None and not valid[b, j]:
                    continue
                s = np.empty(K)
                for c in range(K):
                    s[c] = q[i, c] @ k[j, c]
                    if j < i and direction_bias:
                        s[c] += p["direction_bias"][0, c]
                    if j > i and direction_bias:
                        s[c] += p["direction_bias"][1, c]
                    s[c] /= math.sqrt(dc)
                if competition == "channels":
                    soft = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                else:
                    soft = 1.0 / (1.0 + np.exp(-s))
                for c in range(K):
                    w = soft[c] * (A[b, i, j] + 1e-6)
                    o[c] += w * (np.tanh(v[j, c]) if nonlinear else v[j, c])
            for c in range(K):
                if gated:
                    o[c] *= 1.0 / (1.0 + np.exp(-g[i, c]))
            y[b, i] = x[b, i] + o.reshape(K * dc) @ p["w_out"].reshape(K * dc, d) + p["b_out"]
    return y


def params_of(layer):
    return {name: np.asarray(getattr(layer, name)[...], np.float64)
            for name in ("w_in", "b_in", "direction_bias", "w_out", "b_out")}


def random_inputs(seed, B=2, T=5, d=6):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, T, d))
    logits = rng.normal(size=(B, T, T)) * 2
    P = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    valid = np.ones((B, T), bool)
    valid[1, 3:] = False
    return x, P, valid


def test_mask_matches_the_loop_and_is_symmetric_with_zero_diagonal():
    _, P, _ = random_inputs(0)
    A = np.asarray(dependency_mask(jnp.asarray(P)))
    np.testing.assert_allclose(A, oracle_mask(P), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(A, np.swapaxes(A, 1, 2), atol=1e-7)
    assert np.all(np.diagonal(A, axis1=1, axis2=2) == 0)
    # Hand-worked: P[0, 1] = 0.5 and P[1, 0] = 0.4 -> A = 0.5 + 0.4 − 0.2 = 0.7.
    P2 = np.array([[[0.5, 0.5], [0.4, 0.6]]])
    assert np.asarray(dependency_mask(jnp.asarray(P2)))[0, 0, 1] == pytest.approx(0.7)


def test_direction_features():
    L, R = direction_features(3)
    assert np.asarray(L).tolist() == [[0, 0, 0], [1, 0, 0], [1, 1, 0]]
    assert np.asarray(R).tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0]]


ABLATIONS = [dict(), dict(gated=False), dict(nonlinear=False), dict(competition="sigmoid"),
             dict(direction_bias=False)]


@pytest.mark.parametrize("switches", ABLATIONS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()) or "model")
def test_layer_matches_the_loop_oracle(switches):
    x, P, valid = random_inputs(1)
    layer = DependencyGraphLayer(6, 3, 4, rngs=nnx.Rngs(0), **switches)
    # Non-zero biases so that a wrong split or a missing bias shows.
    layer.b_in[...] = jnp.asarray(np.random.default_rng(2).normal(size=layer.b_in.shape), jnp.float32)
    layer.b_out[...] = jnp.asarray(np.random.default_rng(3).normal(size=layer.b_out.shape), jnp.float32)
    layer.direction_bias[...] = jnp.asarray(np.random.default_rng(4).normal(size=(2, 3)), jnp.float32)
    A = oracle_mask(P)
    got = layer(jnp.asarray(x, jnp.float32), jnp.asarray(A, jnp.float32), jnp.asarray(valid))
    want = oracle_layer(x, A, valid, params_of(layer), **switches)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)


_PROPERTY_LAYER = DependencyGraphLayer(5, 3, 3, rngs=nnx.Rngs(11))
_property_weights = jax.jit(lambda x, A, valid: _PROPERTY_LAYER.channel_weights(x, A, valid))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 10.0))
def test_channel_weights_sum_to_the_mask(seed, scale):
    """Σ_c w_ijc = A_ij + 1e-6 on valid keys, 0 on padded keys (one compiled shape, random values)."""
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(2, 6, 5)) * scale, jnp.float32)
    A = jnp.asarray(rng.uniform(size=(2, 6, 6)), jnp.float32)
    valid = jnp.asarray(rng.uniform(size=(2, 6)) < 0.7)
    w = np.asarray(_property_weights(x, A, valid))
    assert w.shape == (2, 6, 6, 3) and np.all(w >= 0)
    want = np.where(np.asarray(valid)[:, None, :], np.asarray(A) + 1e-6, 0.0)
    np.testing.assert_allclose(w.sum(-1), want, rtol=1e-5, atol=1e-7)


def test_initialisation_and_shapes():
    layer = DependencyGraphLayer(8, 2, 3, rngs=nnx.Rngs(0))
    assert layer.w_in.shape == (8, 4, 2, 3) and layer.w_out.shape == (2, 3, 8)
    bound = math.sqrt(6.0 / (8 + 4 * 6))  # xavier on the release's [d, 4·K·d_c] Linear
    assert np.max(np.abs(np.asarray(layer.w_in[...]))) <= bound
    assert np.max(np.abs(np.asarray(layer.direction_bias[...]))) <= 0.1
    assert not np.any(np.asarray(layer.b_in[...])) and not np.any(np.asarray(layer.b_out[...]))


def test_zero_mask_gives_the_residual_up_to_the_floor_and_dropout_is_off_in_eval():
    x = jnp.asarray(np.random.default_rng(5).normal(size=(1, 4, 6)), jnp.float32)
    layer = DependencyGraphLayer(6, 2, 3, rngs=nnx.Rngs(1), dropout=0.5, attention_dropout=0.5)
    run = nnx.jit(lambda layer, A, deterministic: layer(x, A, deterministic=deterministic), static_argnums=2)
    y = run(layer, jnp.zeros((1, 4, 4)), True)
    # With A = 0 only the 1e-6 floor passes: y = x + b_out (= x) up to ~1e-5.
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=1e-4)
    A = jnp.ones((1, 4, 4))
    assert np.allclose(run(layer, A, True), run(layer, A, True))
    assert not np.allclose(run(layer, A, False), run(layer, A, False))  # training mode: new dropout masks


def test_gradients_reach_every_parameter_and_the_mask():
    x, P, valid = random_inputs(6)
    layer = DependencyGraphLayer(6, 2, 3, rngs=nnx.Rngs(2))

    def loss(layer, head_probs):
        return jnp.sum(layer(jnp.asarray(x, jnp.float32), dependency_mask(head_probs), jnp.asarray(valid)) ** 2)

    grads, mask_grad = nnx.jit(nnx.grad(loss, argnums=(0, 1)))(layer, jnp.asarray(P, jnp.float32))
    for name in ("w_in", "b_in", "direction_bias", "w_out", "b_out"):
        assert np.all(np.isfinite(np.asarray(grads[name][...]))) and np.any(np.asarray(grads[name][...]))
    assert np.any(np.asarray(mask_grad))


def test_usable_from_linen_through_the_nnx_bridge():
    from flax.nnx import bridge

    x, P, valid = random_inputs(7)
    x, A = jnp.asarray(x, jnp.float32), dependency_mask(jnp.asarray(P, jnp.float32))
    linen_layer = bridge.to_linen(DependencyGraphLayer, 6, 2, 3)
    variables = linen_layer.init(jax.random.key(0), x, A, jnp.asarray(valid))
    got = linen_layer.apply(variables, x, A, jnp.asarray(valid))

    layer = DependencyGraphLayer(6, 2, 3, rngs=nnx.Rngs(9))
    for name, value in variables["params"].items():
        getattr(layer, name)[...] = value.value if hasattr(value, "value") else value
    np.testing.assert_allclose(np.asarray(got), np.asarray(layer(x, A, jnp.asarray(valid))), rtol=1e-6)
