"""The ON-LSTM language model with the AWD-style regularisation of the release (Shen et al., ICLR 2019).

    model = OnLSTMLM(OnLSTMLMConfig(vocab_size=10000), rngs=nnx.Rngs(0))
    logits, new_state, aux = model(tokens, state, deterministic=True)

- `tokens` [batch, T] int word ids; `state` the carried recurrent state (None:
  the release's zero state, `model.initial_state(batch)`): one (h, c) pair per
  layer, each [batch, H_l].
- `mask` (optional) [batch, T], 1 at real steps; steps where it is 0 must be
  at the end of each row (padding a short BPTT segment): they leave the state
  where the last real step put it, so `new_state` is the state after the
  real steps. Their logits are computed but mean nothing.
- `deterministic=False` applies the dropouts, drawn from `key` (a JAX key).
- returns `logits` [batch, T, vocab]; `new_state`; and `aux`, a dict of lists
  with one entry per layer (layer 0 first):
    aux["master_forget"][l]  [batch, T, nc_l]  f~, chunk resolution, rises to exactly 1
    aux["master_input"][l]   [batch, T, nc_l]  i~, falls to exactly 0
    aux["raw_outputs"][l]    [batch, T, H_l]   the layer's output before any dropout
  `syntactic_distances(aux["master_forget"][l])` = 1 - mean(f~) [batch, T], the
  release's per-layer distance d^f used for unsupervised parsing (run each
  sentence alone from the zero state, deterministic=True).

Sizes per layer are the release's: `[E, H, ..., H, E]`, i.e. layer 0 reads the
embedding (E), the inner layers have H units and the last layer has E units so
the decoder can share the embedding matrix (tied weights, as the release
always builds it). Every layer has the same chunk size, so nc_l = H_l / chunk.

Regularisation, as the release computes it (`released-code.md` §2.2):

- embedding dropout (`dropout_embedding`, dropoute): whole word types — rows of
  the embedding matrix — are zeroed with probability p and the rest scaled by
  1/(1-p), one draw per forward call. Only the lookup uses the dropped matrix;
  the tied decoder reads the undropped one.
- locked (variational) dropout: one mask per sequence [batch, 1, d], shared by
  all time steps, scaled by 1/(1-p): on the embeddings (`dropout_input`,
  dropouti), between layers on the outputs of layers 0..L-2 (`dropout_hidden`,
  dropouth) and on the last layer's output before the decoder (`dropout`).
- DropConnect on each layer's hidden-to-hidden matrix (`weight_drop`, wdrop):
  the release's `LinearDropConnect`. Training zeroes entries of W_hh with
  probability p **without rescaling**, one mask per forward call shared by
  every step and batch row; evaluation uses W_hh * (1 - p). (AWD-LSTM's
  WeightDrop rescales at training time instead; the two agree in
  expectation.) The recurrent bias is not dropped.
- AR/TAR (`activation_penalties`): alpha * mean(h_L^2) + beta * mean((h_L,t -
  h_L,t-1)^2), both on the last layer's **undropped** output (the release's
  `dropped_rnn_hs[-1]` is undropped, since its stack drops only non-final
  layers; AWD-LSTM applied AR to the dropped output).

Dropout keys: `jax.random.split(key, 2 L + 3)`, used in order: the embedding
mask, the input mask, then per layer its W_hh mask and (below the last layer)
its output mask, then the final output mask; every key is drawn even when its
rate is 0, so one rate does not change the others' masks.

Initialisation: embedding U(-0.1, 0.1), decoder bias 0, the cells as
`tgjax.nn.onlstm` (PyTorch's Linear default). `load_released(state_dict)`
reads the release's `model.pt` tensors (names `encoder.weight`,
`decoder.bias`, `rnn.cells.{l}.ih.0.weight`, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from tgjax.nn.onlstm import ONLSTMCell
from tgjax.nn.params import param
from tgjax.ops.onlstm import num_chunks, onlstm_scan

__all__ = ["OnLSTMLM", "OnLSTMLMConfig", "activation_penalties", "embedding_dropout_mask",
           "locked_dropout_mask", "syntactic_distances", "weight_drop"]


@dataclasses.dataclass(frozen=True)
class OnLSTMLMConfig:
    """Sizes and dropouts; the defaults are the release's PTB model (README command)."""

    vocab_size: int
    embedding_size: int = 400  # emsize; also the last layer's size (tied decoder)
    hidden_size: int = 1150  # nhid, the inner layers' size
    num_layers: int = 3
    chunk_size: int = 10
    dropout: float = 0.45  # locked dropout on the last layer's output
    dropout_hidden: float = 0.3  # dropouth: locked dropout between layers
    dropout_input: float = 0.5  # dropouti: locked dropout on the embeddings
    dropout_embedding: float = 0.1  # dropoute: whole-word embedding dropout
    weight_drop: float = 0.45  # wdrop: DropConnect on W_hh
    # False: a plain LSTM in the same layout, the parsing claim's same-budget baseline (`tgjax.ops.onlstm`); its
    # aux "master_forget" then holds the forget gate's chunk means, which the same distance formula reads.
    ordered: bool = True

    def __post_init__(self):
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"OnLSTMLMConfig.{name} must be a positive int, got {value!r}")
        for name in ("dropout", "dropout_hidden", "dropout_input", "dropout_embedding", "weight_drop"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"OnLSTMLMConfig.{name} must be in [0, 1), got {value!r}")
        if not isinstance(self.ordered, bool):
            raise ValueError(f"OnLSTMLMConfig.ordered must be a bool, got {self.ordered!r}")
        for size in set(self.layer_sizes()):
            num_chunks(size, self.chunk_size)

    def layer_sizes(self) -> list[int]:
        """Units of each layer: [H] * (L - 1) + [E]."""
        return [self.hidden_size] * (self.num_layers - 1) + [self.embedding_size]

    def layer_inputs(self) -> list[int]:
        """Input size of each layer: [E] + [H] * (L - 1)."""
        return [self.embedding_size] + [self.hidden_size] * (self.num_layers - 1)


