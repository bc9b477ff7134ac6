"""Pushdown attention (Murty et al., EMNLP 2023, §3.3 eq. 6 and Appendix D).

Causal self-attention whose key for token j, seen from query k, is offset by a
depth embedding of the stack tape: with `W[k, j]` the depth of token j after
token k (`tgjax.syntax.stack_tape`),

    score(k, j) = [ q_k · k_j  +  q_k · P_{k-j}  +  q_k · β[W[k, j]] ] / sqrt(d_head)

per head, where P_{k-j} = W_pos PE(k - j) is the Transformer-XL relative
position term the authors' release uses (sinusoidal PE, no u/v global biases,
no bias on any projection), and β is one `[num_depths, d_head]` table per
layer shared by all heads (`depth_space="head"`: the paper's Fig. 7 and the
release). Eq. 6 as written adds the depth vector to h_j *before* the key
projection, [h_j + d_kj]ᵀ W_keyᵀ W_query h_k: `depth_space="model"` keeps a
`[num_depths, d]` table and scores q_k · (W_key β[W[k, j]]) per head.

The paper (§3.4, Fig. 7) materialises the `[T, T, d]` augmented keys
k_j + β[W[k, j]]. Depths are small integers, so here q_k · β[e] is computed
once for every depth value e (`[B, H, T, D]`) and gathered by the tape: the
same scores, with about the memory of ordinary attention (the layer: 1.07×
the plain layer's temporaries, benchmarks/pushdown_layer.py; the attachment
head is another matter, `tgjax.nn.attachment_head`). The relative position
term is gathered the same way from `[B, H, T, P]`.

Depth tables. Text uses real depths with a configured maximum: entries at or
beyond `num_depths` are clipped to `num_depths - 1` here (the release has no
clip and would index out of range, quirk §1.10.4); `count_clipped_depths`
counts them and the Pushdown batch pipeline reports that count. Dyck uses the
release's binary "has been reduced" tape (`num_depths = 2`, tape = depth > 0).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.attention import sinusoidal_encoding
from tgjax.nn.params import dense_init, param
from tgjax.nn.transformer_xl import LayerNorm


def count_clipped_depths(tape: jax.Array, num_depths: int, valid: jax.Array | None = None) -> jax.Array:
    """How many tape entries `[..., T, T]` lie beyond the table (>= num_depths), where `valid` (same shape) holds."""
    beyond = tape >= num_depths
    if valid is not None:
        beyond = beyond & valid
    return jnp.sum(beyond, dtype=jnp.int32)


def causal_mask(length: int, valid: jax.Array | None = None) -> jax.Array:
    """`[T, T]` (or `[B, T, T]` given `valid [B, T]`): True where key j <= query k (and both are real tokens)."""
    mask = jnp.tril(jnp.ones((length, length), dtype=bool))
    if valid is None:
        return mask
    return mask[None] & valid[:, :, None] & valid[:, None, :]


class PushdownAttention(nnx.Module):
    """Multi-head causal self-attention with stack-tape depth embeddings on the keys.

    Parameters: q, k, v `[d, H, d_head]`, the relative-position projection
    `[d, H, d_head]`, the output `[H, d_head, d]` (none with a bias, as the
    release), and the depth table β `[num_depths, d_head]` (one per layer,
    shared by the heads).
    """

    def __init__(self, d_model: int, num_heads: int, *, num_depths: int, max_relative_position: int,
                 depth_space: Literal["head", "model"] = "head", rngs: nnx.Rngs):
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        if num_depths < 0:
            raise ValueError(f"num_depths must be >= 0 (0: no depth term, plain attention), got {num_depths}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.num_depths = int(num_depths)
        self.max_relative_position = int(max_relative_position)
        qkv_shape = (d_model, num_heads, self.head_dim)
        qkv_axes = ("embed", "heads", "kv")
        self.query = param(rngs, dense_init(), qkv_shape, qkv_axes)
        self.key = param(rngs, dense_init(), qkv_shape, qkv_axes)
        self.value = param(rngs, dense_init(), qkv_shape, qkv_axes)
        self.rel_key = param(rngs, dense_init(), qkv_shape, qkv_axes)
        self.out = param(rngs, dense_init(in_axis=(0, 1)), (num_heads, self.head_dim, d_model),
                         ("heads", "kv", "embed"))
        # num_depths = 0 gives the same layer without the depth term (a plain layer of the same size).
        # N(0, 1), the release's `nn.Embedding` default: the depth term starts as large as the keys.
        if depth_space not in ("head", "model"):
            raise ValueError(f"depth_space must be 'head' (Fig. 7, release) or 'model' (eq. 6), got {depth_space!r}")
        self.depth_space = depth_space
        depth_shape, depth_axes = ((self.num_depths, self.head_dim), (None, "kv")) if depth_space == "head" else (
            (self.num_depths, d_model), (None, "embed"))
        self.depth_embedding = (param(rngs, nnx.initializers.normal(1.0), depth_shape, depth_axes)
                                if self.num_depths else None)
        # PE(k - j) for k - j in [0, max]: a constant, not a parameter.
        self.position_table = nnx.Cache(
            jnp.asarray(sinusoidal_encoding(np.arange(self.max_relative_position + 1), d_model)))

    def project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Queries, keys, values `[B, T, H, d_head]` of `x [B, T, d]`."""
        q = jnp.einsum("btd,dhk->bthk", x, self.query[...])
        k = jnp.einsum("btd,dhk->bthk", x, self.key[...])
        v = jnp.einsum("btd,dhk->bthk", x, self.value[...])
        return q, k, v

    def scores(self, q: jax.Array, k: jax.Array, tape: jax.Array, distance: jax.Array) -> jax.Array:
        """Unmasked logits `[B, H, Tq, Tk]` from q `[B, Tq, H, dh]`, k `[B, Tk, H, dh]`.

        Args:
          tape: `[B, Tq, Tk]` integer depths W[query, key] (clipped to the table here).
          distance: `[B or 1, Tq, Tk]` integer query position − key position
            (clipped to [0, max_relative_position]).
        """
        content = jnp.einsum("bthk,bshk->bhts", q, k)
        rel_keys = jnp.einsum("pd,dhk->phk", self.position_table[...], self.rel_key[...])  # [P, H, dh]
        by_distance = jnp.einsum("bthk,phk->bhtp", q, rel_keys)  # [B, H, Tq, P]
        # The indices stay [B or 1, 1, Tq, Tk] (take_along_axis broadcasts them over the heads): a
        # [B, H, Tq, Tk] index array would cost more memory than the scores it gathers.
        distance_index = jnp.clip(distance, 0, self.max_relative_position).astype(jnp.int32)[:, None]
        logits = content + jnp.take_along_axis(by_distance, distance_index, axis=-1)
        if self.depth_embedding is not None:
            if self.depth_space == "head":
                by_depth = jnp.einsum("bthk,ek->bhte", q, self.depth_embedding[...])  # [B, H, Tq, D]
            else:  # W_key β[e] per head, then the same gather
                depth_keys = jnp.einsum("ed,dhk->ehk", self.depth_embedding[...], self.key[...])
                by_depth = jnp.einsum("bthk,ehk->bhte", q, depth_keys)
            depth_index = jnp.clip(tape, 0, self.num_depths - 1).astype(jnp.int32)[:, None]
            logits = logits + jnp.take_along_axis(by_depth, depth_index, axis=-1)
        return logits / np.sqrt(self.head_dim)

    def attend(self, scores: jax.Array, mask: jax.Array, v: jax.Array) -> jax.Array:
        """Softmax of `scores [B, H, Tq, Tk]` where `mask [B or 1, Tq, Tk]`, applied to `v [B, Tk, H, dh]`;
        `[B, Tq, d]`."""
        mask = jnp.broadcast_to(mask[:, None], scores.shape)
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
        weights = jax.nn.softmax(scores, axis=-1)
        # A query that may attend nowhere (padding) gets zeros, not a uniform average.
        weights = jnp.where(mask.any(axis=-1, keepdims=True), weights, 0.0)
        attended = jnp.einsum("bhts,bshk->bthk", weights, v)
        return jnp.einsum("bthk,hkd->btd", attended, self.out[...])

    def __call__(self, x: jax.Array, tape: jax.Array, valid: jax.Array | None = None) -> jax.Array:
        """Pushdown self-attention `[B, T, d]`.

        Args:
          x: `[B, T, d]` hidden states.
          tape: `[B, T, T]` integer stack tape, row k = W_k (depths after token k).
          valid: optional `[B, T]` bool, False on padding.
        """
        length = x.shape[1]
        q, k, v = self.project(x)
        steps = jnp.arange(length)
        distance = (steps[:, None] - steps[None, :])[None]
        mask = causal_mask(length, valid)
        if mask.ndim == 2:
            mask = mask[None]
        return self.attend(self.scores(q, k, tape, distance), mask, v)


