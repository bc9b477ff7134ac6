"""Transformer language models with a stack attention layer: Tf, Tf+Sup, Tf+Nd (DuSell & Chiang, ICLR 2024).

The set-up of the paper's §6 and Appendix D.1: a scaled token embedding
(× √d_model) plus sinusoidal positions (Vaswani et al., 2017), dropout, L
pre-norm layers, a final layer norm and an affine map to the logits (input
and output embeddings not tied). Each layer is a self-attention sublayer and
a feedforward sublayer (Linear → ReLU → dropout → Linear, hidden size
2·d_model for the CFL tasks), both `PreNormResidual`. In Tf+Sup and Tf+Nd
the self-attention sublayer of the middle layer — layer ⌈L/2⌉ counting from
1, the third of five — is a stack attention sublayer instead.

`causal=True` masks attention to the future (language model, decoder);
`causal=False` is an encoder whose attention sees the whole (unpadded)
sequence. Stack attention is causal by construction in both modes, as in the
paper's translation encoders.

Vocabulary. The authors' models embed the symbols and BOS (|Σ| + 1 rows)
and their softmax covers the symbols and EOS (|Σ| + 1 classes); PAD is never
a class. With the one-id-space vocabulary of `tgjax.data.cfl` (PAD, BOS,
EOS, symbols: |Σ| + 3 ids), `input_ids` and `output_ids` name the ids that
get an embedding row and an output class: `stack_cfl_config` sets them to
(BOS, symbols) and (EOS, symbols), so the parameter counts are exactly those
of the paper's Table 5 and no probability goes to PAD or BOS. The logits
keep the full id width [B, n, V] (a target id indexes them directly); ids
outside `output_ids` get the constant `EXCLUDED_LOGIT` (probability exactly
0 after the softmax, in float32 and float64). Ids outside `input_ids` embed
as the zero vector (they occur only as PAD after a string's end, which no
real position sees in a causal model). `input_ids = output_ids = None`
(the `StackLMConfig` default) gives every id a row and a class.

Initialisation (`init`; layer norms always scale 1, bias 0):

* "released" (default; Appendix D.2 as the authors' code does it, which
  produced the paper's numbers): every SDPA layer's attention and
  feedforward weights *and* biases ~ U[−init_scale, init_scale] (the release
  uses library encoder layers, which fall to its uniform default, as D.2's
  "except ... fully-connected layers in SDPA layers" says); the stack
  layer's feedforward and the output layer: Xavier-uniform weights, biases 0
  (the release's own linear layers); embeddings U[−init_scale, init_scale].
* "xavier" (tgjax's earlier default): Xavier-uniform weights everywhere,
  attention biases 0, feedforward and output biases and embeddings
  U[−init_scale, init_scale].

The stack sublayer's own maps (W_a, W_v, W_y: bias-free, Xavier) and w_v
(U[−init_scale, init_scale]) are the same under both.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import logical
from tgjax.nn.stack_attention import (
    NondeterministicStackAttention,
    PreNormResidual,
    PushedVectors,
    SuperpositionStackAttention,
)
from tgjax.ops import nondeterministic_stack

__all__ = [
    "CFL_SPECIAL_IDS",
    "EXCLUDED_LOGIT",
    "FeedForward",
    "MODEL_KINDS",
    "STACK_CFL_SIZES",
    "SelfAttention",
    "StackLMConfig",
    "StackTransformerLM",
    "sinusoidal_positions",
    "stack_cfl_config",
]

StackKind = Literal["none", "superposition", "nondeterministic"]
InitScheme = Literal["released", "xavier"]
# The logit of an id outside `output_ids`: exp underflows to exactly 0 against any real logit,
# while staying finite (0 * log p is 0, not NaN, in an entropy over the full width).
EXCLUDED_LOGIT = -1e9
# PAD, BOS, EOS ids of the CFL vocabulary (tgjax.data.cfl, via tgjax.data.vocab; a test checks they
# agree). Models do not import the data package, so the layout is restated here.
CFL_SPECIAL_IDS = {"pad": 0, "bos": 1, "eos": 2}
MODEL_KINDS = {"tf": "none", "tf+sup": "superposition", "tf+nd": "nondeterministic"}

# §6 and Appendix D: 5 layers, 4 heads, feedforward 2·d_model, dropout 0.1 for
# all; Tf d_model 32; Tf+Sup d_model = m = 32; Tf+Nd d_model 28, m 5, and the
# |Q|, |Γ| of DuSell & Chiang (2022): 2, 3 on w#wᴿ, wwᴿ and Dyck; 3, 3 on
# waᵖwᴿ and the Hardest CFL. Keys are `tgjax.data.cfl.TASK_NAMES`.
_CFL_COMMON = {"num_layers": 5, "num_heads": 4, "dropout_rate": 0.1}
_TF = {**_CFL_COMMON, "stack": "none", "d_model": 32, "feedforward_size": 64}
_TF_SUP = {**_CFL_COMMON, "stack": "superposition", "d_model": 32, "feedforward_size": 64, "stack_embedding_size": 32}


def _tf_nd(num_states: int, stack_alphabet_size: int) -> dict:
    return {**_CFL_COMMON, "stack": "nondeterministic", "d_model": 28, "feedforward_size": 56,
            "stack_embedding_size": 5, "num_states": num_states, "stack_alphabet_size": stack_alphabet_size}


STACK_CFL_SIZES: dict[str, dict[str, dict]] = {
    task: {"tf": _TF, "tf+sup": _TF_SUP, "tf+nd": _tf_nd(q, s)}
    for task, (q, s) in {
        "marked_reversal": (2, 3),
        "unmarked_reversal": (2, 3),
        "padded_reversal": (3, 3),
        "dyck": (2, 3),
        "hardest_cfl": (3, 3),
    }.items()
}


@dataclasses.dataclass(frozen=True)
class StackLMConfig:
    """Sizes and switches of a `StackTransformerLM`.

    `stack_layer` is the 0-based index of the layer whose self-attention is
    replaced (default: the middle one, ⌈L/2⌉ − 1 = (L − 1) // 2).
    """

    input_vocab_size: int
    output_vocab_size: int | None = None  # default: input_vocab_size
    num_layers: int = 5
    d_model: int = 32
    num_heads: int = 4
    feedforward_size: int = 64
    dropout_rate: float = 0.1
    stack: StackKind = "none"
    stack_layer: int | None = None
    stack_embedding_size: int = 32  # m
    num_states: int = 2  # |Q| (nondeterministic)
    stack_alphabet_size: int = 3  # |Γ| (nondeterministic)
    # Static blocks of the dVPDA's span scan (None: the kernel's default for each length). Numbers do not
    # depend on it; fewer blocks compile faster and suit an accelerator, where the pop sum's extra work is cheap.
    nd_num_blocks: int | None = None
    pushed_vectors: PushedVectors = "released"  # the authors' code; "paper": σ of eq. (17)
    causal: bool = True
    init_scale: float = 0.1
    init: InitScheme = "released"
    input_ids: tuple[int, ...] | None = None  # ids with an embedding row (None: every id)
    output_ids: tuple[int, ...] | None = None  # ids the softmax covers (None: every id)

    def __post_init__(self):
        if self.stack not in ("none", "superposition", "nondeterministic"):
            raise ValueError(f"stack must be 'none', 'superposition' or 'nondeterministic', got {self.stack!r}")
        if self.init not in ("released", "xavier"):
            raise ValueError(f"init must be 'released' or 'xavier', got {self.init!r}")
        for name, ids, size in (("input_ids", self.input_ids, self.input_vocab_size),
                                ("output_ids", self.output_ids, self.resolved_output_vocab_size)):
            if ids is None:
                continue
            ids = tuple(ids)
            if not ids or len(set(ids)) != len(ids) or not all(
                    isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < size for i in ids):
                raise ValueError(f"{name} must be distinct ids in 0..{size - 1} (the vocabulary), got {ids!r}")
            object.__setattr__(self, name, tuple(int(i) for i in ids))  # hashable, whatever came in
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        if self.nd_num_blocks is not None and (isinstance(self.nd_num_blocks, bool) or not isinstance(
                self.nd_num_blocks, (int, np.integer)) or self.nd_num_blocks < 1):
            raise ValueError(f"nd_num_blocks must be None or a positive integer, got {self.nd_num_blocks!r}")
        if not 0 <= self.resolved_stack_layer < self.num_layers:
            raise ValueError(f"stack_layer={self.stack_layer} is not a layer of {self.num_layers}")

    @property
    def resolved_stack_layer(self) -> int:
        return (self.num_layers - 1) // 2 if self.stack_layer is None else self.stack_layer

    @property
    def resolved_output_vocab_size(self) -> int:
        return self.input_vocab_size if self.output_vocab_size is None else self.output_vocab_size


def stack_cfl_config(task: str, model: str, vocab_size: int, **overrides) -> StackLMConfig:
    """The paper's config of `model` ("tf", "tf+sup", "tf+nd") on a CFL task, for a vocabulary size.

    `vocab_size` counts the ids of `tgjax.data.cfl` (PAD, BOS, EOS, then the |Σ| symbols); the
    embedding covers BOS and the symbols and the softmax EOS and the symbols, as the authors'
    models (Table 5's counts). `input_ids=None` / `output_ids=None` in `overrides` give every id
    a row / a class instead; any other key overrides the paper's value.
    """
    task = task.replace("-", "_")
    if task not in STACK_CFL_SIZES:
        raise ValueError(f"unknown CFL task {task!r}; expected one of {sorted(STACK_CFL_SIZES)}")
    if model not in MODEL_KINDS:
        raise ValueError(f"unknown model {model!r}; expected one of {sorted(MODEL_KINDS)}")
    special = CFL_SPECIAL_IDS
    if vocab_size <= max(special.values()) + 1:
        raise ValueError(f"a CFL vocabulary has PAD, BOS, EOS (ids {sorted(special.values())}) and at least one "
                         f"symbol, got vocab_size={vocab_size}")
    symbols = tuple(range(max(special.values()) + 1, vocab_size))
    ids = {"input_ids": (special["bos"],) + symbols, "output_ids": (special["eos"],) + symbols}
    return StackLMConfig(input_vocab_size=vocab_size, **{**STACK_CFL_SIZES[task][model], **ids, **overrides})


def sinusoidal_positions(length: int, d_model: int) -> jax.Array:
    """[length, d_model] encodings of positions 0..length−1: sin on even features, cos on odd (Vaswani et al.)."""
    position = jnp.arange(length, dtype=jnp.float32)[:, None]
    inv_freq = jnp.exp(-math.log(10000.0) * jnp.arange(0, d_model, 2, dtype=jnp.float32) / d_model)
    angles = position * inv_freq[None, :]
    table = jnp.zeros((length, d_model), jnp.float32)
    table = table.at[:, 0::2].set(jnp.sin(angles))
    return table.at[:, 1::2].set(jnp.cos(angles[:, : d_model // 2]))


def _centered_uniform(scale: float) -> Callable:
    """U[−scale, scale)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, minval=-scale, maxval=scale)

    return init


class SelfAttention(nnx.Module):
    """Multi-head scaled dot-product self-attention (eqs. 1–3), with dropout on the attention probabilities.

    Args:
      d_model, num_heads: sizes; head size d_model / num_heads.
      causal: mask attention to later positions.
      dropout_rate: dropout on the attention probabilities (in `train()` mode).
    """

    def __init__(self, d_model: int, num_heads: int, *, causal: bool, dropout_rate: float, rngs: nnx.Rngs,
                 kernel_init: Callable = nnx.initializers.xavier_uniform(),
                 bias_init: Callable = nnx.initializers.zeros_init()):
        self.causal = causal
        self.attention = nnx.MultiHeadAttention(
            num_heads=num_heads,
            in_features=d_model,
            dropout_rate=dropout_rate,
            broadcast_dropout=False,  # independent masks per example and head, as PyTorch
            deterministic=False,  # train mode until `eval()`, like nnx.Dropout
            kernel_init=kernel_init,
            bias_init=bias_init,
            decode=False,
            rngs=rngs,
        )

    def __call__(self, x: jax.Array, *, padding_mask: jax.Array | None = None) -> jax.Array:
        """x [B, n, d] -> [B, n, d]; padding_mask [B, n] (True = real token) hides padded keys."""
        batch, n = x.shape[:2]
        mask = None
        if self.causal:
            mask = jnp.broadcast_to(jnp.tril(jnp.ones((n, n), bool)), (batch, 1, n, n))
        if padding_mask is not None:
            keys = jnp.broadcast_to(padding_mask[:, None, None, :].astype(bool), (batch, 1, n, n))
            mask = keys if mask is None else mask & keys
        return self.attention(x, mask=mask)


class FeedForward(nnx.Module):
    """Linear(d → h) → ReLU → dropout → Linear(h → d), with biases: x [B, n, d] -> [B, n, d]."""

    def __init__(self, d_model: int, hidden_size: int, *, dropout_rate: float, rngs: nnx.Rngs,
                 kernel_init: Callable, bias_init: Callable):
        def linear(i, o, axes):
            return nnx.Linear(i, o, kernel_init=kernel_init, bias_init=bias_init, rngs=rngs,
                              kernel_metadata=logical(*axes), bias_metadata=logical(axes[1]))

        self.hidden = linear(d_model, hidden_size, ("embed", "mlp"))
        self.dropout = nnx.Dropout(dropout_rate, rngs=rngs)
        self.out = linear(hidden_size, d_model, ("mlp", "embed"))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.dropout(jax.nn.relu(self.hidden(x))))


