"""UDGN's dependency parser: p(head of i = j) for every token (thesis ch. 4; the release's
computation restated in ../shared/reference/released-code.md §4.1).

    e_i       = E_p[x_i]                                        [B, T, d_emb]  (own embedding, U(±0.1))
              (+ W_tag · softmax(T[x_i])[1:] with the thesis' tag mixture, `num_tags` > 0)
    h         = Drop(BiLSTM_L(Drop(e)))                         [B, T, 2·H]    (dropout between layers too)
    [π ; γ]   = h W_f + b_f                                     [B, T, H] each: parent, child
    ℓ_ij      = γ_i · π_j / sqrt(d_emb)                         [B, T, T]      (scaled by the embedding size)
    P_ij      = softmax_j(ℓ_ij), padded j excluded              p(head of i = j); j = i is allowed

Padding: padded keys get −∞ (the smallest float, so an all-padding row stays
finite); rows of padded tokens are computed like the others and never read
(the DGN mask masks padded keys, and a valid pair (i, j) reads only valid
rows). The BiLSTM reads each sequence only up to its length (as the
release's packed sequences): the backward direction starts at the last real
token.

Tag mixture (thesis eqs. 4.2.1-4.2.2; deleted in the release, commit b47bb39):
a distribution over `num_tags` latent tags plus a "null" tag per word type,
T ∈ R^{V × (num_tags + 1)} initialised to zero (uniform at start); the null
component is dropped and the rest mix W_tag ∈ R^{num_tags × d_emb} (no bias,
U(±0.1)) into the embedding. `num_tags=0` is the release (the default here
too); the thesis used 5.

Initialisation as the release: LSTM weights and biases U(±1/sqrt(H))
(PyTorch's default), gate order i, f, g, o; W_f xavier-uniform, b_f 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import param

__all__ = ["DependencyParser", "lstm_scan", "reverse_valid"]


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def lstm_scan(x: jax.Array, w_ih: jax.Array, w_hh: jax.Array, b: jax.Array) -> jax.Array:
    """A one-direction LSTM from zero state: x [B, T, D_in] -> h [B, T, H].

    w_ih [D_in, 4H], w_hh [H, 4H], b [4H]; gates in PyTorch's order i, f, g, o.
    """
    hidden = w_hh.shape[0]
    gates_x = jnp.einsum("btd,dg->tbg", x, w_ih) + b  # time-major for the scan

    def step(carry, gx):
        h, c = carry
        gates = gx + h @ w_hh
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    zeros = jnp.zeros((x.shape[0], hidden), x.dtype)
    _, hs = jax.lax.scan(step, (zeros, zeros), gates_x)
    return jnp.swapaxes(hs, 0, 1)


def reverse_valid(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Reverses each sequence's first `lengths[b]` steps, leaving padding in place: [B, T, ...].

    Its own inverse, so the backward LSTM is reverse -> scan -> reverse.
    """
    T = x.shape[1]
    t = jnp.arange(T)[None, :]
    index = jnp.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return jnp.take_along_axis(x, index.reshape(index.shape + (1,) * (x.ndim - 2)), axis=1)


def _dropout(x, rate, key):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


