"""The Transformer-XL layer of Transformer Grammars and their baselines (post-layer-norm)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.nn.attention import RelativeMultiHeadAttention
from tgjax.nn.params import dense_init, param


class FeedForward(nnx.Module):
    """GELU feed-forward `[B, T, d] -> [B, T, d]`."""

    def __init__(self, d_model: int, hidden: int, *, rngs: nnx.Rngs):
        self.w_in = param(rngs, dense_init(), (d_model, hidden), ("embed", "mlp"))
        self.b_in = param(rngs, nnx.initializers.zeros, (hidden,), ("mlp",))
        self.w_out = param(rngs, dense_init(), (hidden, d_model), ("mlp", "embed"))
        self.b_out = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",))

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.gelu(x @ self.w_in[...] + self.b_in[...])
        return h @ self.w_out[...] + self.b_out[...]


class LayerNorm(nnx.Module):
    def __init__(self, d_model: int, *, rngs: nnx.Rngs):
        self.scale = param(rngs, nnx.initializers.ones, (d_model,), ("embed",))
        self.bias = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",))

    def __call__(self, x: jax.Array) -> jax.Array:
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * self.scale[...] + self.bias[...]


class TransformerXLLayer(nnx.Module):
    """Attention then feed-forward, each `LayerNorm(x + Dropout(sublayer(x)))`.

    With `distinct_compose`, COMPOSE positions (`compose [B, T]`) use their own
    attention weights and STACK positions the others (the `tg_distinct_mha`
    variant); both are computed and selected per position.
    """

    def __init__(self, d_model: int, num_heads: int, ffw_hidden: int, *, rel_min: int, rel_max: int,
                 dropout: float, distinct_compose: bool = False, rngs: nnx.Rngs):
        kwargs = dict(rel_min=rel_min, rel_max=rel_max, rngs=rngs)
        self.attention = RelativeMultiHeadAttention(d_model, num_heads, **kwargs)
        self.compose_attention = RelativeMultiHeadAttention(d_model, num_heads, **kwargs) if distinct_compose else None
        self.attention_norm = LayerNorm(d_model, rngs=rngs)
        self.feed_forward = FeedForward(d_model, ffw_hidden, rngs=rngs)
        self.feed_forward_norm = LayerNorm(d_model, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x, memory, mask, relpos, compose=None, *, deterministic: bool):
        """`x [B, T, d]`, `memory [B, M, d]`, mask/relpos `[B, (H,) T, M + T]` -> `[B, T, d]`."""
        attended = self.attention(x, memory, mask, relpos)
        if self.compose_attention is not None:
            composed = self.compose_attention(x, memory, mask, relpos)
            attended = jnp.where(compose[..., None], composed, attended)
        x = self.attention_norm(x + self.dropout(attended, deterministic=deterministic))
        x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x), deterministic=deterministic))
        return x