class TransformerLayer(nnx.Module):
    """One pre-norm layer: an attention sublayer (self-attention or stack attention), then a feedforward one."""

    def __init__(self, config: StackLMConfig, stack: StackKind, *, stack_op: Callable | None, rngs: nnx.Rngs):
        c = config
        xavier, uniform, zeros = (nnx.initializers.xavier_uniform(), _centered_uniform(c.init_scale),
                                  nnx.initializers.zeros_init())
        if c.init == "released":  # library SDPA layers: all uniform; the release's own layers: Xavier, bias 0
            attention_init = (uniform, uniform)
            feedforward_init = (uniform, uniform) if stack == "none" else (xavier, zeros)
        else:
            attention_init, feedforward_init = (xavier, zeros), (xavier, uniform)
        if stack == "none":
            attention = SelfAttention(c.d_model, c.num_heads, causal=c.causal, dropout_rate=c.dropout_rate, rngs=rngs,
                                      kernel_init=attention_init[0], bias_init=attention_init[1])
            self.attention = PreNormResidual(c.d_model, attention, dropout_rate=c.dropout_rate, rngs=rngs)
        elif stack == "superposition":
            self.attention = SuperpositionStackAttention(
                c.d_model, c.stack_embedding_size, dropout_rate=c.dropout_rate,
                pushed_vectors=c.pushed_vectors, stack_op=stack_op, rngs=rngs,
            )
        else:
            if stack_op is None and c.nd_num_blocks is not None:
                stack_op = functools.partial(nondeterministic_stack, num_blocks=int(c.nd_num_blocks))
            self.attention = NondeterministicStackAttention(
                c.d_model, c.num_states, c.stack_alphabet_size, c.stack_embedding_size,
                dropout_rate=c.dropout_rate, pushed_vectors=c.pushed_vectors, stack_op=stack_op,
                init_scale=c.init_scale, rngs=rngs,
            )
        self.uses_padding_mask = stack == "none"
        feedforward = FeedForward(c.d_model, c.feedforward_size, dropout_rate=c.dropout_rate, rngs=rngs,
                                  kernel_init=feedforward_init[0], bias_init=feedforward_init[1])
        self.feedforward = PreNormResidual(c.d_model, feedforward, dropout_rate=c.dropout_rate, rngs=rngs)

    def __call__(self, x: jax.Array, *, padding_mask: jax.Array | None = None) -> jax.Array:
        """x [B, n, d] -> [B, n, d]."""
        if self.uses_padding_mask:
            x = self.attention(x, padding_mask=padding_mask)
        else:  # a stack reads left to right: padding at the end cannot reach real positions
            x = self.attention(x)
        return self.feedforward(x)


