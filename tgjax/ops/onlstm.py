"""The ON-LSTM recurrence (Shen et al., ICLR 2019; Shen's thesis §3.3) as one `lax.scan`.

With H hidden units in nc = H / C chunks of C units each, one step is

    g_t  = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh           [G], G = 2 nc + 4 H
    f~_t = cumax(g_t[master forget])                       [nc], rises to 1
    i~_t = 1 - cumax(g_t[master input])                    [nc], falls to 0
    w_t  = f~_t * i~_t                                     (overlap)
    f^_t = sigmoid(g_t[f]) * w_t + (f~_t - w_t)
    i^_t = sigmoid(g_t[i]) * w_t + (i~_t - w_t)
    c_t  = f^_t * c_{t-1} + i^_t * tanh(g_t[c^])
    h_t  = sigmoid(g_t[o]) * tanh(c_t)

with cumax(z) = cumsum(softmax(z)). The master gates live at chunk
resolution (nc values) and are broadcast over the C units of each chunk: unit
j belongs to chunk j // C. There is no LayerNorm (the release has it commented
out).

Column order of the G gate pre-activations (the release's, ON_LSTM.py):
`[master input (nc) | master forget (nc) | o (H) | c^ (H) | i (H) | f (H)]`.
The last 4 H columns are the release's `view(B, 4 nc, C).chunk(4)`, i.e. four
contiguous blocks of H, each chunk-major (unit j = chunk j // C, offset j % C).
The cell state c is [B, H] here; the release keeps it as [B, nc, C], the same
numbers in the same order.

Paper and release agree on every equation of the cell, so there is no
paper/release switch here: the release's differences (two biases instead of
one, DropConnect on W_hh, its dropouts) are either summed away (b_ih + b_hh)
or belong to the language model, not to the recurrence.

The top chunk's quirk (both the paper's equations and the release; the
release's issue #27): the last entry of a cumax is the sum of a softmax, 1, so
the top chunk always has f~ = 1 and i~ = 0, hence w = 0, f^ = 1, i^ = 0: its
cell never changes (c_T = c_0 there; from the release's zero state its h is
0 forever). Here `cumax` pins its top entry to the constant 1, so those values
are *exactly* 1 and 0 rather than 1 up to a float rounding as in the
release's cumsum(softmax); the recurrence is the same function.

`ordered=False` is a plain LSTM in the same layout, the same-budget baseline
of the unsupervised-parsing claim (in neither the paper nor the release): the
master gates are fixed at f~ = i~ = 1, so f^ = sigmoid(g[f]) and
i^ = sigmoid(g[i]), and the 2 nc master-gate columns are read by nothing. In
their place the scan returns, at chunk resolution, the forget and input
gates' means over each chunk's units: 1 - mean(...) of the first is the plain
LSTM's analogue of the release's distance (how much of the memory a word
erases).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["cumax", "onlstm_scan"]


def cumax(logits, axis: int = -1):
    """cumsum(softmax(logits)) along `axis`; its last entry is exactly 1.

    The running sum of exp(logits - max) divided by the total, with the
    last entry set to the constant 1 (mathematically it is total / total; a
    compiler may compute that as total * (1 / total), which can miss 1 by a
    rounding). The same function as the release's `cumsum(softmax(.))`,
    whose top value is 1 only up to the rounding of its float sum.
    """
    logits = jnp.moveaxis(jnp.asarray(logits), axis, -1)
    shifted = logits - lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    running = jnp.cumsum(jnp.exp(shifted), axis=-1)
    below_top = running[..., :-1] / running[..., -1:]
    top = jnp.ones_like(running[..., -1:])
    return jnp.moveaxis(jnp.concatenate([below_top, top], axis=-1), -1, axis)


def num_chunks(hidden_size: int, chunk_size: int) -> int:
    """H / C, the number of master-gate chunks; a ValueError unless C is a positive int dividing H."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    if hidden_size % chunk_size != 0:
        raise ValueError(
            f"chunk_size {chunk_size} does not divide the hidden size {hidden_size} "
            f"(ON-LSTM needs whole chunks: H = number of chunks x chunk_size)"
        )
    return hidden_size // chunk_size


def _check_shapes(x, h0, c0, w_ih, b_ih, w_hh, b_hh, chunk_size):
    if x.ndim != 3:
        raise ValueError(f"x must be [B, T, D], got shape {x.shape}")
    B, T, D = x.shape
    if h0.ndim != 2 or h0.shape[0] != B:
        raise ValueError(f"h0 must be [B, H] with x's batch B = {B}, got shape {h0.shape}")
    H = h0.shape[1]
    n_chunks = num_chunks(H, chunk_size)
    G = 2 * n_chunks + 4 * H
    if c0.shape != (B, H):
        raise ValueError(f"c0 must be [B, H] = {(B, H)} like h0, got shape {c0.shape}")
    expected = {"w_ih": (D, G), "b_ih": (G,), "w_hh": (H, G), "b_hh": (G,)}
    for name, array in (("w_ih", w_ih), ("b_ih", b_ih), ("w_hh", w_hh), ("b_hh", b_hh)):
        if array.shape != expected[name]:
            raise ValueError(
                f"{name} must have shape {expected[name]} (D = {D} inputs, H = {H} units, "
                f"G = 2*{n_chunks} chunks + 4*{H} = {G} gate columns), got {array.shape}"
            )
    return n_chunks