def syntactic_distances(master_forget):
    """d^f_t = 1 - mean_k f~_{t,k}: master_forget [..., T, nc] -> [..., T]."""
    return 1.0 - jnp.mean(master_forget, axis=-1)


# -----------------------------------------------------------------------------
# Regularisers (pure functions of a key, so tests can draw the same masks).


def _keep_mask(key, shape, rate: float, dtype):
    return jax.random.bernoulli(key, 1.0 - rate, shape).astype(dtype)


def embedding_dropout_mask(key, vocab_size: int, rate: float, dtype=jnp.float32):
    """[vocab, 1]: 0 for dropped word types, 1/(1 - rate) for the rest."""
    return _keep_mask(key, (vocab_size, 1), rate, dtype) / (1.0 - rate)


def locked_dropout_mask(key, batch_size: int, features: int, rate: float, dtype=jnp.float32):
    """[batch, 1, features]: one mask per sequence, broadcast over time, scaled by 1/(1 - rate)."""
    return _keep_mask(key, (batch_size, 1, features), rate, dtype) / (1.0 - rate)


def weight_drop(w_hh, rate: float, *, key=None, deterministic: bool):
    """The release's LinearDropConnect on W_hh [H, G]: train zeroes entries (no rescale), eval scales by 1 - rate."""
    if rate == 0.0:
        return w_hh
    if deterministic:
        return w_hh * (1.0 - rate)
    return w_hh * _keep_mask(key, w_hh.shape, rate, w_hh.dtype)


