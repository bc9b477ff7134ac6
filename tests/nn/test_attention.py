"""Relative multi-head attention against a per-pair oracle written from Transformer-XL's score.

The oracle (NumPy, float64, loops over batch, head, query, key) forms
r_ij = W_{k,R} PE(clip(R_ij)) for every pair and evaluates

    s_ij = ((q_i + u) · k_j + (q_i + v) · r_ij) / sqrt(d_head)

then a softmax over the keys the mask allows. The module under test never forms
r_ij per pair (it gathers one position term per distinct R), so agreement ties
the gather to the equation, clipping and per-head masks included.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.nn.attention import RelativeMultiHeadAttention, sinusoidal_encoding


def oracle_attention(module: RelativeMultiHeadAttention, x, memory, mask, relpos) -> np.ndarray:
    """`[B, T, d]` by the equation, one (query, key) pair at a time."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    Wq, Wk, Wv, Wr = (f64(p[...]) for p in (module.query, module.key, module.value, module.rel_key))
    u, v_bias = f64(module.content_bias[...]), f64(module.position_bias[...])
    Wo, bo = f64(module.out[...]), f64(module.out_bias[...])
    x, memory = f64(x), f64(memory)
    B, T, d = x.shape
    H, dk = Wq.shape[1], Wq.shape[2]
    if mask.ndim == 3:
        mask = np.repeat(mask[:, None], H, axis=1)
        relpos = np.repeat(relpos[:, None], H, axis=1)
    out = np.zeros((B, T, d))
    for b in range(B):
        context = np.concatenate([memory[b], x[b]], axis=0)  # [M + T, d]
        for i in range(T):
            attended = np.zeros((H, dk))
            for h in range(H):
                q = x[b, i] @ Wq[:, h]
                keys = [j for j in range(context.shape[0]) if mask[b, h, i, j]]
                if not keys:
                    continue  # a query that may attend nowhere outputs zeros before the projection
                scores = []
                for j in keys:
                    R = min(max(int(relpos[b, h, i, j]), module.rel_min), module.rel_max)
                    pe = sinusoidal_encoding(np.array([R]), d)[0].astype(np.float64)
                    r_ij = pe @ Wr[:, h]
                    k_j = context[j] @ Wk[:, h]
                    scores.append(((q + u[h]) @ k_j + (q + v_bias[h]) @ r_ij) / math.sqrt(dk))
                scores = np.array(scores)
                weights = np.exp(scores - scores.max())
                weights /= weights.sum()
                attended[h] = sum(w * (context[j] @ Wv[:, h]) for w, j in zip(weights, keys))
            out[b, i] = np.einsum("hk,hkd->d", attended, Wo) + bo
    return out


# The module's forward pass as one compiled program per config and shape (op by op, every op compiles anew).
forward = nnx.jit(lambda module, x, memory, mask, relpos: module(x, memory, mask, relpos))


def _module(d_model, num_heads, rel_min, rel_max, seed):
    module = RelativeMultiHeadAttention(d_model, num_heads, rel_min=rel_min, rel_max=rel_max, rngs=nnx.Rngs(seed))
    # u and v start at zero; give them values so that both bias terms are exercised.
    rng = np.random.default_rng(seed)
    module.content_bias[...] = jnp.asarray(rng.normal(size=module.content_bias.shape), jnp.float32)
    module.position_bias[...] = jnp.asarray(rng.normal(size=module.position_bias.shape), jnp.float32)
    return module


