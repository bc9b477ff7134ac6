"""The Dependency Graph Network layer of UDGN, and its dependency mask (thesis ch. 4;
restated from the release in ../shared/reference/released-code.md §4.2-4.3).

Mask. From head probabilities P [B, T, T] (row i: p(head of i = j)), H is P
with its diagonal set to 0 (not renormalised) and the mask

    A = H + Hᵀ − H ⊙ Hᵀ                                       [B, T, T]

is the probability that i -> j or j -> i, the two taken as independent
(thesis eq. 4.2.8). Direction features: L_ij = 1[j < i], R_ij = 1[j > i].

Layer (`DependencyGraphLayer`), K channels of width d_c on inputs x [B, T, d]:

    [q, k, v, g] = x W_in + b_in                       each [B, T, K, d_c]
    s_ijc = (q_ic · k_jc + b^L_c L_ij + b^R_c R_ij) / sqrt(d_c)
    w_ijc = softmax_c(s_ij·) · (A_ij + 1e-6)           channels compete, positions do not
    o_ic  = σ(g_ic) · Σ_j w_ijc tanh(v_jc)
    y_i   = x_i + Drop(W_out Drop(concat_c o_ic) + b_out)

The softmax is over channels, so Σ_c w_ijc = A_ij + 1e-6: there is no
normalisation over j. The direction biases are added before the 1/sqrt(d_c)
scaling (as the release does). Padded keys get w = 0; attention dropout then
applies to w. No feed-forward sub-layer and no LayerNorm inside the layer.
Initialisation as the release: W_in, W_out xavier-uniform, biases 0,
b^L, b^R uniform in ±0.1.

Switches for the thesis' ablations (Table 4.4): `gated=False` drops σ(g),
`nonlinear=False` drops the tanh on v, `competition="sigmoid"` replaces the
softmax over channels by an independent σ(s_ijc) per channel,
`direction_bias=False` drops b^L, b^R (the thesis then adds position
encodings, a model's business); a single channel is `num_channels=1`. The mask is the caller's: any
[B, T, T] array in [0, 1] works, so the layer can sit in another model.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import param

__all__ = ["DependencyGraphLayer", "dependency_mask", "direction_features"]

MASK_EPSILON = 1e-6  # the release's floor inside log(A + eps)


def dependency_mask(head_probs: jax.Array) -> jax.Array:
    """A = H + Hᵀ − H ⊙ Hᵀ with H = head_probs, diagonal zeroed; [B, T, T] -> [B, T, T]."""
    size = head_probs.shape[-1]
    heads = head_probs * (1.0 - jnp.eye(size, dtype=head_probs.dtype))
    children = jnp.swapaxes(heads, -1, -2)
    return heads + children - heads * children


def direction_features(length: int, dtype=jnp.float32) -> tuple[jax.Array, jax.Array]:
    """(L, R) [T, T]: L_ij = 1[j < i] (key to the left), R_ij = 1[j > i]."""
    i = jnp.arange(length)[:, None]
    j = jnp.arange(length)[None, :]
    return (j < i).astype(dtype), (j > i).astype(dtype)


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class DependencyGraphLayer(nnx.Module):
    """One DGN layer (module docstring), usable alone with the caller's mask.

    Args:
      d_model: d, the input and output width.
      num_channels: K (the release's `nheads`, 8).
      channel_size: d_c (the release's `head_size`, 128); K · d_c need not be d.
      dropout: on concat_c o and on the output projection (release 0.2).
      attention_dropout: on w (the release's `dropatt`, 0.1).
      gated, nonlinear: the σ(g) gate and the tanh on v (ablations when False).
      competition: "channels" (softmax over channels, the model) or "sigmoid" (ablation).
      direction_bias: the b^L, b^R biases (ablation when False).
    """

    def __init__(self, d_model: int, num_channels: int, channel_size: int, *, rngs: nnx.Rngs,
                 dropout: float = 0.0, attention_dropout: float = 0.0, gated: bool = True,
                 nonlinear: bool = True, competition: str = "channels", direction_bias: bool = True,
                 dtype=jnp.float32):
        if competition not in ("channels", "sigmoid"):
            raise ValueError(f"competition must be 'channels' (softmax over channels) or 'sigmoid', "
                             f"got {competition!r}")
        self.d_model, self.num_channels, self.channel_size = d_model, num_channels, channel_size
        self.gated, self.nonlinear = gated, nonlinear
        self.competition, self.use_direction_bias = competition, direction_bias
        self.dropout, self.attention_dropout = dropout, attention_dropout
        hidden = num_channels * channel_size
        xavier = nnx.initializers.xavier_uniform()
        # [d, 4, K, d_c]: the release's one Linear d -> 4·K·d_c, split as q, k, v, g.
        self.w_in = param(rngs, lambda key, shape, dt: xavier(key, (d_model, 4 * hidden), dt).reshape(shape),
                          (d_model, 4, num_channels, channel_size), ("embed", None, "heads", "kv"), dtype)
        self.b_in = param(rngs, nnx.initializers.zeros, (4, num_channels, channel_size), (None, "heads", "kv"), dtype)
        # [2, K]: row 0 the bias for keys on the left (L), row 1 for keys on the right (R).
        self.direction_bias = param(rngs, _uniform(0.1), (2, num_channels), (None, "heads"), dtype)
        self.w_out = param(rngs, lambda key, shape, dt: xavier(key, (hidden, d_model), dt).reshape(shape),
                           (num_channels, channel_size, d_model), ("heads", "kv", "embed"), dtype)
        self.b_out = param(rngs, nnx.initializers.zeros, (d_model,), ("embed",), dtype)
        self.deterministic = False
        self.rngs = rngs["dropout"].fork() if (dropout > 0.0 or attention_dropout > 0.0) else nnx.data(None)

    def _projections(self, x: jax.Array):
        projected = jnp.einsum("btd,dpkc->bptkc", x, self.w_in[...]) + self.b_in[...][None, :, None]
        return projected[:, 0], projected[:, 1], projected[:, 2], projected[:, 3]  # each [B, T, K, d_c]

    def channel_weights(self, x: jax.Array, mask: jax.Array, valid: jax.Array | None = None) -> jax.Array:
        """w [B, T(i), T(j), K] before attention dropout; Σ_c w_ijc = A_ij + 1e-6 on valid keys, 0 on padding."""
        q, k, _, _ = self._projections(x)
        return jnp.transpose(self._weights(q, k, mask, valid), (0, 2, 3, 1))

    def _weights(self, q, k, mask, valid):
        """w [B, K, T(i), T(j)]: channel-major, so that the positions are the minor axes (as in attention)."""
        length = q.shape[1]
        left, right = direction_features(length, q.dtype)
        bias = self.direction_bias[...]
        scores = jnp.einsum("bikc,bjkc->bkij", q, k)
        if self.use_direction_bias:
            scores = scores + bias[0][:, None, None] * left + bias[1][:, None, None] * right
        scores = scores / np.sqrt(self.channel_size)
        # exp(log_softmax_c + log(A + eps)) as the release writes it: softmax over channels times the mask.
        compete = jax.nn.softmax(scores, axis=1) if self.competition == "channels" else jax.nn.sigmoid(scores)
        weights = compete * (mask.astype(q.dtype) + MASK_EPSILON)[:, None]
        if valid is not None:
            weights = jnp.where(valid[:, None, None, :], weights, 0.0)
        return weights

    def __call__(self, x: jax.Array, mask: jax.Array, valid: jax.Array | None = None, *,
                 deterministic: bool | None = None) -> jax.Array:
        """y [B, T, d] from x [B, T, d], the mask A [B, T, T] and valid [B, T] bool (None: no padding)."""
        deterministic = self.deterministic if deterministic is None else deterministic
        use_dropout = not deterministic and self.rngs is not None
        q, k, v, g = self._projections(x)
        weights = self._weights(q, k, mask, valid)
        if use_dropout and self.attention_dropout > 0.0:
            weights = _dropout(weights, self.attention_dropout, self.rngs())
        values = jnp.tanh(v) if self.nonlinear else v
        channels = jnp.einsum("bkij,bjkc->bikc", weights, values)
        if self.gated:
            channels = jax.nn.sigmoid(g) * channels
        if use_dropout and self.dropout > 0.0:
            channels = _dropout(channels, self.dropout, self.rngs())
        out = jnp.einsum("btkc,kcd->btd", channels, self.w_out[...]) + self.b_out[...]
        if use_dropout and self.dropout > 0.0:
            out = _dropout(out, self.dropout, self.rngs())
        return x + out


def _dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)
