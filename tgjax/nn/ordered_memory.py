"""Ordered Memory as a Flax NNX module (Shen et al., NeurIPS 2019; thesis §3.5), around
`tgjax.ops.ordered_memory_scan`.

`OrderedMemory(in_features, slot_size, n_slots)` holds the parameters of the
input projection, the shared LayerNorm, the pointer scorer and the gated
recursive cell; calling it on x [B, T, D_in] (and a padding mask [B, T])
runs the whole sequence in one `lax.scan` and returns the op's
`OrderedMemoryOutput`: the root-slot outputs [B, T, D], the root output at
each sequence's last real token [B, D] (the sequence representation), and
the pointers [B, T, N] from which `tgjax.ops.ordered_memory.pointer_tree`
reads a tree. The equations, and the thesis/release switches
(`query_key_norm`, `mask_floor`, `padding`; `RELEASE` sets the release's),
are documented in `tgjax.ops.ordered_memory`.

Parameters ([in, out] layout; the release's PyTorch names in brackets):

    w_in [D_in, D], b_in [D]            input projection
    ln_scale, ln_bias [D]               the LayerNorm shared by the input projection and the cell output
    w_q, b_q, w_k, b_k [D, D], [D]      pointer scorer: query and key maps
    ln_q_*, ln_k_* [D]                  LayerNorms on q and k (only with query_key_norm, the release)
    w_score [D], b_score []             the scalar score of ReLU(q + k)
    w_1 [2D, 4D], b_1, w_2 [4D, 4D], b_2   the gated recursive cell

No parameter depends on the number of slots, so `n_slots` may be changed at
call time (the release doubles it at test time for logic). Initialisation is
PyTorch's `nn.Linear` default, as in the release: weights and biases uniform
in [-1/sqrt(fan_in), 1/sqrt(fan_in)]; LayerNorms start at scale 1, bias 0.
Dropout (the release's `dropoutm` and `dropout`) is applied unless the module
is in eval mode (`model.eval()`) or called with `deterministic=True`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.params import param
from tgjax.ops.ordered_memory import OrderedMemoryOutput, OrderedMemoryParams, ordered_memory_scan

__all__ = ["OrderedMemory"]


def _uniform(bound: float):
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


class OrderedMemory(nnx.Module):
    """An Ordered Memory layer over sequences.

    Args:
      in_features: D_in, the input (embedding) size.
      slot_size: D, the size of each memory slot (and of the output).
      n_slots: N, the default number of slots (maximum stack depth + 1).
      query_key_norm, mask_floor, padding: thesis (default) or release
        behaviour, see `tgjax.ops.ordered_memory`.
      attention_dropout, cell_dropout: the release's `dropoutm` and `dropout`.
    """

    def __init__(self, in_features: int, slot_size: int, n_slots: int, *, rngs: nnx.Rngs,
                 query_key_norm: bool = False, mask_floor: float = 0.0, padding: str = "carry",
                 attention_dropout: float = 0.0, cell_dropout: float = 0.0, dtype=jnp.float32):
        if padding not in ("carry", "zero"):
            raise ValueError(f"padding must be 'carry' (thesis) or 'zero' (release), got {padding!r}")
        if isinstance(n_slots, bool) or not isinstance(n_slots, int) or n_slots < 1:
            raise ValueError(f"n_slots must be a positive int, got {n_slots!r}")
        D = slot_size
        self.in_features, self.slot_size, self.n_slots = in_features, slot_size, n_slots
        self.query_key_norm, self.mask_floor, self.padding = query_key_norm, mask_floor, padding
        self.attention_dropout, self.cell_dropout = attention_dropout, cell_dropout
        self.deterministic = False

        def linear(fan_in, shape, axes):
            return param(rngs, _uniform(1.0 / float(np.sqrt(fan_in))), shape, axes, dtype)

        def ones(shape):
            return param(rngs, nnx.initializers.ones, shape, (None,) * len(shape), dtype)

        def zeros(shape):
            return param(rngs, nnx.initializers.zeros, shape, (None,) * len(shape), dtype)

        self.w_in = linear(in_features, (in_features, D), ("embed", None))
        self.b_in = linear(in_features, (D,), (None,))
        self.ln_scale, self.ln_bias = ones((D,)), zeros((D,))
        self.w_q, self.b_q = linear(D, (D, D), (None, None)), linear(D, (D,), (None,))
        self.w_k, self.b_k = linear(D, (D, D), (None, None)), linear(D, (D,), (None,))
        if query_key_norm:
            self.ln_q_scale, self.ln_q_bias = ones((D,)), zeros((D,))
            self.ln_k_scale, self.ln_k_bias = ones((D,)), zeros((D,))
        self.w_score, self.b_score = linear(D, (D,), (None,)), linear(D, (), ())
        self.w_1, self.b_1 = linear(2 * D, (2 * D, 4 * D), (None, "mlp")), linear(2 * D, (4 * D,), ("mlp",))
        self.w_2, self.b_2 = linear(4 * D, (4 * D, 4 * D), ("mlp", None)), linear(4 * D, (4 * D,), (None,))
        if attention_dropout > 0.0 or cell_dropout > 0.0:
            self.rngs = rngs["dropout"].fork()
        else:
            self.rngs = nnx.data(None)

    def parameters(self) -> OrderedMemoryParams:
        """The parameters as the op's `OrderedMemoryParams` (unit/zero q, k LayerNorms when unused)."""
        names = OrderedMemoryParams._fields
        values = {}
        for name in names:
            if hasattr(self, name):
                values[name] = getattr(self, name)[...]
            else:  # q/k LayerNorm, not used without query_key_norm
                values[name] = (jnp.ones if name.endswith("scale") else jnp.zeros)(self.slot_size, self.w_q[...].dtype)
        return OrderedMemoryParams(**values)

    def __call__(self, x, valid=None, *, n_slots: int | None = None,
                 deterministic: bool | None = None) -> OrderedMemoryOutput:
        """x [B, T, D_in], valid [B, T] bool (None = no padding) -> `OrderedMemoryOutput`."""
        deterministic = self.deterministic if deterministic is None else deterministic
        use_dropout = not deterministic and (self.attention_dropout > 0.0 or self.cell_dropout > 0.0)
        return ordered_memory_scan(
            x, valid, self.parameters(), n_slots=self.n_slots if n_slots is None else n_slots,
            query_key_norm=self.query_key_norm, mask_floor=self.mask_floor, padding=self.padding,
            dropout_key=self.rngs() if use_dropout else None,
            attention_dropout=self.attention_dropout, cell_dropout=self.cell_dropout)