def activation_penalties(last_output, mask=None):
    """(AR, TAR) before their coefficients: mean(h^2) and mean((h_t - h_{t-1})^2).

    last_output [batch, T, d]: the last layer's undropped output; mask [batch, T]
    (1 = real step, padding at the end). Means over real entries, as the
    release's `.pow(2).mean()` over an unpadded segment; TAR over the pairs of
    consecutive real steps.
    """
    squared = jnp.mean(last_output**2, axis=-1)  # [batch, T]
    steps = jnp.diff(last_output, axis=1)
    step_squared = jnp.mean(steps**2, axis=-1)  # [batch, T - 1]
    if mask is None:
        return jnp.mean(squared), jnp.mean(step_squared)
    mask = mask.astype(last_output.dtype)
    pair_mask = mask[:, 1:] * mask[:, :-1]
    ar = jnp.sum(squared * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    tar = jnp.sum(step_squared * pair_mask) / jnp.maximum(jnp.sum(pair_mask), 1.0)
    return ar, tar


def _masked_scan(x, mask, h0, c0, w_ih, b_ih, w_hh, b_hh, chunk_size: int, ordered: bool = True):
    """`onlstm_scan` where steps with mask 0 keep the carried state (padding at the end of a row).

    x [B, T, D], mask [B, T] -> (h [B, T, H], hT, cT, master_forget [B, T, nc], master_input [B, T, nc]).
    Each step is a one-step `onlstm_scan` (the kernel's own arithmetic); the
    carry is selected by the mask.
    """

    def step(carry, inputs):
        h_prev, c_prev = carry
        x_t, m_t = inputs
        _, h, c, mf, mi = onlstm_scan(x_t[:, None], h_prev, c_prev, w_ih, b_ih, w_hh, b_hh, chunk_size=chunk_size,
                                      ordered=ordered)
        keep = m_t[:, None] > 0
        h, c = jnp.where(keep, h, h_prev), jnp.where(keep, c, c_prev)
        return (h, c), (h, mf[:, 0], mi[:, 0])

    (h_last, c_last), (hs, mf, mi) = lax.scan(step, (h0, c0), (jnp.swapaxes(x, 0, 1), jnp.swapaxes(mask, 0, 1)))
    batch_major = lambda a: jnp.swapaxes(a, 0, 1)  # noqa: E731
    return batch_major(hs), h_last, c_last, batch_major(mf), batch_major(mi)


# -----------------------------------------------------------------------------
# The model.


class OnLSTMLM(nnx.Module):
    """Embedding, stacked ON-LSTM layers, tied decoder; see the module docstring."""

    def __init__(self, config: OnLSTMLMConfig, *, rngs: nnx.Rngs, dtype=jnp.float32):
        self.config = config
        init_range = 0.1  # the release's initrange
        self.embedding = param(rngs, lambda k, s, d: jax.random.uniform(k, s, d, -init_range, init_range),
                               (config.vocab_size, config.embedding_size), ("vocab", "embed"), dtype)
        self.decoder_bias = param(rngs, lambda k, s, d: jnp.zeros(s, d), (config.vocab_size,), ("vocab",), dtype)
        self.cells = nnx.List([ONLSTMCell(d_in, d_out, config.chunk_size, rngs=rngs, dtype=dtype)
                               for d_in, d_out in zip(config.layer_inputs(), config.layer_sizes())])

    def initial_state(self, batch_size: int, dtype=jnp.float32):
        """The release's zero state: a list of (h [B, H_l], c [B, H_l]), one per layer."""
        return [cell.initial_state(batch_size, dtype) for cell in self.cells]

    def load_released(self, state_dict: Mapping[str, object]) -> None:
        """Copies the release's tensors (`model.pt`'s state dict, as arrays) into this model.

        Names: `encoder.weight` [V, E] (the tied `decoder.weight` must equal it
        if present), `decoder.bias` [V], `rnn.cells.{l}.ih.0.weight` etc. (see
        `tgjax.nn.onlstm`).
        """
        for name in ("encoder.weight", "decoder.bias"):
            if name not in state_dict:
                raise KeyError(f"the state dict has no {name}")
        encoder = np.asarray(state_dict["encoder.weight"])
        if "decoder.weight" in state_dict and not np.array_equal(np.asarray(state_dict["decoder.weight"]), encoder):
            raise ValueError("decoder.weight differs from encoder.weight: this model ties them, as the release does")
        for target, array, name in ((self.embedding, encoder, "encoder.weight"),
                                    (self.decoder_bias, np.asarray(state_dict["decoder.bias"]), "decoder.bias")):
            if array.shape != target[...].shape:
                raise ValueError(f"{name}: the checkpoint has shape {array.shape}, this model wants "
                                 f"{target[...].shape}")
            target[...] = jnp.asarray(array, target[...].dtype)
        for layer, cell in enumerate(self.cells):
            cell.load_released(state_dict, prefix=f"rnn.cells.{layer}.")

    def __call__(self, tokens, state=None, *, deterministic: bool = True, key=None, mask=None):
        """tokens [B, T] -> (logits [B, T, V], new state, aux); see the module docstring."""
        c = self.config
        tokens = jnp.asarray(tokens)
        batch, length = tokens.shape
        if state is None:
            state = self.initial_state(batch)
        if len(state) != c.num_layers:
            raise ValueError(f"state has {len(state)} layers, the model {c.num_layers}")
        if not deterministic and key is None:
            raise ValueError("deterministic=False needs a dropout key")
        mask = jnp.ones((batch, length), jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
        keys = iter(jax.random.split(key, 3 + 2 * c.num_layers)) if not deterministic else None
        embedding = self.embedding[...]

        lookup_matrix = embedding
        if not deterministic:
            embedding_key = next(keys)  # drawn even at rate 0, like every mask's key
            if c.dropout_embedding > 0:
                lookup_matrix = embedding * embedding_dropout_mask(embedding_key, c.vocab_size,
                                                                   c.dropout_embedding, embedding.dtype)
        x = jnp.take(lookup_matrix, tokens, axis=0)  # [B, T, E]
        x = self._locked(x, c.dropout_input, keys, deterministic)

        new_state, master_forget, master_input, raw_outputs = [], [], [], []
        for layer, cell in enumerate(self.cells):
            w_ih, b_ih, w_hh, b_hh = cell.parameters()
            w_hh = weight_drop(w_hh, c.weight_drop, key=None if deterministic else next(keys),
                               deterministic=deterministic)
            h0, c0 = state[layer]
            hs, h_last, c_last, mf, mi = _masked_scan(x, mask, h0, c0, w_ih, b_ih, w_hh, b_hh, c.chunk_size,
                                                      c.ordered)
            new_state.append((h_last, c_last))
            master_forget.append(mf)
            master_input.append(mi)
            raw_outputs.append(hs)
            x = hs
            if layer < c.num_layers - 1:
                x = self._locked(x, c.dropout_hidden, keys, deterministic)
        output = self._locked(x, c.dropout, keys, deterministic)
        logits = output @ embedding.T + self.decoder_bias[...]
        aux = {"master_forget": master_forget, "master_input": master_input, "raw_outputs": raw_outputs}
        return logits, new_state, aux

    @staticmethod
    def _locked(x, rate: float, keys, deterministic: bool):
        # A key is drawn even at rate 0 so that the other masks do not depend on which rates are 0.
        if deterministic:
            return x
        key = next(keys)
        if rate == 0.0:
            return x
        return x * locked_dropout_mask(key, x.shape[0], x.shape[2], rate, x.dtype)