class PushdownLayer(nnx.Module):
    """The release's post-LN block: `x <- LN(x + Drop(Attn(x)))`, `x <- LN(x + Drop(W2 Drop(ReLU(W1 x))))`.

    `num_depths = 0` makes it the same block without the depth term (the
    Base-LM layers, and the plain layer of the benchmark).
    """

    def __init__(self, d_model: int, num_heads: int, ffw_hidden: int, *, num_depths: int,
                 max_relative_position: int, dropout: float, depth_space: Literal["head", "model"] = "head",
                 rngs: nnx.Rngs):
        self.attention = PushdownAttention(d_model, num_heads, num_depths=num_depths,
                                           max_relative_position=max_relative_position, depth_space=depth_space,
                                           rngs=rngs)
        self.attention_norm = LayerNorm(d_model, rngs=rngs)
        self.w_in = param(rngs, dense_init(), (d_model, ffw_hidden), ("embed", "mlp"))
        self.b_in = param(rngs, nnx.initializers.zeros, (ffw_hidden,), ("mlp",))
        self.w_out = param(rngs, dense_init(), (ffw_hidden, d_model), ("mlp", "embed"))
        self.b_out = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",))
        self.feed_forward_norm = LayerNorm(d_model, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)

    def __call__(self, x: jax.Array, tape: jax.Array, valid: jax.Array | None = None, *,
                 deterministic: bool = True) -> jax.Array:
        """`x [B, T, d]`, `tape [B, T, T]`, `valid [B, T]` -> `[B, T, d]`."""
        return self.around_attention(x, self.attention(x, tape, valid), deterministic=deterministic)

    def around_attention(self, x: jax.Array, attended: jax.Array, *, deterministic: bool = True) -> jax.Array:
        """The block given its attention's output `attended` (`[..., d]`, as x): the incremental decoder's too."""
        drop = lambda a: self.dropout(a, deterministic=deterministic)  # noqa: E731
        x = self.attention_norm(x + drop(attended))
        hidden = drop(jax.nn.relu(x @ self.w_in[...] + self.b_in[...]))
        return self.feed_forward_norm(x + drop(hidden @ self.w_out[...] + self.b_out[...]))


