"""Relative multi-head attention over `[memory, segment]` with any mask and any integer relative positions.

Transformer-XL's score (Dai et al., 2019), as Transformer Grammars use it
(Sartran et al., 2022, §2.2):

    s_ij = (q_i + u) · k_j + (q_i + v) · r_ij,   r_ij = W_{k,R} PE(R_ij)

with R_ij any integer matrix — depth(i) − depth(j) for TG, i − j for TXL —
clipped to [min, max]. R takes few distinct values, so the position term is
computed once per distinct value (`[B, H, T, P]`, P = max − min + 1) and
gathered; no `[T, M + T, d]` tensor is ever formed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import dense_init, param


def sinusoidal_encoding(positions: np.ndarray, dim: int) -> np.ndarray:
    """Transformer-XL's sinusoidal encoding `[P, dim]` of integer positions `[P]` (sin half, cos half)."""
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    angles = np.asarray(positions, np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)[:, :dim].astype(np.float32)


class RelativeMultiHeadAttention(nnx.Module):
    """Multi-head attention from a segment `[B, T, d]` to `[memory, segment]` `[B, M + T, d]`.

    No bias on q, k, v (as the paper and the authors' release); a bias on the
    output projection; scores scaled by 1/sqrt(d_head). Relative positions are
    given per (query, key) and may differ per head (head-hybrid models).

    `dtype` is the compute dtype (projections, scores' inputs); parameters are
    stored in `param_dtype` and cast at use; the softmax runs in float32.
    """

    def __init__(self, d_model: int, num_heads: int, *, rel_min: int, rel_max: int, rngs: nnx.Rngs,
                 dtype=jnp.float32, param_dtype=jnp.float32):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if rel_max < rel_min:
            raise ValueError(f"relative position range [{rel_min}, {rel_max}] is empty")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.rel_min, self.rel_max = int(rel_min), int(rel_max)
        self.dtype = dtype
        qkv_shape = (d_model, num_heads, self.head_dim)
        qkv_axes = ("embed", "heads", "kv")
        self.query = param(rngs, dense_init(), qkv_shape, qkv_axes, param_dtype)
        self.key = param(rngs, dense_init(), qkv_shape, qkv_axes, param_dtype)
        self.value = param(rngs, dense_init(), qkv_shape, qkv_axes, param_dtype)
        self.rel_key = param(rngs, dense_init(), qkv_shape, qkv_axes, param_dtype)  # W_{k,R}
        self.content_bias = param(rngs, nnx.initializers.zeros, (num_heads, self.head_dim), ("heads", "kv"),
                                  param_dtype)  # u
        self.position_bias = param(rngs, nnx.initializers.zeros, (num_heads, self.head_dim), ("heads", "kv"),
                                   param_dtype)  # v
        self.out = param(rngs, dense_init(in_axis=(0, 1)), (num_heads, self.head_dim, d_model),
                         ("heads", "kv", "embed"), param_dtype)
        self.out_bias = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",), param_dtype)
        # PE(R) for every R in [min, max]: a constant of the module, not a parameter.
        self.position_table = nnx.Cache(jnp.asarray(sinusoidal_encoding(np.arange(rel_min, rel_max + 1), d_model)))

    def __call__(self, x: jax.Array, memory: jax.Array, mask: jax.Array, relpos: jax.Array) -> jax.Array:
        """Attention output `[B, T, d]`.

        Args:
          x: the segment `[B, T, d]`.
          memory: `[B, M, d]` (no gradient flows into it).
          mask: `[B, T, M + T]` or per head `[B, H, T, M + T]`; True where j may be attended from i.
          relpos: integer relative positions of the same shape (clipped here to [min, max]).
        """
        w = lambda variable: variable[...].astype(self.dtype)  # parameters in the compute dtype
        x = x.astype(self.dtype)
        context = jnp.concatenate([jax.lax.stop_gradient(memory).astype(self.dtype), x], axis=1)
        q = jnp.einsum("btd,dhk->bthk", x, w(self.query))
        k = jnp.einsum("bsd,dhk->bshk", context, w(self.key))
        v = jnp.einsum("bsd,dhk->bshk", context, w(self.value))
        content = jnp.einsum("bthk,bshk->bhts", q + w(self.content_bias), k)
        # The position term for each distinct relative position, then a gather.
        rel_keys = jnp.einsum("pd,dhk->phk", w(self.position_table), w(self.rel_key))  # [P, H, dk]
        by_position = jnp.einsum("bthk,phk->bhtp", q + w(self.position_bias), rel_keys)  # [B, H, T, P]
        if mask.ndim == 3:
            mask, relpos = mask[:, None], relpos[:, None]
        index = jnp.clip(relpos, self.rel_min, self.rel_max) - self.rel_min
        index = jnp.broadcast_to(index, content.shape).astype(jnp.int32)
        position = jnp.take_along_axis(by_position, index, axis=-1)
        # Scores and softmax in float32 (a no-op by default): bf16 logits lose the small differences.
        scores = (content + position).astype(jnp.float32) / np.sqrt(self.head_dim)
        mask = jnp.broadcast_to(mask, scores.shape)
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
        weights = jax.nn.softmax(scores, axis=-1)
        # Queries that may attend nowhere (padding) get zeros, not a uniform average.
        weights = jnp.where(mask.any(axis=-1, keepdims=True), weights, 0.0).astype(self.dtype)
        attended = jnp.einsum("bhts,bshk->bthk", weights, v)
        return jnp.einsum("bthk,hkd->btd", attended, w(self.out)) + w(self.out_bias)