class DependencyParser(nnx.Module):
    """Head distributions P [B, T, T] from token ids (module docstring).

    Args:
      vocab_size: V.
      embedding_size: d_emb (release `nemb`, 512); also the score's scale.
      hidden_size: H per direction (release 512).
      num_layers: BiLSTM layers (release 3).
      dropout: the release's `parser_dropout` (0.2), on e, between layers and on h.
      num_tags: latent tags of the thesis' tag mixture; 0 = none (the release).
    """

    def __init__(self, vocab_size: int, embedding_size: int = 512, hidden_size: int = 512,
                 num_layers: int = 3, *, rngs: nnx.Rngs, dropout: float = 0.0, num_tags: int = 0,
                 dtype=jnp.float32):
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.embedding_size, self.hidden_size, self.num_layers = embedding_size, hidden_size, num_layers
        self.dropout, self.num_tags = dropout, num_tags
        self.embedding = param(rngs, _uniform(0.1), (vocab_size, embedding_size), ("vocab", "embed"), dtype)
        if num_tags > 0:
            self.tag_logits = param(rngs, nnx.initializers.zeros, (vocab_size, num_tags + 1), ("vocab", None), dtype)
            self.tag_embedding = param(rngs, _uniform(0.1), (num_tags, embedding_size), (None, "embed"), dtype)
        bound = 1.0 / float(np.sqrt(hidden_size))
        layers = []
        for layer in range(num_layers):
            d_in = embedding_size if layer == 0 else 2 * hidden_size
            directions = []
            for _ in range(2):  # forward, backward
                directions.append(nnx.Dict(
                    w_ih=param(rngs, _uniform(bound), (d_in, 4 * hidden_size), (None, "mlp"), dtype),
                    w_hh=param(rngs, _uniform(bound), (hidden_size, 4 * hidden_size), (None, "mlp"), dtype),
                    # PyTorch has b_ih + b_hh, each U(±1/sqrt(H)): their sum is what matters.
                    b=nnx.Param(jax.random.uniform(rngs.params(), (4 * hidden_size,), dtype, -bound, bound)
                                + jax.random.uniform(rngs.params(), (4 * hidden_size,), dtype, -bound, bound),
                                logical_axes=("mlp",)),
                ))
            layers.append(nnx.List(directions))
        self.lstm = nnx.List(layers)
        xavier = nnx.initializers.xavier_uniform()
        self.w_f = param(rngs, xavier, (2 * hidden_size, 2 * hidden_size), ("mlp", None), dtype)
        self.b_f = param(rngs, nnx.initializers.zeros, (2 * hidden_size,), (None,), dtype)
        self.deterministic = False
        self.rngs = rngs["dropout"].fork() if dropout > 0.0 else nnx.data(None)

    def embed(self, tokens: jax.Array) -> jax.Array:
        """e [B, T, d_emb] (with the tag mixture when num_tags > 0)."""
        e = self.embedding[...][tokens]
        if self.num_tags > 0:
            tags = jax.nn.softmax(self.tag_logits[...][tokens], axis=-1)[..., 1:]  # drop the null tag
            e = e + tags @ self.tag_embedding[...]
        return e

    def encode(self, tokens: jax.Array, valid: jax.Array, *, deterministic: bool | None = None) -> jax.Array:
        """h [B, T, 2H]: the BiLSTM states (forward | backward), dropout applied in training mode."""
        deterministic = self.deterministic if deterministic is None else deterministic
        drop = (lambda x: _dropout(x, self.dropout, self.rngs())) if (not deterministic and self.rngs is not None) \
            else (lambda x: x)
        lengths = jnp.sum(valid, axis=1).astype(jnp.int32)
        h = drop(self.embed(tokens))
        for index, (forward, backward) in enumerate(self.lstm):
            if index > 0:
                h = drop(h)
            ahead = lstm_scan(h, forward["w_ih"][...], forward["w_hh"][...], forward["b"][...])
            behind = reverse_valid(
                lstm_scan(reverse_valid(h, lengths), backward["w_ih"][...], backward["w_hh"][...], backward["b"][...]),
                lengths)
            h = jnp.concatenate([ahead, behind], axis=-1)
        return drop(h)

    def head_logits(self, tokens: jax.Array, valid: jax.Array, *, deterministic: bool | None = None) -> jax.Array:
        """ℓ [B, T, T], padded keys at the smallest float."""
        h = self.encode(tokens, valid, deterministic=deterministic)
        projected = h @ self.w_f[...] + self.b_f[...]
        parent, child = projected[..., : self.hidden_size], projected[..., self.hidden_size:]
        logits = jnp.einsum("bic,bjc->bij", child, parent) / np.sqrt(self.embedding_size)
        return jnp.where(valid[:, None, :], logits, jnp.finfo(logits.dtype).min)

    def __call__(self, tokens: jax.Array, valid: jax.Array | None = None, *,
                 deterministic: bool | None = None) -> jax.Array:
        """P [B, T, T] = p(head of i = j) from tokens [B, T] int and valid [B, T] bool (None: all valid)."""
        if valid is None:
            valid = jnp.ones(tokens.shape, bool)
        return jax.nn.softmax(self.head_logits(tokens, valid, deterministic=deterministic), axis=-1)