@settings(max_examples=12, deadline=None)
@given(
    batch=st.integers(1, 2),
    seg_len=st.integers(1, 5),
    mem_len=st.integers(0, 4),
    num_heads=st.sampled_from([1, 2, 4]),
    per_head=st.booleans(),
    rel_range=st.sampled_from([(-1, 6), (0, 3), (-4, 4)]),
    seed=st.integers(0, 2**16),
)
def test_attention_equals_the_per_pair_equation(batch, seg_len, mem_len, num_heads, per_head, rel_range, seed):
    d_model = 8
    module = _module(d_model, num_heads, *rel_range, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.normal(size=(batch, seg_len, d_model)).astype(np.float32)
    memory = rng.normal(size=(batch, mem_len, d_model)).astype(np.float32)
    shape = (batch, num_heads, seg_len, mem_len + seg_len) if per_head else (batch, seg_len, mem_len + seg_len)
    mask = rng.random(shape) < 0.6
    # Relative positions beyond the clipping range on both sides, to exercise the clip.
    relpos = rng.integers(rel_range[0] - 3, rel_range[1] + 4, size=shape)
    got = np.asarray(forward(module, jnp.asarray(x), jnp.asarray(memory), jnp.asarray(mask), jnp.asarray(relpos)))
    np.testing.assert_allclose(got, oracle_attention(module, x, memory, mask, relpos), rtol=2e-4, atol=2e-4)


def test_relative_position_changes_the_output_only_through_its_clipped_value():
    """R beyond max behaves as max; R inside the range matters."""
    module = _module(8, 2, -1, 3, seed=0)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(1, 3, 8)), jnp.float32)
    memory = jnp.zeros((1, 0, 8))
    mask = jnp.ones((1, 3, 3), bool)
    base = rng.integers(-1, 4, size=(1, 3, 3))
    far = np.where(base == 3, 40, base)  # 3 = max: any larger R must give the same output
    np.testing.assert_array_equal(np.asarray(module(x, memory, mask, jnp.asarray(base))),
                                  np.asarray(module(x, memory, mask, jnp.asarray(far))))
    moved = base.copy()
    moved[0, 2, 0] = 0 if base[0, 2, 0] != 0 else 1
    assert not np.allclose(np.asarray(module(x, memory, mask, jnp.asarray(base))),
                           np.asarray(module(x, memory, mask, jnp.asarray(moved))))


def test_memory_receives_no_gradient():
    """Memory holds earlier segments' layer inputs: gradients stop there (Transformer-XL)."""
    import jax

    module = _module(8, 2, -1, 3, seed=1)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(1, 2, 8)), jnp.float32)
    memory = jnp.asarray(rng.normal(size=(1, 3, 8)), jnp.float32)
    mask = jnp.ones((1, 2, 5), bool)
    relpos = jnp.zeros((1, 2, 5), jnp.int32)
    grad_memory = jax.jit(jax.grad(lambda m: module(x, m, mask, relpos).sum()))(memory)
    grad_x = jax.jit(jax.grad(lambda s: module(s, memory, mask, relpos).sum()))(x)
    assert np.all(np.asarray(grad_memory) == 0)
    assert np.any(np.asarray(grad_x) != 0)


def test_usable_from_linen_through_the_nnx_bridge():
    """A Linen user wraps the NNX module with `nnx.bridge.to_linen`; it computes the same function."""
    import jax
    from flax.nnx import bridge

    linen_attention = bridge.to_linen(RelativeMultiHeadAttention, 8, 2, rel_min=-1, rel_max=3)
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.normal(size=(1, 3, 8)), jnp.float32)
    memory = jnp.asarray(rng.normal(size=(1, 2, 8)), jnp.float32)
    mask = jnp.asarray(rng.random((1, 3, 5)) < 0.7)
    relpos = jnp.asarray(rng.integers(-2, 5, size=(1, 3, 5)))
    variables = linen_attention.init(jax.random.key(0), x, memory, mask, relpos)
    got = linen_attention.apply(variables, x, memory, mask, relpos)

    # The same parameters in the NNX module give the same output.
    module = RelativeMultiHeadAttention(8, 2, rel_min=-1, rel_max=3, rngs=nnx.Rngs(5))
    params = variables["params"]
    for name in ("query", "key", "value", "rel_key", "content_bias", "position_bias", "out", "out_bias"):
        value = params[name]
        getattr(module, name)[...] = value.value if hasattr(value, "value") else value
    np.testing.assert_allclose(np.asarray(got), np.asarray(module(x, memory, mask, relpos)), rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="not divisible"):
        RelativeMultiHeadAttention(10, 3, rel_min=0, rel_max=2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="empty"):
        RelativeMultiHeadAttention(8, 2, rel_min=3, rel_max=2, rngs=nnx.Rngs(0))
