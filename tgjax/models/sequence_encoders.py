"""Same-size baselines for the Ordered Memory classifiers: an LSTM and a Transformer sentence encoder.

The thesis (§3.6) compares Ordered Memory on ListOps and logical inference with
LSTM and Transformer encoders. Here each baseline replaces only the encoder of
`tgjax.models.ordered_memory`'s classifier: the same embedding, the same heads
(`SentenceClassifier`: ListOps, a linear map of the sentence vector; logic, the
siamese features [u; v; u*v; |u - v|] -> MLP), the same explicit-key dropout,
so that a run differs from the Ordered Memory run of the same config in the
encoder alone (`model.encoder` of `tgjax.train.tasks.classification`).

* `LSTMEncoder`: `num_layers` stacked `flax.nnx.LSTMCell`s (gates i, f, g, o;
  c' = f*c + i*g, h' = o*tanh(c')) from the zero state. On a padded step the
  state is carried unchanged, so the sentence vector, the top layer's h after
  the last real token, is the same for left padding (ListOps' batches) and
  right padding (logic's), and nothing in a padded position reaches it.
  x [B, T, D_in], valid [B, T] -> [B, H]. Dropout (`cell_dropout`) on the
  inputs of layers 2..L.
* `TransformerEncoder`: a linear map D_in -> d, plus sinusoidal positions
  counted over the real tokens only (position 0 is each row's first real
  token, whatever the padding side), `num_layers` pre-LN blocks
  (x + MHA(LN(x)), x + FFN(LN(x)), FFN = Linear(d -> m*d) -> ReLU ->
  Linear(m*d -> d)), a final LayerNorm, and the mean over the real tokens.
  Padded keys are masked out of attention and padded positions out of the
  mean. x [B, T, D_in], valid [B, T] -> [B, d]. Dropout: `attention_dropout`
  on the attention probabilities, `cell_dropout` on each residual branch.

Neither has pointers, so no trees and no parse F1: `encode` returns None as
its extra, where Ordered Memory returns its pointers.

The sizes are matched by parameter count: `matched_hidden_size` picks the
width (H, or d in steps of `num_heads`) whose classifier's count is closest
to the Ordered Memory classifier of the same config (`SIZE_TOLERANCE`: the
gap the tests accept, 10%).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.models.ordered_memory import (
    OMClassifierConfig,
    OrderedMemoryClassifier,
    SentenceClassifier,
    _dropout,
    check_classifier_config,
)
from tgjax.nn.attention import sinusoidal_encoding
from tgjax.nn.params import count_parameters, logical

__all__ = ["BASELINES", "ENCODERS", "SIZE_TOLERANCE", "BaselineClassifier", "BaselineClassifierConfig",
           "LSTMEncoder", "TransformerEncoder", "baseline_config", "build_classifier", "matched_hidden_size",
           "parameter_count"]

ENCODERS = ("ordered_memory", "lstm", "transformer")
BASELINES = ENCODERS[1:]
SIZE_TOLERANCE = 0.10  # how far from the Ordered Memory's parameter count a matched baseline may land


@dataclasses.dataclass(frozen=True)
class BaselineClassifierConfig:
    """A baseline classifier: `OMClassifierConfig`'s data, embedding, head and dropout fields, another encoder.

    encoder: "lstm" or "transformer".
    hidden_size: the LSTM's H or the Transformer's d (a multiple of num_heads); the sentence vector's size.
    num_layers: LSTM layers or Transformer blocks.
    num_heads, ffw_multiplier: the Transformer's heads and feed-forward width (ffw_multiplier * d).
    attention_dropout: the Transformer's attention probabilities; cell_dropout: between LSTM layers, or on the
      Transformer's residual branches.
    """

    kind: str
    vocab_size: int
    num_classes: int
    pad_id: int
    encoder: str
    embedding_size: int = 128
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    ffw_multiplier: int = 4
    mlp_hidden_size: int = 0
    embedding_dropout: float = 0.1
    output_dropout: float = 0.2
    attention_dropout: float = 0.3
    cell_dropout: float = 0.1
    embedding_init_range: float | None = None

    def __post_init__(self):
        if self.encoder not in BASELINES:
            raise ValueError(f"encoder must be one of {BASELINES}, got {self.encoder!r}")
        check_classifier_config(self, sizes=("hidden_size", "num_layers", "num_heads", "ffw_multiplier"))
        if self.encoder == "transformer" and self.hidden_size % self.num_heads:
            raise ValueError(f"the Transformer's hidden_size {self.hidden_size} is not a multiple of num_heads "
                             f"{self.num_heads}")


class LSTMEncoder(nnx.Module):
    """Stacked LSTM: x [B, T, D_in], valid [B, T] -> the top layer's h after each row's last real step [B, H].

    `flax.nnx.LSTMCell`s (Flax's initialisation: LeCun-normal input kernels, orthogonal recurrent kernels, zero
    biases); a padded step leaves (c, h) as they were.
    """

    def __init__(self, in_features: int, hidden_size: int, num_layers: int, *, rngs: nnx.Rngs):
        self.hidden_size = hidden_size
        self.cells = nnx.List([
            nnx.LSTMCell(in_features if layer == 0 else hidden_size, hidden_size, rngs=rngs,
                         kernel_metadata=logical("embed", "hidden"),
                         recurrent_kernel_metadata=logical(None, "hidden"), bias_metadata=logical("hidden"))
            for layer in range(num_layers)])

    def __call__(self, x, valid, *, dropout_key=None, dropout: float = 0.0):
        batch = x.shape[0]
        keys = [None] * len(self.cells) if dropout_key is None else list(jax.random.split(dropout_key, len(self.cells)))
        steps = jnp.swapaxes(x, 0, 1)  # [T, B, D]: time-major for the scan
        real = jnp.swapaxes(valid, 0, 1)[..., None].astype(bool)  # [T, B, 1]
        h = jnp.zeros((batch, self.hidden_size), x.dtype)
        for layer, cell in enumerate(self.cells):
            if layer:
                steps = _dropout(keys[layer], dropout, steps)

            def step(carry, inputs, cell=cell):
                x_t, real_t = inputs
                new, _ = cell(carry, x_t)
                carry = tuple(jnp.where(real_t, n, old) for n, old in zip(new, carry))
                return carry, carry[1]

            zeros = jnp.zeros((batch, self.hidden_size), x.dtype)
            (_, h), steps = jax.lax.scan(step, (zeros, zeros), (steps, real))
        return h


class TransformerBlock(nnx.Module):
    """One pre-LN block: x + MHA(LN(x)), then x + FFN(LN(x)); x [B, T, d], valid [B, T] (keys) -> [B, T, d]."""

    def __init__(self, d_model: int, num_heads: int, ffw_size: int, *, rngs: nnx.Rngs):
        def linear(fan_in, fan_out, axes):
            return nnx.Linear(fan_in, fan_out, rngs=rngs, kernel_metadata=logical(*axes),
                              bias_metadata=logical(axes[1]))

        def norm():
            return nnx.LayerNorm(d_model, rngs=rngs, scale_metadata=logical("embed"), bias_metadata=logical("embed"))

        self.num_heads = num_heads
        self.attention_norm = norm()
        self.query = linear(d_model, d_model, ("embed", "heads"))
        self.key = linear(d_model, d_model, ("embed", "heads"))
        self.value = linear(d_model, d_model, ("embed", "heads"))
        self.attention_out = linear(d_model, d_model, ("heads", "embed"))
        self.feedforward_norm = norm()
        self.feedforward_in = linear(d_model, ffw_size, ("embed", "mlp"))
        self.feedforward_out = linear(ffw_size, d_model, ("mlp", "embed"))

    def attention(self, x, valid, key=None, rate: float = 0.0):
        """Multi-head self-attention of x [B, T, d]; padded keys (valid False) get no weight."""
        batch, length, width = x.shape
        heads = self.num_heads

        def split(y):
            return y.reshape(batch, length, heads, width // heads)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = jnp.einsum("bqhc,bkhc->bhqk", q, k) / np.sqrt(width // heads)
        scores = jnp.where(valid[:, None, None, :], scores, jnp.finfo(scores.dtype).min)
        weights = _dropout(key, rate, jax.nn.softmax(scores, axis=-1))
        mixed = jnp.einsum("bhqk,bkhc->bqhc", weights, v).reshape(batch, length, width)
        return self.attention_out(mixed)

    def __call__(self, x, valid, *, dropout_key=None, attention_dropout: float = 0.0, dropout: float = 0.0):
        keys = [None] * 3 if dropout_key is None else list(jax.random.split(dropout_key, 3))
        x = x + _dropout(keys[1], dropout, self.attention(self.attention_norm(x), valid, keys[0], attention_dropout))
        hidden = jax.nn.relu(self.feedforward_in(self.feedforward_norm(x)))
        return x + _dropout(keys[2], dropout, self.feedforward_out(hidden))


class TransformerEncoder(nnx.Module):
    """Pre-LN Transformer: x [B, T, D_in], valid [B, T] -> the mean of the final states over real tokens [B, d]."""

    def __init__(self, in_features: int, d_model: int, num_layers: int, num_heads: int, ffw_size: int, *,
                 rngs: nnx.Rngs):
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of num_heads {num_heads}")
        self.d_model = d_model
        self.input = nnx.Linear(in_features, d_model, rngs=rngs, kernel_metadata=logical("embed", None),
                                bias_metadata=logical(None))
        self.blocks = nnx.List([TransformerBlock(d_model, num_heads, ffw_size, rngs=rngs) for _ in range(num_layers)])
        self.final_norm = nnx.LayerNorm(d_model, rngs=rngs, scale_metadata=logical("embed"),
                                        bias_metadata=logical("embed"))

    def __call__(self, x, valid, *, dropout_key=None, attention_dropout: float = 0.0, dropout: float = 0.0):
        valid = valid.astype(bool)
        # Positions over the real tokens: 0 at each row's first one, whichever side the padding is on.
        positions = jnp.maximum(jnp.cumsum(valid, axis=1) - 1, 0)
        table = jnp.asarray(sinusoidal_encoding(np.arange(x.shape[1]), self.d_model))
        h = self.input(x) + table[positions]
        keys = [None] * len(self.blocks) if dropout_key is None else list(jax.random.split(dropout_key,
                                                                                            len(self.blocks)))
        for block, key in zip(self.blocks, keys):
            h = block(h, valid, dropout_key=key, attention_dropout=attention_dropout, dropout=dropout)
        h = self.final_norm(h)
        weights = valid[..., None].astype(h.dtype)
        return jnp.sum(h * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)


class BaselineClassifier(SentenceClassifier):
    """`model(inputs, valid)` -> (logits [B, classes], None): Ordered Memory's classifier with an LSTM or a
    Transformer encoder (`SentenceClassifier.classify`: "pair" takes (left, right) inputs and masks)."""

    def __init__(self, config: BaselineClassifierConfig, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self._init_embedding(rngs)
        self.encoder: LSTMEncoder | TransformerEncoder
        if c.encoder == "lstm":
            self.encoder = LSTMEncoder(c.embedding_size, c.hidden_size, c.num_layers, rngs=rngs)
        else:
            self.encoder = TransformerEncoder(c.embedding_size, c.hidden_size, c.num_layers, c.num_heads,
                                              c.ffw_multiplier * c.hidden_size, rngs=rngs)
        self._init_head(rngs, c.hidden_size)

    def encode(self, inputs, valid, *, dropout_key=None):
        """inputs [B, T] ids, valid [B, T] bool -> (sentence vectors [B, hidden_size], None: no pointers)."""
        c = self.config
        keys = (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))
        x = self.embed(inputs, keys[0])
        if isinstance(self.encoder, LSTMEncoder):
            return self.encoder(x, valid, dropout_key=keys[1], dropout=c.cell_dropout), None
        return self.encoder(x, valid, dropout_key=keys[1], attention_dropout=c.attention_dropout,
                            dropout=c.cell_dropout), None

    def __call__(self, inputs, valid, *, dropout_key=None):
        return self.classify(inputs, valid, dropout_key=dropout_key)


def build_classifier(config: OMClassifierConfig | BaselineClassifierConfig, *, rngs: nnx.Rngs) -> SentenceClassifier:
    """The classifier of `config`: Ordered Memory's, or a baseline's."""
    if isinstance(config, OMClassifierConfig):
        return OrderedMemoryClassifier(config, rngs=rngs)
    return BaselineClassifier(config, rngs=rngs)


def parameter_count(config: OMClassifierConfig | BaselineClassifierConfig) -> int:
    """The classifier's parameter count, from its shapes alone (nothing allocated)."""
    return count_parameters(lambda: build_classifier(config, rngs=nnx.Rngs(0)))