class StackTransformerLM(nnx.Module):
    """Tf / Tf+Sup / Tf+Nd: token ids [B, n] -> next-token logits [B, n, V_out].

    Args:
      config: `StackLMConfig`.
      stack_op: optional replacement for the `tgjax.ops` kernel of the stack
        layer (same signature).
      rngs: `nnx.Rngs` with `params` (and `dropout` for training).

    Dropout is active in `train()` mode (the default after construction) and
    off after `eval()`.
    """

    def __init__(self, config: StackLMConfig, *, stack_op: Callable | None = None, rngs: nnx.Rngs):
        c = config
        self.config = c
        num_rows = c.input_vocab_size if c.input_ids is None else len(c.input_ids)
        self.embedding = nnx.Embed(num_rows, c.d_model, embedding_init=_centered_uniform(c.init_scale), rngs=rngs,
                                   embedding_metadata=logical("vocab", "embed"))
        self.embedding_dropout = nnx.Dropout(c.dropout_rate, rngs=rngs)
        self.layers = nnx.List([
            TransformerLayer(c, c.stack if i == c.resolved_stack_layer else "none", stack_op=stack_op, rngs=rngs)
            for i in range(c.num_layers)
        ])
        self.final_norm = nnx.LayerNorm(c.d_model, epsilon=1e-5, rngs=rngs)
        num_classes = c.resolved_output_vocab_size if c.output_ids is None else len(c.output_ids)
        output_bias = nnx.initializers.zeros_init() if c.init == "released" else _centered_uniform(c.init_scale)
        self.output = nnx.Linear(c.d_model, num_classes, kernel_init=nnx.initializers.xavier_uniform(),
                                 kernel_metadata=logical("embed", "vocab"), bias_metadata=logical("vocab"),
                                 bias_init=output_bias, rngs=rngs)

    def __call__(self, tokens: jax.Array, *, padding_mask: jax.Array | None = None) -> jax.Array:
        """tokens [B, n] int (BOS first for a language model) -> logits [B, n, V_out].

        padding_mask [B, n] (True = real token) is needed only in encoder mode
        with padded batches; in decoder mode trailing padding never reaches
        earlier positions.
        """
        n = tokens.shape[1]
        c = self.config
        x = self.embedding(self._embedding_rows(tokens)) * math.sqrt(c.d_model)
        if c.input_ids is not None:  # ids without a row (PAD) embed as zero
            x = jnp.where(self._has_row(tokens)[..., None], x, 0.0)
        x = self.embedding_dropout(x + sinusoidal_positions(n, c.d_model)[None])
        for layer in self.layers:
            x = layer(x, padding_mask=padding_mask)
        logits = self.output(self.final_norm(x))  # [B, n, |output_ids|]
        if c.output_ids is None:
            return logits
        full = jnp.full(logits.shape[:-1] + (c.resolved_output_vocab_size,), EXCLUDED_LOGIT, logits.dtype)
        return full.at[..., np.asarray(c.output_ids)].set(logits)  # [B, n, V_out], target ids index it

    def _embedding_rows(self, tokens: jax.Array) -> jax.Array:
        """Token ids [B, n] -> embedding rows [B, n] (0 for ids without a row; masked by `_has_row`)."""
        if self.config.input_ids is None:
            return tokens
        row_of_id = np.zeros(self.config.input_vocab_size, np.int32)
        row_of_id[np.asarray(self.config.input_ids)] = np.arange(len(self.config.input_ids))
        return jnp.asarray(row_of_id)[tokens]

    def _has_row(self, tokens: jax.Array) -> jax.Array:
        has_row = np.zeros(self.config.input_vocab_size, bool)
        has_row[np.asarray(self.config.input_ids)] = True
        return jnp.asarray(has_row)[tokens]
