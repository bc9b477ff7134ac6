"""The Transformer-XL layer of Transformer Grammars and their baselines (post-layer-norm).

Every module takes `dtype` (compute) and `param_dtype` (storage): parameters
are cast to `dtype` where they are used, so bf16 compute keeps float32
parameters (and float32 optimiser state). Layer-norm statistics are taken in
float32 whatever `dtype` is.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.nn.attention import RelativeMultiHeadAttention
from tgjax.nn.params import dense_init, param


class FeedForward(nnx.Module):
    """GELU feed-forward `[B, T, d] -> [B, T, d]`."""

    def __init__(self, d_model: int, hidden: int, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
        self.dtype = dtype
        self.w_in = param(rngs, dense_init(), (d_model, hidden), ("embed", "mlp"), param_dtype)
        self.b_in = param(rngs, nnx.initializers.zeros, (hidden,), ("mlp",), param_dtype)
        self.w_out = param(rngs, dense_init(), (hidden, d_model), ("mlp", "embed"), param_dtype)
        self.b_out = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",), param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        w = lambda variable: variable[...].astype(self.dtype)
        h = jax.nn.gelu(x.astype(self.dtype) @ w(self.w_in) + w(self.b_in))
        return h @ w(self.w_out) + w(self.b_out)


class LayerNorm(nnx.Module):
    """`[..., d] -> [..., d]` in `dtype`; mean and variance in float32."""

    def __init__(self, d_model: int, *, rngs: nnx.Rngs, dtype=jnp.float32, param_dtype=jnp.float32):
        self.dtype = dtype
        self.scale = param(rngs, nnx.initializers.ones, (d_model,), ("embed",), param_dtype)
        self.bias = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",), param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(jnp.float32)
        mean = x.mean(-1, keepdims=True)
        var = jnp.square(x - mean).mean(-1, keepdims=True)
        scale, bias = self.scale[...].astype(jnp.float32), self.bias[...].astype(jnp.float32)
        y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias
        return y.astype(self.dtype)


class TransformerXLLayer(nnx.Module):
    """Attention then feed-forward, each `LayerNorm(x + Dropout(sublayer(x)))`.

    With `distinct_compose`, COMPOSE positions (`compose [B, T]`) use their own
    attention weights and STACK positions the others (the `tg_distinct_mha`
    variant); both are computed and selected per position.
    """

    def __init__(self, d_model: int, num_heads: int, ffw_hidden: int, *, rel_min: int, rel_max: int,
                 dropout: float, distinct_compose: bool = False, rngs: nnx.Rngs,
                 dtype=jnp.float32, param_dtype=jnp.float32):
        dtypes = dict(dtype=dtype, param_dtype=param_dtype)
        kwargs = dict(rel_min=rel_min, rel_max=rel_max, rngs=rngs, **dtypes)
        self.attention = RelativeMultiHeadAttention(d_model, num_heads, **kwargs)
        self.compose_attention = RelativeMultiHeadAttention(d_model, num_heads, **kwargs) if distinct_compose else None
        self.attention_norm = LayerNorm(d_model, rngs=rngs, **dtypes)
        self.feed_forward = FeedForward(d_model, ffw_hidden, rngs=rngs, **dtypes)
        self.feed_forward_norm = LayerNorm(d_model, rngs=rngs, **dtypes)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x, memory, mask, relpos, compose=None, *, deterministic: bool):
        """`x [B, T, d]`, `memory [B, M, d]`, mask/relpos `[B, (H,) T, M + T]` -> `[B, T, d]`."""
        return self.around_attention(x, lambda attention: attention(x, memory, mask, relpos), compose,
                                     deterministic=deterministic)

    def attention_modules(self) -> list:
        """The attention modules: the STACK one, and with `distinct_compose` the COMPOSE one."""
        return [self.attention] + ([self.compose_attention] if self.compose_attention is not None else [])

    def around_attention(self, x, attend, compose=None, *, deterministic: bool):
        """The layer with `attend(attention_module) -> [B, T, d]` as its attention (a KV-cached decoder's too)."""
        attended = attend(self.attention)
        if self.compose_attention is not None:
            attended = jnp.where(compose[..., None], attend(self.compose_attention), attended)
        x = self.attention_norm(x + self.dropout(attended, deterministic=deterministic))
        x = self.feed_forward_norm(x + self.dropout(self.feed_forward(x), deterministic=deterministic))
        return x