def _cell(gates, c_prev, n_chunks: int, chunk_size: int, ordered: bool = True):
    """One ON-LSTM step from the summed pre-activations (`ordered=False`: a plain LSTM, module docstring).

    gates [B, G], c_prev [B, H] -> h [B, H], c [B, H], master_forget [B, nc], master_input [B, nc].
    """
    B = gates.shape[0]
    master_input_logits = gates[:, :n_chunks]
    master_forget_logits = gates[:, n_chunks : 2 * n_chunks]
    # [B, 4, nc, C]: the o, c^, i, f blocks, each chunk-major.
    blocks = gates[:, 2 * n_chunks :].reshape(B, 4, n_chunks, chunk_size)
    output_gate = jax.nn.sigmoid(blocks[:, 0])
    candidate = jnp.tanh(blocks[:, 1])
    input_gate = jax.nn.sigmoid(blocks[:, 2])
    forget_gate = jax.nn.sigmoid(blocks[:, 3])
    if not ordered:
        c = forget_gate * c_prev.reshape(B, n_chunks, chunk_size) + input_gate * candidate
        h = output_gate * jnp.tanh(c)
        return h.reshape(B, -1), c.reshape(B, -1), jnp.mean(forget_gate, -1), jnp.mean(input_gate, -1)

    master_forget = cumax(master_forget_logits)  # [B, nc], non-decreasing, last = 1
    master_input = 1.0 - cumax(master_input_logits)  # [B, nc], non-increasing, last = 0
    # Broadcast chunk-level gates over the C units of each chunk.
    mf = master_forget[:, :, None]
    mi = master_input[:, :, None]
    overlap = mf * mi
    forget_hat = forget_gate * overlap + (mf - overlap)
    input_hat = input_gate * overlap + (mi - overlap)
    c = forget_hat * c_prev.reshape(B, n_chunks, chunk_size) + input_hat * candidate
    h = output_gate * jnp.tanh(c)
    return h.reshape(B, -1), c.reshape(B, -1), master_forget, master_input


def onlstm_scan(x, h0, c0, w_ih, b_ih, w_hh, b_hh, *, chunk_size: int, ordered: bool = True):
    """Run an ON-LSTM layer over a batch of sequences.

    Args:
      x: [B, T, D] inputs.
      h0, c0: [B, H] initial hidden and cell states (the release starts from zeros).
      w_ih: [D, G] input weights, G = 2 nc + 4 H, columns in the release's
        order (master input, master forget, o, c^, i, f); the transpose of the
        release's `ih.0.weight`.
      b_ih: [G] input bias (`ih.0.bias`).
      w_hh: [H, G] recurrent weights (the transpose of `hh.weight`).
      b_hh: [G] recurrent bias (`hh.bias`).
      chunk_size: C, units per chunk; must divide H (nc = H / C).
      ordered: False for a plain LSTM in the same layout (module docstring): the
        master gates are not applied, and the chunk means of the forget and
        input gates come back in their place.

    Returns:
      h [B, T, H] hidden states, hT [B, H], cT [B, H] final states, and the
      master gates at chunk resolution, master_forget [B, T, nc] (f~, rises to
      exactly 1) and master_input [B, T, nc] (i~, falls to exactly 0). The
      release's syntactic distances are 1 - mean(master_forget, -1) and
      mean(master_input, -1).

    The input projection of every step is one matmul before the scan; the
    scan carries (h, c) and does one [B, H] x [H, G] matmul per step. Shape
    errors are raised at trace time, naming the numbers that disagree.
    """
    x, h0, c0 = jnp.asarray(x), jnp.asarray(h0), jnp.asarray(c0)
    w_ih, b_ih, w_hh, b_hh = (jnp.asarray(a) for a in (w_ih, b_ih, w_hh, b_hh))
    n_chunks = _check_shapes(x, h0, c0, w_ih, b_ih, w_hh, b_hh, chunk_size)
    dtype = jnp.result_type(x, h0, c0, w_ih, b_ih, w_hh, b_hh)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    x, h0, c0, w_ih, b_ih, w_hh, b_hh = (a.astype(dtype) for a in (x, h0, c0, w_ih, b_ih, w_hh, b_hh))

    # All input projections at once, time-major for the scan: [T, B, G].
    gates_from_input = jnp.einsum("btd,dg->tbg", x, w_ih) + (b_ih + b_hh)

    def step(carry, input_gates):
        h_prev, c_prev = carry
        gates = input_gates + h_prev @ w_hh
        h, c, master_forget, master_input = _cell(gates, c_prev, n_chunks, chunk_size, ordered)
        return (h, c), (h, master_forget, master_input)

    (h_last, c_last), (hs, master_forget, master_input) = lax.scan(step, (h0, c0), gates_from_input)
    to_batch_major = lambda a: jnp.swapaxes(a, 0, 1)  # noqa: E731
    return to_batch_major(hs), h_last, c_last, to_batch_major(master_forget), to_batch_major(master_input)
