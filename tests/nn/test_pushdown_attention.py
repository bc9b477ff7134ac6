"""Pushdown attention against an oracle that materialises the 3-D keys of eq. 6 / Fig. 7.

The oracle (NumPy, float64) builds, for every query k and key j, the augmented
key k_j + β[clip(W[k, j])] — the `[T, T, d_head]` tensor of the paper's §3.4 —
and the relative position key W_pos PE(k − j), then scores, masks and softmaxes
one query at a time. The module never forms per-pair keys (it gathers q·β per
depth value), so agreement ties the gather to the equation.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.nn.attention import sinusoidal_encoding
from tgjax.nn.pushdown_attention import PushdownAttention, PushdownLayer, count_clipped_depths


def oracle(module: PushdownAttention, x, tape, valid=None) -> np.ndarray:
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    Wq, Wk, Wv, Wr, Wo = (f64(p[...]) for p in (module.query, module.key, module.value, module.rel_key, module.out))
    beta = None if module.depth_embedding is None else f64(module.depth_embedding[...])
    x = f64(x)
    B, T, d = x.shape
    H, dh = Wq.shape[1], Wq.shape[2]
    if valid is None:
        valid = np.ones((B, T), bool)
    out = np.zeros((B, T, d))
    for b in range(B):
        q = np.einsum("td,dhk->thk", x[b], Wq)
        k = np.einsum("td,dhk->thk", x[b], Wk)
        v = np.einsum("td,dhk->thk", x[b], Wv)
        # The 3-D keys: augmented[kq, j] = k_j + beta[W[kq, j]]   [T, T, H, dh]
        augmented = np.repeat(k[None], T, axis=0)
        if beta is not None:
            depth = np.clip(tape[b], 0, module.num_depths - 1)
            if module.depth_space == "head":  # Fig. 7: k_j + beta[W[k, j]], the same vector in every head
                augmented = augmented + beta[depth][:, :, None, :]
            else:  # eq. 6: (h_j + d_kj) W_key
                augmented = np.einsum("tsd,dhk->tshk", x[b][None] + beta[depth], Wk)
        for i in range(T):
            keys = [j for j in range(i + 1) if valid[b, i] and valid[b, j]]
            if not keys:
                continue
            for h in range(H):
                scores = []
                for j in keys:
                    distance = min(i - j, module.max_relative_position)
                    pos_key = sinusoidal_encoding(np.array([distance]), d)[0].astype(np.float64) @ Wr[:, h]
                    scores.append(q[i, h] @ (augmented[i, j, h] + pos_key) / math.sqrt(dh))
                scores = np.array(scores)
                w = np.exp(scores - scores.max())
                w /= w.sum()
                out[b, i] += sum(wj * v[j, h] for wj, j in zip(w, keys)) @ Wo[h]
    return out


# The module's forward pass as one compiled program per config and shape (op by op, every op compiles anew).
forward = nnx.jit(lambda module, x, tape: module(x, tape))


def make(d=16, heads=2, depths=5, max_rel=6, seed=0, space="head"):
    return PushdownAttention(d, heads, num_depths=depths, max_relative_position=max_rel, depth_space=space,
                             rngs=nnx.Rngs(seed))


def random_tape(rng, B, T, high):
    return np.tril(rng.integers(0, high, size=(B, T, T))).astype(np.int32)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), T=st.integers(1, 9), heads=st.sampled_from([1, 2, 4]),
       depths=st.sampled_from([2, 4, 7]))
def test_matches_3d_key_oracle(seed, T, heads, depths):
    rng = np.random.default_rng(seed)
    module = make(heads=heads, depths=depths, max_rel=5, seed=seed)
    # Make beta large enough that a wrong gather shows.
    module.depth_embedding[...] = jnp.asarray(rng.normal(size=(depths, module.head_dim)), jnp.float32)
    x = rng.normal(size=(2, T, 16)).astype(np.float32)
    tape = random_tape(rng, 2, T, depths + 3)  # some entries beyond the table: clipped
    got = np.asarray(forward(module, jnp.asarray(x), jnp.asarray(tape)))
    np.testing.assert_allclose(got, oracle(module, x, tape), rtol=2e-4, atol=2e-4)


def test_eq6_model_space_depth_matches_oracle():
    rng = np.random.default_rng(5)
    module = make(heads=2, depths=4, space="model")
    assert module.depth_embedding.shape == (4, 16)
    x = rng.normal(size=(2, 6, 16)).astype(np.float32)
    tape = random_tape(rng, 2, 6, 5)
    np.testing.assert_allclose(np.asarray(forward(module, jnp.asarray(x), jnp.asarray(tape))), oracle(module, x, tape),
                               rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="depth_space"):
        make(space="both")


def test_padding_and_no_depth_variant():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 6, 16)).astype(np.float32)
    tape = random_tape(rng, 2, 6, 4)
    valid = np.array([[True] * 6, [True] * 4 + [False] * 2])
    module = make(depths=4)
    got = np.asarray(module(jnp.asarray(x), jnp.asarray(tape), jnp.asarray(valid)))
    np.testing.assert_allclose(got, oracle(module, x, tape, valid), rtol=2e-4, atol=2e-4)
    assert (got[1, 4:] == 0).all()
    plain = make(depths=0)
    assert plain.depth_embedding is None
    np.testing.assert_allclose(np.asarray(forward(plain, jnp.asarray(x), jnp.asarray(tape))), oracle(plain, x, tape),
                               rtol=2e-4, atol=2e-4)


def test_causal_future_tokens_and_tape_entries_do_not_leak():
    rng = np.random.default_rng(1)
    module = make()
    module.depth_embedding[...] = jnp.asarray(rng.normal(size=(5, 8)), jnp.float32)
    x = rng.normal(size=(1, 7, 16)).astype(np.float32)
    tape = random_tape(rng, 1, 7, 5)
    base = np.asarray(forward(module, jnp.asarray(x), jnp.asarray(tape)))
    x2, tape2 = x.copy(), tape.copy()
    x2[:, 4:] = rng.normal(size=(1, 3, 16))
    tape2[:, :, 4:] = 3  # future keys (and their tape columns) change
    tape2[:, 5:, :] = 1  # later rows change
    changed = np.asarray(forward(module, jnp.asarray(x2), jnp.asarray(tape2)))
    np.testing.assert_allclose(changed[:, :4], base[:, :4], rtol=1e-5, atol=1e-6)
    # ... whereas a past tape entry seen by query 3 does change its output.
    tape3 = tape.copy()
    tape3[0, 3, 1] = (tape3[0, 3, 1] + 1) % 5
    assert not np.allclose(np.asarray(forward(module, jnp.asarray(x), jnp.asarray(tape3)))[0, 3], base[0, 3])


def test_clip_count():
    tape = np.array([[[0, 0, 0], [1, 1, 0], [5, 7, 2]]])
    valid = np.ones((1, 3, 3), bool)
    assert int(count_clipped_depths(jnp.asarray(tape), 5)) == 2
    assert int(count_clipped_depths(jnp.asarray(tape), 2)) == 3
    valid[0, 2, 0] = False
    assert int(count_clipped_depths(jnp.asarray(tape), 5, jnp.asarray(valid))) == 1
    # A clipped depth scores like the last row of the table.
    rng = np.random.default_rng(0)
    module = make(depths=3)
    module.depth_embedding[...] = jnp.asarray(rng.normal(size=(3, 8)), jnp.float32)
    x = jnp.asarray(rng.normal(size=(1, 3, 16)).astype(np.float32))
    clipped = np.minimum(tape, 2)
    np.testing.assert_allclose(np.asarray(forward(module, x, jnp.asarray(tape))),
                               np.asarray(forward(module, x, jnp.asarray(clipped))))


def test_layer_runs_and_depth_matters():
    layer = PushdownLayer(16, 2, 32, num_depths=4, max_relative_position=8, dropout=0.1, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    layer.attention.depth_embedding[...] = jnp.asarray(rng.normal(size=(4, 8)), jnp.float32)
    x = jnp.asarray(rng.normal(size=(2, 5, 16)).astype(np.float32))
    zeros = jnp.zeros((2, 5, 5), jnp.int32)
    tape = jnp.asarray(random_tape(rng, 2, 5, 4))
    a, b = layer(x, zeros), layer(x, tape)
    assert a.shape == (2, 5, 16)
    np.testing.assert_allclose(np.asarray(a[:, 0]), np.asarray(b[:, 0]), rtol=1e-5, atol=1e-5)  # W_0 = [0]
    assert not np.allclose(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="divisible"):
        PushdownAttention(10, 3, num_depths=2, max_relative_position=4, rngs=nnx.Rngs(0))


def test_one_query_against_cached_keys_equals_the_full_row():
    """The incremental path inference will take: query t against keys 0..t with tape row t alone."""
    rng = np.random.default_rng(7)
    module = make(depths=4)
    x = jnp.asarray(rng.normal(size=(2, 6, 16)).astype(np.float32))
    tape = jnp.asarray(random_tape(rng, 2, 6, 4))
    full = np.asarray(module(x, tape))
    q, k, v = module.project(x)

    @nnx.jit
    def one_query(module, q, k, v, tape_row, distance):  # one program per t (op by op: every op, every t)
        scores = module.scores(q, k, tape_row, distance)
        return module.attend(scores, jnp.ones((1, 1, k.shape[1]), bool), v)

    for t in range(6):
        distance = (t - jnp.arange(t + 1))[None, None, :]
        out = one_query(module, q[:, t:t + 1], k[:, : t + 1], v[:, : t + 1], tape[:, t:t + 1, : t + 1], distance)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
