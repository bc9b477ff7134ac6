"""UDGN: a dependency parser feeding a stack of Dependency Graph Network layers, trained as a
masked language model (thesis ch. 4; the release's model restated in
../shared/reference/released-code.md §4.1-4.3).

    model = UDGN(UDGNConfig(vocab_size=V), rngs=nnx.Rngs(0))
    out = model(tokens, valid, deterministic=True)

- `tokens` [B, T] int (masked positions already replaced by the mask id; the
  masking itself belongs to the MLM task); `valid` [B, T] bool, False on padding.
- `out.logits` [B, T, V]: E x_i -> Drop -> L DGN layers (one mask A for all
  layers) -> LayerNorm(d) -> Drop -> tied output x E^T + b (b zero-initialised).
- `out.head_probs` [B, T, T]: the parser's p(head of i = j); `out.mask` [B, T, T]:
  A = H + H^T - H*H^T (`tgjax.nn.dgn.dependency_mask`). Entries in padded rows or
  columns are computed but meaningless (the layers mask padded keys).

`detach_parser=True` stops the MLM gradient at the parser (the release's
`--parser_loss` mode, which also adds a supervised head loss: a task's
business). No absolute position embedding (the release's default). The word
embedding is U(±0.1), as the parser's. Defaults are the release's PTB sizes.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.nn.dependency_parser import DependencyParser
from tgjax.nn.dgn import DependencyGraphLayer, dependency_mask
from tgjax.nn.params import param

__all__ = ["UDGN", "UDGNConfig", "UDGNOutput"]


@dataclasses.dataclass(frozen=True)
class UDGNConfig:
    """Sizes and rates; defaults are the release's (nemb 512, 8 layers, 8 × 128 channels, ...)."""

    vocab_size: int
    d_model: int = 512  # nemb: word and parser embedding size
    num_layers: int = 8
    num_channels: int = 8  # nheads
    channel_size: int = 128  # head_size
    parser_hidden: int = 512
    parser_layers: int = 3
    num_tags: int = 0  # thesis tag mixture: 5; the release: 0
    dropout: float = 0.2
    attention_dropout: float = 0.1  # dropatt
    parser_dropout: float = 0.2
    detach_parser: bool = False


class UDGNOutput(NamedTuple):
    logits: jax.Array  # [B, T, V]
    head_probs: jax.Array  # [B, T, T]
    mask: jax.Array  # [B, T, T]


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _dropout(x, rate, key):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


class UDGN(nnx.Module):
    """The UDGN masked language model (module docstring)."""

    def __init__(self, config: UDGNConfig, *, rngs: nnx.Rngs, dtype=jnp.float32):
        c = config
        self.config = c
        self.parser = DependencyParser(c.vocab_size, c.d_model, c.parser_hidden, c.parser_layers, rngs=rngs,
                                       dropout=c.parser_dropout, num_tags=c.num_tags, dtype=dtype)
        self.embedding = param(rngs, _uniform(0.1), (c.vocab_size, c.d_model), ("vocab", "embed"), dtype)
        self.layers = nnx.List([
            DependencyGraphLayer(c.d_model, c.num_channels, c.channel_size, rngs=rngs, dropout=c.dropout,
                                 attention_dropout=c.attention_dropout, dtype=dtype)
            for _ in range(c.num_layers)
        ])
        self.norm = nnx.LayerNorm(c.d_model, epsilon=1e-5, rngs=rngs)
        self.output_bias = param(rngs, nnx.initializers.zeros, (c.vocab_size,), ("vocab",), dtype)
        self.deterministic = False
        self.rngs = rngs["dropout"].fork() if c.dropout > 0.0 else nnx.data(None)

    def __call__(self, tokens: jax.Array, valid: jax.Array | None = None, *,
                 deterministic: bool | None = None) -> UDGNOutput:
        c = self.config
        deterministic = self.deterministic if deterministic is None else deterministic
        if valid is None:
            valid = jnp.ones(tokens.shape, bool)
        use_dropout = not deterministic and self.rngs is not None
        drop = (lambda x: _dropout(x, c.dropout, self.rngs())) if use_dropout else (lambda x: x)
        head_probs = self.parser(tokens, valid, deterministic=deterministic)
        if c.detach_parser:
            head_probs = jax.lax.stop_gradient(head_probs)
        mask = dependency_mask(head_probs)
        embedding = self.embedding[...]
        x = drop(embedding[tokens])
        for layer in self.layers:
            x = layer(x, mask, valid, deterministic=deterministic)
        x = drop(self.norm(x))
        logits = x @ embedding.T + self.output_bias[...]
        return UDGNOutput(logits, head_probs, mask)