def stack_tape_from_nodes(node_start: jax.Array, node_end: jax.Array, length: int, *,
                          binary: bool = False) -> jax.Array:
    """The stack tape `[B, T, T]` from binary-node spans `[B, K]` (-1 padding), on device.

    ``W[k, j] = #{nodes (s, e): s <= j <= e <= k}``: each node adds 1 to the
    block ``[e:, s:e+1]``, written as a 2-D difference array (a scatter-add)
    and two cumulative sums. ``binary``: the Dyck tape, 1 where a token has
    taken part in any reduce. Nodes ending at or beyond T touch no row.
    """
    batch = node_start.shape[0]
    valid = (node_start >= 0) & (node_end >= node_start) & (node_end < length)
    out_of_range = length + 2  # a scatter index that `mode="drop"` discards
    rows = jnp.where(valid, node_end, out_of_range)
    batch_index = jnp.broadcast_to(jnp.arange(batch)[:, None], node_start.shape)
    diff = jnp.zeros((batch, length + 1, length + 1), jnp.int32)
    diff = diff.at[batch_index, rows, jnp.where(valid, node_start, out_of_range)].add(1, mode="drop")
    diff = diff.at[batch_index, rows, jnp.where(valid, node_end + 1, out_of_range)].add(-1, mode="drop")
    tape = jnp.cumsum(jnp.cumsum(diff, axis=2), axis=1)[:, :length, :length]
    return jnp.minimum(tape, 1) if binary else tape
