"""ON-LSTM as Flax NNX modules (Shen et al., ICLR 2019), around `tgjax.ops.onlstm_scan`.

- `ONLSTMCell`: the parameters of one layer and one time step;
- `ONLSTM`: a layer over whole sequences (one `lax.scan`), holding a cell.

The equations, the gate column order and the top-chunk quirk are documented
in `tgjax.ops.onlstm`. Regularisation (DropConnect on W_hh, locked dropout)
belongs to the language model, not here.

Parameters are in the released code's layout, transposed to JAX's
[in, out] convention, so a released checkpoint converts by transposing:

    release (ON_LSTM.py, ONLSTMCell)      here (ONLSTMCell)        shape
    ih.0.weight  [G, D]                   w_ih = ih.0.weight.T     [D, G]
    ih.0.bias    [G]                      b_ih                     [G]
    hh.weight    [G, H]                   w_hh = hh.weight.T       [H, G]
    hh.bias      [G]                      b_hh                     [G]

with G = 2 nc + 4 H and the columns in the release's order (master input,
master forget, o, c^, i, f). In the release's language model layer l is
`rnn.cells.{l}.`; `released_parameters(state_dict, prefix="rnn.cells.0.")`
does the conversion and `ONLSTMCell.load_released` writes it into a cell.
Initialisation is the release's (PyTorch's `nn.Linear` default): every weight
and bias uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], fan_in = D for the
input map and H for the recurrent one.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import param
from tgjax.ops.onlstm import num_chunks, onlstm_scan

__all__ = ["ONLSTM", "ONLSTMCell", "released_parameters"]


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def released_parameters(state_dict: Mapping[str, object], prefix: str = "") -> dict[str, np.ndarray]:
    """The release's tensors of one ON-LSTM cell in this layout: {w_ih, b_ih, w_hh, b_hh}.

    `state_dict` maps the release's names (e.g. "rnn.cells.0.ih.0.weight") to
    arrays (NumPy, or anything `np.asarray` reads, e.g. CPU torch tensors).
    """
    names = {"w_ih": "ih.0.weight", "b_ih": "ih.0.bias", "w_hh": "hh.weight", "b_hh": "hh.bias"}
    missing = [prefix + name for name in names.values() if prefix + name not in state_dict]
    if missing:
        raise KeyError(f"the state dict has no {', '.join(missing)}")
    arrays = {ours: np.asarray(state_dict[prefix + theirs]) for ours, theirs in names.items()}
    for ours in ("w_ih", "w_hh"):
        arrays[ours] = arrays[ours].T  # PyTorch stores [out, in]
    return arrays


class ONLSTMCell(nnx.Module):
    """Parameters of one ON-LSTM layer; calling it runs one time step.

    Args:
      in_features: D, the input size.
      hidden_size: H, the number of units.
      chunk_size: C, units per chunk (sharing one master-gate value); must divide H.
    """

    def __init__(self, in_features: int, hidden_size: int, chunk_size: int, *, rngs: nnx.Rngs,
                 dtype=jnp.float32):
        self.n_chunks = num_chunks(hidden_size, chunk_size)
        self.in_features = in_features
        self.hidden_size = hidden_size
        self.chunk_size = chunk_size
        gates = 2 * self.n_chunks + 4 * hidden_size
        input_bound = 1.0 / float(np.sqrt(in_features))
        hidden_bound = 1.0 / float(np.sqrt(hidden_size))
        self.w_ih = param(rngs, _uniform(input_bound), (in_features, gates), ("embed", None), dtype)
        self.b_ih = param(rngs, _uniform(input_bound), (gates,), (None,), dtype)
        self.w_hh = param(rngs, _uniform(hidden_bound), (hidden_size, gates), (None, None), dtype)
        self.b_hh = param(rngs, _uniform(hidden_bound), (gates,), (None,), dtype)

    def initial_state(self, batch_size: int, dtype=jnp.float32):
        """The release's zero state: (h [B, H], c [B, H])."""
        zeros = jnp.zeros((batch_size, self.hidden_size), dtype)
        return zeros, zeros

    def parameters(self):
        """(w_ih, b_ih, w_hh, b_hh) as arrays, in `onlstm_scan`'s argument order."""
        return tuple(p[...] for p in (self.w_ih, self.b_ih, self.w_hh, self.b_hh))

    def load_released(self, state_dict: Mapping[str, object], prefix: str = "") -> None:
        """Copy a released cell's tensors (see the module docstring) into this cell."""
        arrays = released_parameters(state_dict, prefix)
        for name, array in arrays.items():
            target = getattr(self, name)
            if array.shape != target[...].shape:
                raise ValueError(f"{prefix}{name}: the checkpoint has shape {array.shape}, "
                                 f"this cell wants {target[...].shape}")
            target[...] = jnp.asarray(array, target[...].dtype)

    def __call__(self, x_t, state):
        """One step: x_t [B, D], state (h [B, H], c [B, H]) ->
        ((h [B, H], c [B, H]), master_forget [B, nc], master_input [B, nc])."""
        h, c = state
        _, h_new, c_new, master_forget, master_input = onlstm_scan(
            x_t[:, None, :], h, c, *self.parameters(), chunk_size=self.chunk_size)
        return (h_new, c_new), master_forget[:, 0], master_input[:, 0]


class ONLSTM(nnx.Module):
    """An ON-LSTM layer over sequences.

    `layer(x [B, T, D], state=None)` returns (h [B, T, H], (hT [B, H], cT [B, H]),
    (master_forget [B, T, nc], master_input [B, T, nc])); `state` defaults to
    the zero state. The parameters are `layer.cell.{w_ih, b_ih, w_hh, b_hh}`.
    """

    def __init__(self, in_features: int, hidden_size: int, chunk_size: int, *, rngs: nnx.Rngs,
                 dtype=jnp.float32):
        self.cell = ONLSTMCell(in_features, hidden_size, chunk_size, rngs=rngs, dtype=dtype)

    def __call__(self, x, state=None):
        if state is None:
            state = self.cell.initial_state(x.shape[0], jnp.result_type(x, self.cell.w_ih[...]))
        h0, c0 = state
        hs, h_last, c_last, master_forget, master_input = onlstm_scan(
            x, h0, c0, *self.cell.parameters(), chunk_size=self.cell.chunk_size)
        return hs, (h_last, c_last), (master_forget, master_input)