def baseline_config(om: OMClassifierConfig, encoder: str, *, hidden_size: int = 0, num_layers: int = 2,
                    num_heads: int = 4, ffw_multiplier: int = 4) -> BaselineClassifierConfig:
    """The baseline with `om`'s data, embedding, head and dropouts; `hidden_size` 0: `matched_hidden_size`."""
    if not hidden_size:
        hidden_size = matched_hidden_size(om, encoder, num_layers, num_heads, ffw_multiplier)
    return BaselineClassifierConfig(
        kind=om.kind, vocab_size=om.vocab_size, num_classes=om.num_classes, pad_id=om.pad_id, encoder=encoder,
        embedding_size=om.embedding_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        ffw_multiplier=ffw_multiplier, mlp_hidden_size=om.mlp_hidden_size, embedding_dropout=om.embedding_dropout,
        output_dropout=om.output_dropout, attention_dropout=om.attention_dropout, cell_dropout=om.cell_dropout,
        embedding_init_range=om.embedding_init_range)


@functools.lru_cache(maxsize=64)
def matched_hidden_size(om: OMClassifierConfig, encoder: str, num_layers: int = 2, num_heads: int = 4,
                        ffw_multiplier: int = 4) -> int:
    """The baseline width whose classifier's parameter count is closest to `om`'s classifier's.

    LSTM: any H >= 1; Transformer: d a multiple of `num_heads`. The count grows with the width, so a doubling
    search brackets the target and a bisection finds the first width at or above it; the closer of that one
    and the one before wins. A target below the smallest baseline gives the smallest width.
    """
    target = parameter_count(om)
    unit = num_heads if encoder == "transformer" else 1

    def count(multiple: int) -> int:
        return parameter_count(baseline_config(om, encoder, hidden_size=multiple * unit, num_layers=num_layers,
                                               num_heads=num_heads, ffw_multiplier=ffw_multiplier))

    high = 1
    while count(high) < target:
        high *= 2
    low = high // 2  # count(low) < target, or low == 0
    while high - low > 1:
        middle = (low + high) // 2
        if count(middle) < target:
            low = middle
        else:
            high = middle
    if low >= 1 and target - count(low) < count(high) - target:
        return low * unit
    return high * unit
