"""The nondeterministic stack (dVPDA) of DuSell & Chiang, as a scan over span lengths.

Public entry point: `nondeterministic_stack(push, repl, pop, pushed, bottom)`.
Equation numbers refer to "Stack Attention" (DuSell & Chiang, ICLR 2024),
Appendix B.

Indexing. The paper's inner weights gamma[i -> t] (-1 <= i < t <= n) are
kept as a chart over (start i' = i + 1, length L = t - i): a span (i', L)
begins at chart row i' in 0..n and ends at paper time i' + L - 1, so with
T = n + 1 rows, 1 <= L <= T - i'. Transitions are indexed by paper time
t = 0..n (Delta_t is the input at t - 1; the t = 0 "push" is the indicator
of eq. 21). The forward weights alpha[t] (eq. 27) are kept as A[e],
e = t + 1 in 0..T. Configurations (state, top symbol) are flattened as
q * S + x.

Three facts shape the algorithm.

* zeta is not needed. A span [i -> t] never pops the element pushed at
  i + 1 (a pop inside the span pops an element pushed later; eq. 24), and
  replace keeps the vector, so every run summed in zeta[i -> t] has v_{i+1}
  on top at t: zeta[i -> t] = gamma[i -> t] * v_{i+1} (v_0 for i = -1), by
  induction over eqs. (22), (26). Hence eq. (28) is
  eta_t[r, y] = sum_i v_{i+1} * beta[i, t, r, y] with
  beta[i, t, r, y] = sum_{q, x} alpha[i][q, x] gamma[i -> t][q, x -> r, y],
  the summands of eq. (27). The chart is m times smaller and the O(n^3)
  work has no factor m.
* Spans of one length are independent (eq. 24 reads only shorter spans),
  so the chart is a `lax.scan` over L with all starts in parallel; alpha is
  then a scan over rows and the readings one contraction. The scan over L
  is cut into a few blocks with static slice sizes, so that each step's
  pop sum reads a rectangle close to the cells it needs (one block would do
  ~6x the work).
* Memory: the chart has a `custom_vjp` whose backward pass is the outside
  algorithm, run as the transpose of each forward step in descending L, so
  forward + backward keep O(n^2 Q^2 S^2) (plus O(n^2 Q S m) for the
  readings) instead of the O(n^3) that reverse-mode AD through the scan
  would store. alpha and the readings are O(n^2) and use plain autodiff.
  Spans exist only for i + L <= T, so the chart (and its marginals in the
  backward pass) is folded: lengths past T/2 share the columns of the short
  ones (layout below), half the memory of a square (n = 256, batch 8,
  |Q| = |Γ| = 3: 87 MB each instead of 172 MB).

Numerics: everything is exact log space, per term: each sum is a
logsumexp over the broadcast sum of its operands (as in the authors'
implementation), so no weight range loses precision — only float rounding
of the logs themselves. The backward pass works with marginals
dL/d log(weight), which are bounded; each term's share of a sum is
exp(term - total) in [0, 1]. -inf (a zero weight) is allowed anywhere and
never produces NaN or inf, in values or gradients.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["nondeterministic_stack", "default_num_blocks"]


# --------------------------------------------------------------------------- API


def nondeterministic_stack(push, repl, pop, pushed, bottom, *, num_blocks: int | None = None):
    """Readings of the differentiable vector PDA (dVPDA), Appendix B of DuSell & Chiang (2024).

    All inputs are logs (-inf is a zero weight: an impossible transition).
    State 0 is the initial state q0 and symbol 0 the bottom symbol ⊥; the
    bottom element (⊥, v_0) is never popped.

    Args:
      push: [B, n, Q, S, Q, S]; push[b, t, q, x, r, y] is the log weight of
        "in state q with top symbol x, go to state r and push y" (with the
        vector pushed[b, t]) at position t.
      repl: [B, n, Q, S, Q, S]; "replace x by y, go to r" (the element keeps
        its vector).
      pop: [B, n, Q, S, Q]; "pop x, go to r" (exposing the element below).
      pushed: [B, n, m], log of the pushed vectors v_1..v_n.
      bottom: [m] or [B, m], log of v_0.
      num_blocks: how many static blocks the scan over span lengths is cut
        into (None: `default_num_blocks(n)`). Only speed and compile time
        depend on it.

    Returns:
      readings [B, n, Q, S, m] in real space: readings[b, t, r, y] is the
      paper's r_{t+1}[r, y] (eq. 29), the reading after the action at t: the
      weighted sum of the top vectors of all runs that end in state r with y
      on top, divided by the weight of all runs. Where no run survives (every
      run has weight 0), the reading is 0.

    Differentiable in all inputs (custom VJP: the outside pass); float32 or
    float64 (`jax_enable_x64`). Shape errors are raised at trace time; NaN
    and +inf inputs are rejected when the inputs are concrete (eager calls)
    and are not checked under `jit`. Each new n compiles anew (tens of
    seconds for large n): bucket sequence lengths. The pushed vectors must
    fit the dtype in real space, since the readings are real
    (log v <= ~80 in float32).
    """
    push, repl, pop, pushed, bottom = _check_inputs(push, repl, pop, pushed, bottom)
    B, n, Q, S = push.shape[:4]
    m = pushed.shape[-1]
    if num_blocks is None:
        num_blocks = default_num_blocks(n)
    if not (isinstance(num_blocks, (int, np.integer)) and num_blocks >= 1):
        raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
    bottom = jnp.broadcast_to(bottom, (B, m))
    # v_0..v_n: the vector on top of every span that starts at chart row i'.
    log_vecs = jnp.concatenate([bottom[:, None, :], pushed], axis=1)
    push_t, repl_t, pop_t = _time_indexed(
        push.reshape(B, n, Q * S, Q * S), repl.reshape(B, n, Q * S, Q * S), pop.reshape(B, n, Q * S, Q)
    )
    log_gamma = _chart(push_t, repl_t, pop_t, int(num_blocks))
    log_a, beta = _forward_weights(log_gamma)
    readings = _readings(beta, log_a, log_vecs)[:, 2:]  # R[e] is r_{e-1}; r_1..r_n
    return readings.reshape(B, n, Q, S, m)


def default_num_blocks(n: int) -> int:
    """Blocks for the span scan: 1 for short sequences, up to 8 for long ones.

    Block k's steps read a (rows x splits) rectangle sized for its longest
    span and its first row, so the pop work is ~1 + 2.6/k times the cells it
    needs (1.39x at 8 blocks, 1.26x at 12); each block adds compile time and compiler memory.
    `_blocks` adds one more edge where a folded chart changes layout (L = T/2).
    """
    return int(max(1, min(_MAX_DEFAULT_BLOCKS, (n + 1) // 8)))


# Each block is one more scan body to compile: at n = 256, 12 blocks (and the fold's edge) made the
# compiler's heap peak near 0.9 GB; 8 cost ~9% more pop work there (1.33x the cells it needs vs 1.22x).
_MAX_DEFAULT_BLOCKS = 8


def _check_inputs(push, repl, pop, pushed, bottom):
    names = ("push", "repl", "pop", "pushed", "bottom")
    args = [jnp.asarray(x) for x in (push, repl, pop, pushed, bottom)]
    dtype = jnp.result_type(float, *args)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"nondeterministic_stack needs real inputs, got dtype {dtype}")
    push, repl, pop, pushed, bottom = (x.astype(dtype) for x in args)
    if push.ndim != 6:
        raise ValueError(f"push must be [B, n, Q, S, Q, S], got shape {push.shape}")
    B, n, Q, S = push.shape[:4]
    if push.shape[4:] != (Q, S):
        raise ValueError(
            f"push must be [B, n, Q, S, Q, S] with matching state/symbol axes, got shape {push.shape}"
        )
    if min(B, n, Q, S) < 1:
        raise ValueError(
            f"nondeterministic_stack needs B, n, Q, S >= 1, got B={B}, n={n}, Q={Q}, S={S} "
            f"(push shape {push.shape})"
        )
    if repl.shape != push.shape:
        raise ValueError(f"repl must have push's shape {push.shape}, got {repl.shape}")
    if pop.shape != (B, n, Q, S, Q):
        raise ValueError(f"pop must be [B, n, Q, S, Q] = {(B, n, Q, S, Q)}, got {pop.shape}")
    if pushed.ndim != 3 or pushed.shape[:2] != (B, n) or pushed.shape[2] < 1:
        raise ValueError(f"pushed must be [B, n, m] = [{B}, {n}, m >= 1], got {pushed.shape}")
    m = pushed.shape[2]
    if bottom.shape not in ((m,), (B, m)):
        raise ValueError(f"bottom must be [m] = [{m}] or [B, m] = [{B}, {m}], got {bottom.shape}")
    for name, x in zip(names, (push, repl, pop, pushed, bottom)):
        _check_finite_or_neg_inf(name, x)
    return push, repl, pop, pushed, bottom


def _check_finite_or_neg_inf(name, x):
    """Reject NaN and +inf when `x` is concrete; tracers (under jit) are not checked."""
    if isinstance(x, jax.core.Tracer):
        return
    bad = np.asarray(jnp.isnan(x) | (x == jnp.inf))
    if bad.any():
        where = tuple(int(k) for k in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} contains NaN or +inf (first at index {where}); log weights must be finite or -inf"
        )


# --------------------------------------------------------------------------- log-space helpers


def _safe(x):
    """`x` where finite, else 0: a shift that is harmless when a max or a total is -inf."""
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _lse(x, axis):
    """logsumexp over `axis` (a tuple); -inf where every term is -inf, with a NaN-free gradient."""
    shift = _safe(jnp.max(x, axis=axis, keepdims=True))
    out = jnp.log(jnp.sum(jnp.exp(x - shift), axis=axis, keepdims=True)) + shift
    return jnp.squeeze(out, axis)


@_lse.defjvp
def _lse_jvp(axis, primals, tangents):
    (x,), (dx,) = primals, tangents
    out = _lse(x, axis)
    share = jnp.exp(x - _safe(jnp.expand_dims(out, axis)))  # 0 for -inf terms
    return out, jnp.sum(share * dx, axis=axis)


def _share(term, total):
    """exp(term - total): a term's share of a log-space sum, in [0, 1]; 0 where total is -inf."""
    return jnp.exp(term - _safe(total))


# --------------------------------------------------------------------------- layout
#
# Every array of the chart computation keeps the span start i (or the time
# t) as its minor axis: the per-step work is a few hundred terms per span
# over tiny axes (Q, S ~ 3), and XLA's loops vectorise along the minor axis.
#   transitions: push_t [B, QS, QS, T], repl_t [B, QS, QS, 2T], pop_t [B, QS, Q, 2T]
#     (by paper time t; -inf padding at t = 0 and t > n for dynamic slices).
#   G  [B, QS, S, h+1, Q, T+1]: log gamma[i, L][(q,x) -> (r,y)] at [b, q*S+x, y, L, r, i] for L <= h and,
#      folded, at [b, q*S+x, y, T+1-L, r, T-i] for L > h (h = ceil(T/2) from T = _FOLD_FROM_T on, else
#      h = T: nothing folded; `_fold`). Spans of length L start at i <= T - L only, so column L uses
#      rows 0..T-L and column T+1-L rows L..T: the two share one column, and the chart takes half the
#      memory of a [T+1, T] rectangle. A row past T - L of column
#      L <= h therefore holds a span of the other length: every read that can reach one pairs it with a
#      -inf (a transition past the end, a G' cell that does not exist) or masks it, and writes are masked.
#   G' [B, S, Q, C, Q, E]: log gamma'[k, L'][(u,y) -> r] (eq. 25) at
#      [b, y, r, T + 1 - L', u, k + L' - 1]: by end time, lengths reversed, so
#      that gamma'[i + l, L - l] for all (l, i) is one box at (T + 1 - L, L - 1).
#      C = E = T + (widest block) (`_gamma_prime_extent`): the boxes of
#      one block overhang the chart by less than the block's width, into
#      -inf padding (non-existent spans).
# Every dynamic slice and update goes through `_box` / `_put`, which check
# at trace time that the box fits for every L of the scan: lax.dynamic_slice
# clamps an out-of-range start silently, which would read the wrong spans.
# A span [b, p, y, L, r, i] is split by the pop sum into (l, u): gamma[i, l]
# at [b, p, y, l, u, i] (folded for l > h) and gamma'[i + l, L - l] at [b, y, r, T+1-L+l, u, L-1+i].


def _time_indexed(push, repl, pop):
    """[B, n, QS, .] transitions -> time-minor, indexed by paper time t (t = 0: eq. 21's indicator)."""
    B, n, QS, Q = pop.shape
    T = n + 1
    neg = functools.partial(jnp.full, fill_value=-jnp.inf, dtype=push.dtype)
    push, repl, pop = (jnp.moveaxis(x, 1, -1) for x in (push, repl, pop))
    init = neg((B, QS, QS, 1)).at[:, 0, 0, 0].set(0.0)
    push_t = jnp.concatenate([init, push], axis=-1)
    repl_t = jnp.concatenate([neg((B, QS, QS, 1)), repl, neg((B, QS, QS, T))], axis=-1)
    pop_t = jnp.concatenate([neg((B, QS, Q, 1)), pop, neg((B, QS, Q, T))], axis=-1)
    return push_t, repl_t, pop_t


def _blocks(T: int, num_blocks: int):
    """Static blocks [L0, L1) covering span lengths 2..T, of near-equal width.

    No block straddles the fold (`_fold`): lengths <= h and > h are stored differently, and a
    block's scan body is compiled for one of the two.
    """
    lengths = T - 1
    k = max(1, min(num_blocks, lengths))
    edges = sorted({2 + (lengths * j) // k for j in range(k + 1)} | ({_fold(T) + 1} & set(range(3, T + 1))))
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


# Charts of at least this many rows (T = n + 1) are folded (layout below). Below it the square layout
# costs little memory, and its steps are a little cheaper (one box per pop operand, no masked writes).
_FOLD_FROM_T = 129


def _fold(T: int) -> int:
    """h: chart columns L <= h are stored as they are, L > h folded onto column T + 1 - L (see the layout).

    h = T (nothing folded) below _FOLD_FROM_T.
    """
    return (T + 1) // 2 if T >= _FOLD_FROM_T else T


def _block_sizes(T: int, L0: int, L1: int):
    """Rows (span starts) and pop splits that the lengths L0 <= L < L1 can touch."""
    rows = T - L0 + 1  # spans of length L start at rows 0..T-L
    # The pop sum uses splits l = 1..L-2; one more (l = L1 - 2, -inf for every L of the block)
    # makes G's right box as wide as G' has room for, so that a slip of one is caught.
    splits = L1 - 1
    return rows, splits


def _ends(x, Q, S):
    """[B, QS(start), QS(end r*S+y), t] -> [B, QS, S(y), Q(r), t]."""
    B, QS, _, t = x.shape
    return jnp.swapaxes(x.reshape(B, QS, Q, S, t), 2, 3)


def _check_box(name, shape, start_of, size, lengths):
    """Raise if the box start_of(L) + size leaves `shape` for some L in lengths = (first, last).

    Starts are affine in L, so the two ends of the range cover every L.
    """
    for L in lengths:
        start = start_of(L)
        if len(start) != len(shape) or len(size) != len(shape):
            raise AssertionError(f"{name}: box {start} + {size} does not match the rank of {shape}")
        if any(a < 0 or a + k > d for a, k, d in zip(start, size, shape)):
            raise AssertionError(
                f"{name}: box at {start} of size {tuple(size)} leaves the array of shape {shape}"
                f" at L = {L} (lax.dynamic_slice would clamp it silently)"
            )


def _box(name, x, start_of, size, L, lengths):
    """lax.dynamic_slice(x, start_of(L), size), checked statically over L in `lengths`."""
    size = tuple(size)
    _check_box(name, x.shape, start_of, size, lengths)
    return lax.dynamic_slice(x, start_of(L), size)


def _put(name, x, update, start_of, L, lengths):
    """lax.dynamic_update_slice(x, update, start_of(L)), checked statically over L in `lengths`."""
    _check_box(name, x.shape, start_of, update.shape, lengths)
    return lax.dynamic_update_slice(x, update, start_of(L))


def _add(name, x, update, start_of, L, lengths):
    """x with `update` added into the box at start_of(L): one read and one write of the same box

    (matching indices let XLA update the carry in place).
    """
    return _put(name, x, _box(name, x, start_of, update.shape, L, lengths) + update, start_of, L, lengths)


def _time_slice(name, x, start_of, size, L, lengths):
    """x[..., start_of(L) : start_of(L) + size] (time is the minor axis), checked."""
    return _box(name, x, lambda L: (0,) * (x.ndim - 1) + (start_of(L),), x.shape[:-1] + (size,), L, lengths)


def _gamma_prime_extent(T: int, blocks) -> int:
    """Length-column and end-time extent of G': the chart's T plus the widest block's overhang."""
    width = max([L1 - L0 for L0, L1 in blocks], default=1)
    return T + width


# --------------------------------------------------------------------------- the chart


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _chart(push_t, repl_t, pop_t, num_blocks):
    """log gamma (eq. 24) for all spans: [B, QS, S, h+1, Q, T+1], folded (layout above)."""
    return _inside(push_t, repl_t, pop_t, num_blocks)[0]


def _inside(push_t, repl_t, pop_t, num_blocks):
    """The inside pass: spans of length 1 (the pushes), then one scan step per length L.

    Returns (G, G') in the layouts above; -inf where a span does not exist.
    """
    B, QS, _, T = push_t.shape
    Q = pop_t.shape[2]
    S = QS // Q
    dt = push_t.dtype
    blocks = _blocks(T, num_blocks)
    extent = _gamma_prime_extent(T, blocks)
    G = jnp.full((B, QS, S, _fold(T) + 1, Q, T + 1), -jnp.inf, dt)
    Gp = jnp.full((B, S, Q, extent, Q, extent), -jnp.inf, dt)
    # Length 1: the pushes (eq. 24, first line) and the bottom span [-1 -> 0] (eq. 21).
    pushes = _ends(push_t, Q, S)  # [b, p, y, r, i]
    G = G.at[:, :, :, 1, :, :T].set(pushes)
    first = (1, 1)
    pops_1 = _time_slice("pop_t", pop_t, lambda L: L, T, 1, first)
    Gp = _write_gamma_prime(Gp, _gamma_prime(pushes, pops_1), T, 1, first)

    def step(carry, L, rows, splits, lengths):
        G, Gp = carry
        # Replace (eq. 24, 2nd line): sum_{s,z} gamma[i, L-1][p -> s,z] Delta_t[s,z -> r,y], t = i + L - 1.
        prev = jnp.swapaxes(_column(G, L - 1, rows, _minus_one(lengths)), 2, 3)  # [b, p, s, z, i]
        re = _time_slice("repl_t", repl_t, lambda L: L - 1, rows, L, lengths).reshape(B, 1, Q, S, Q, S, rows)
        rep = _lse(prev[:, :, :, :, None, None] + re, (2, 3))  # [b, p, r, y, i]
        # Pop (eq. 24, 3rd line): sum over splits l and states u of
        # gamma[i, l][p -> u,y] gamma'[i + l, L - l][u,y -> r]; y is a batch index.
        size, count = _row_chunks(rows, B * QS * S * Q * Q * splits)
        last = rows - size

        def pop_chunk(row0):  # [b, p, y, r, i] for the span starts row0 .. row0 + size - 1
            return _lse(jnp.add(*_pop_operands(G, Gp, L, row0, size, splits, lengths, last)), (4,))

        if count == 1:
            pop_sum = pop_chunk(0)
        else:  # a loop, so that one chunk's terms are alive at a time; the last chunk overlaps its neighbour
            pop_sum = lax.fori_loop(
                0,
                count,
                lambda c, acc: lax.dynamic_update_slice_in_dim(
                    acc, pop_chunk(jnp.minimum(c * size, last)), jnp.minimum(c * size, last), axis=4
                ),
                jnp.zeros((B, QS, S, Q, rows), dt),
            )
        new = _lse(jnp.stack([jnp.swapaxes(rep, 2, 3), pop_sum]), (0,))
        G = _write_column(G, new, L, lengths)
        # gamma' of length L + 1 (eq. 25): gamma[i, L] (x) pop at time i + L.
        pops = _time_slice("pop_t", pop_t, lambda L: L, rows, L, lengths)
        Gp = _write_gamma_prime(Gp, _gamma_prime(new, pops), T, L, lengths)
        return (G, Gp), None

    carry = (G, Gp)
    for L0, L1 in blocks:
        rows, splits = _block_sizes(T, L0, L1)
        body = functools.partial(step, rows=rows, splits=splits, lengths=(L0, L1 - 1))
        carry, _ = lax.scan(body, carry, jnp.arange(L0, L1))
    return carry


def _chart_dims(G):
    """(B, QS, S, Q, T, h) of a folded chart [B, QS, S, h+1, Q, T+1] (G, or its marginals mu)."""
    B, QS, S, H1, Q, T1 = G.shape
    return B, QS, S, Q, T1 - 1, H1 - 1


def _minus_one(lengths):
    return lengths[0] - 1, lengths[1] - 1


def _side(lengths, h):
    """"direct" (every L in lengths <= h), "folded" (every L > h) or "both"."""
    lo, hi = lengths
    return "direct" if hi <= h else "folded" if lo > h else "both"


def _clip(L, lo, hi):
    """min(max(L, lo), hi) for a Python int (the static checks) or a traced length."""
    if isinstance(L, (int, np.integer)):
        return min(max(int(L), lo), hi)
    return jnp.clip(L, lo, hi)


def _column(G, L, rows, lengths):
    """gamma[i, L] for i < rows: [b, p, y, r, i] (a row past T - L holds another span's number).

    `lengths` (first, last) bound L; a range on both sides of the fold reads both places and selects.
    """
    B, QS, S, Q, T, h = _chart_dims(G)
    size = (B, QS, S, 1, Q, rows)
    side = _side(lengths, h)
    if side == "direct":
        return _box("G", G, lambda L: (0, 0, 0, L, 0, 0), size, L, lengths)[:, :, :, 0]
    if side == "folded":  # rows T - i for i < rows, read upwards, then turned round
        box = _box("G", G, lambda L: (0, 0, 0, T + 1 - L, 0, T + 1 - rows), size, L, lengths)[:, :, :, 0]
        return jnp.flip(box, axis=4)
    direct = _column(G, _clip(L, lengths[0], h), rows, (lengths[0], h))
    folded = _column(G, _clip(L, h + 1, lengths[1]), rows, (h + 1, lengths[1]))
    return jnp.where(L <= h, direct, folded)


def _write_column(G, new, L, lengths):
    """G with gamma[i, L] = new[..., i] for the rows i <= T - L of new [b, p, y, r, rows] (the rest kept)."""
    B, QS, S, Q, T, h = _chart_dims(G)
    rows = new.shape[-1]
    side = _side(lengths, h)
    if side == "both":
        raise AssertionError(f"G: a block of lengths {lengths} straddles the fold at {h}")
    if h >= T:  # not folded: rows past T - L are nobody's, and `new` is -inf there anyway
        return _put("G", G, new[:, :, :, None], lambda L: (0, 0, 0, L, 0, 0), L, lengths)
    merged = jnp.where(jnp.arange(rows) <= T - L, new, _column(G, L, rows, lengths))
    if side == "direct":
        return _put("G", G, merged[:, :, :, None], lambda L: (0, 0, 0, L, 0, 0), L, lengths)
    return _put("G", G, jnp.flip(merged, axis=4)[:, :, :, None], lambda L: (0, 0, 0, T + 1 - L, 0, T + 1 - rows),
                L, lengths)


def _add_column(name, x, update, L, lengths):
    """x (a folded chart) with update [b, p, y, r, rows] added to column L's rows i < rows.

    Rows past T - L land on another length's spans: the update must be 0 there.
    """
    B, QS, S, Q, T, h = _chart_dims(x)
    rows = update.shape[-1]
    side = _side(lengths, h)
    if side == "both":  # both places, each with the update where L is on its side and 0 elsewhere
        x = _add_column(name, x, jnp.where(L <= h, update, 0.0), _clip(L, lengths[0], h), (lengths[0], h))
        return _add_column(name, x, jnp.where(L > h, update, 0.0), _clip(L, h + 1, lengths[1]), (h + 1, lengths[1]))
    if side == "direct":
        return _add(name, x, update[:, :, :, None], lambda L: (0, 0, 0, L, 0, 0), L, lengths)
    return _add(name, x, jnp.flip(update, axis=4)[:, :, :, None], lambda L: (0, 0, 0, T + 1 - L, 0, T + 1 - rows),
                L, lengths)


def _left_box(G, L, row0, size, splits, lengths, last_row0):
    """gamma[i, l] for l < splits and row0 <= i < row0 + size: [b, p, y, splits, r, size].

    Lengths l <= h are one box; l > h (columns T + 1 - l, rows T - i) a second, turned round.
    """
    B, QS, S, Q, T, h = _chart_dims(G)
    direct = min(splits, h + 1)
    parts = [_row_box("G", G, lambda L, r: (0,) * 5 + (r,), (B, QS, S, direct, Q, size), L, row0, lengths,
                      last_row0)]
    if splits > direct:  # l = h+1 .. splits-1 at columns T+2-splits .. T-h, rows T+1-row0-size .. T-row0
        box = _row_box("G", G, lambda L, r: (0, 0, 0, T + 2 - splits, 0, T + 1 - r - size),
                       (B, QS, S, splits - direct, Q, size), L, row0, lengths, last_row0)
        parts.append(jnp.flip(box, axis=(3, 5)))
    return jnp.concatenate(parts, axis=3) if len(parts) > 1 else parts[0]


def _add_left_box(x, update, L, row0, lengths, last_row0):
    """x (folded marginals) with update [b, p, y, splits, r, size] added where `_left_box` reads."""
    B, QS, S, Q, T, h = _chart_dims(x)
    splits, size = update.shape[3], update.shape[5]
    direct = min(splits, h + 1)
    x = _row_add("mu", x, update[:, :, :, :direct], lambda L, r: (0,) * 5 + (r,), L, row0, lengths, last_row0)
    if splits > direct:
        x = _row_add("mu", x, jnp.flip(update[:, :, :, direct:], axis=(3, 5)),
                     lambda L, r: (0, 0, 0, T + 2 - splits, 0, T + 1 - r - size), L, row0, lengths, last_row0)
    return x


def _pop_operands(G, Gp, L, row0, rows, splits, lengths, last_row0=0):
    """The operands of the pop sum of step L for span starts row0 <= i < row0 + rows,

    broadcastable to [b, p, y, r, (l, u), i]:
    left[b, p, y, 0, l*Q+u, i] = log gamma[i, l][p -> u,y];
    right[b, 0, y, r, l*Q+u, i] = log gamma'[i + l, L - l][u,y -> r].
    row0 may be traced; it is checked statically over 0..last_row0.
    """
    B, QS, S, Q, T, h = _chart_dims(G)
    right_at = lambda L, r: _pop_box(T, r)(L)  # noqa: E731
    left = _left_box(G, L, row0, rows, splits, lengths, last_row0)
    right = _row_box("G'", Gp, right_at, (B, S, Q, splits, Q, rows), L, row0, lengths, last_row0)
    return left.reshape(B, QS, S, 1, splits * Q, rows), right.reshape(B, 1, S, Q, splits * Q, rows)


def _check_rows(name, shape, start_of, size, lengths, last_row0):
    """_check_box for start_of(L, r) at both ends of r in 0..last_row0 (starts are affine in r too)."""
    for r in sorted({0, last_row0}):
        _check_box(name, shape, lambda L, r=r: start_of(L, r), size, lengths)


def _row_box(name, x, start_of, size, L, row0, lengths, last_row0):
    """lax.dynamic_slice(x, start_of(L, row0), size), checked over L in lengths and row0 in 0..last_row0."""
    size = tuple(size)
    _check_rows(name, x.shape, start_of, size, lengths, last_row0)
    return lax.dynamic_slice(x, start_of(L, row0), size)


def _row_add(name, x, update, start_of, L, row0, lengths, last_row0):
    """x with `update` added into the box at start_of(L, row0) (same box read and written: in place)."""
    _check_rows(name, x.shape, start_of, update.shape, lengths, last_row0)
    at = start_of(L, row0)
    return lax.dynamic_update_slice(x, lax.dynamic_slice(x, at, update.shape) + update, at)


# The pop sum's terms [b, p, y, r, (l, u), i] are the largest temporary of a
# step (forward: their log-sum-exp; backward: each term's share, summed
# along two axes, so XLA materialises it): ~140 MB per step at n = 256,
# batch 8. Rows (span starts) are independent, so a step works through
# them in chunks of at most this many terms, one chunk at a time (a loop:
# unrolled chunks are scheduled side by side and their buffers overlap, even
# chained by lax.optimization_barrier). The price is time where chunks are
# many: at n = 256, batch 8, Q = S = 3 the step's CPU time was 34.5 s against
# 23.1 s unchunked (XLA scratch 588 vs 698 MB, same process layout); at
# n = 64 every block is one chunk and nothing changes.
_POP_CHUNK_TERMS = 2**22


def _row_chunks(rows: int, terms_per_row: int):
    """(size, count): `count` equal chunks of `size` rows covering range(rows), each with at most

    _POP_CHUNK_TERMS terms; chunk c starts at min(c * size, rows - size), so the last one may
    overlap its neighbour (the backward counts each row once).
    """
    size = max(1, min(rows, _POP_CHUNK_TERMS // max(1, terms_per_row)))
    count = -(-rows // size)
    return -(-rows // count), count


def _pop_box(T, row0=0):
    """Where gamma'[i + l, L - l] (l = 0.., i = row0..) starts in G': (length column, end time)."""
    return lambda L: (0, 0, 0, T + 1 - L, 0, L - 1 + row0)


def _gamma_prime_cell(T):
    """Where gamma'[i, L + 1] (i = 0..) starts in G': made at step L from gamma[i, L]."""
    return lambda L: (0, 0, 0, T - L, 0, L)


def _gamma_prime(g, po):
    """Eq. (25): log gamma'[i][(u,y) -> r] as [b, (u,y), r, i].

    From g = log gamma[i] [b, (u,y), z, s, i] and the pops po [b, (s,z), r, i].
    """
    B, QS, S, Q, rows = g.shape
    po = jnp.swapaxes(po.reshape(B, Q, S, Q, rows), 1, 2)  # [b, z, s, r, i]
    return _lse(g[:, :, :, :, None] + po[:, None], (2, 3))


def _write_gamma_prime(Gp, gp, T, L, lengths):
    """Store gamma'[i, L + 1] (gp [b, (u,y), r, i]) at column T - L, time i + L."""
    B, QS, Q, rows = gp.shape
    S = QS // Q
    gp = gp.reshape(B, Q, S, Q, rows).transpose(0, 2, 3, 1, 4)  # [b, y, r, u, i]
    return _put("G'", Gp, gp[:, :, :, None], _gamma_prime_cell(T), L, lengths)


def _chart_fwd(push_t, repl_t, pop_t, num_blocks):
    G, Gp = _inside(push_t, repl_t, pop_t, num_blocks)
    return G, (repl_t, pop_t, G, Gp)


def _chart_bwd(num_blocks, res, g_bar):
    """The outside pass, in marginals mu = dL/d log gamma (bounded), descending L.

    `g_bar` (the cotangent of the chart) is each span's direct marginal
    (through alpha and the readings); mu accumulates on top of it. Step L is
    the transpose of forward step L: gamma'[., L+1] hands its marginal back
    to gamma[., L] (eq. 25), which is then complete and is split among the
    terms of its sum in proportion to their shares exp(term - total) in
    [0, 1]: the pop terms (onto gamma[i, l] and gamma'[i + l, L - l], the box
    the forward read) and the replace terms (onto gamma[i, L - 1]). The
    marginals of the log transition weights collect per time step.
    """
    repl_t, pop_t, G, Gp = res
    B, QS, S, Q, T, _ = _chart_dims(G)
    dt = G.dtype
    blocks = _blocks(T, num_blocks)
    mu = g_bar
    mu_p = jnp.zeros(Gp.shape, dt)
    d_repl = jnp.zeros(repl_t.shape, dt)
    d_pop = jnp.zeros(pop_t.shape, dt)

    # Each carry is read and written once per step through boxes with the
    # same start indices (XLA then updates it in place).
    def step(carry, L, rows, splits, lengths, first):
        mu, mu_p, d_repl, d_pop = carry
        # 1. gamma'[i, L+1][(u,y) -> r] = sum_{s,z} gamma[i, L][(u,y) -> s,z] pop_t[i+L][s,z -> r]:
        #    its (complete) marginal flows back onto gamma[i, L].
        size = (B, S, Q, 1, Q, rows)
        to_uy = lambda x: x[:, :, :, 0].transpose(0, 3, 1, 2, 4).reshape(B, QS, Q, rows)  # noqa: E731
        gp = to_uy(_box("G'", Gp, _gamma_prime_cell(T), size, L, lengths))  # [b, (u,y), r, i]
        mu_gp = to_uy(_box("mu'", mu_p, _gamma_prime_cell(T), size, L, lengths))
        g_l = _column(G, L, rows, lengths)  # [b, (u,y), z, s, i]
        po = _time_slice("pop_t", pop_t, lambda L: L, rows, L, lengths)
        po = jnp.swapaxes(po.reshape(B, Q, S, Q, rows), 1, 2)  # [b, z, s, r, i]
        flow = mu_gp[:, :, None, None] * _share(g_l[:, :, :, :, None] + po[:, None], gp[:, :, None, None])
        d_pop_l = jnp.swapaxes(jnp.sum(flow, axis=1), 1, 2).reshape(B, QS, Q, rows)
        d_pop = _add("d_pop", d_pop, d_pop_l, lambda L: (0, 0, 0, L), L, lengths)
        mu_l = _column(mu, L, rows, lengths) + jnp.sum(flow, axis=4)  # complete: [b, p, y, r, i]
        if first:  # L = 1: the pushes, whose marginals are mu_l itself.
            return (mu, mu_p, d_repl, d_pop), mu_l
        # 2. Pop terms: the share of each (l, u) in gamma[i, L][p -> r,y], by chunks of span starts.
        size, count = _row_chunks(rows, B * QS * S * Q * Q * splits)
        last = rows - size

        def pop_chunk(c, mus):
            mu, mu_p = mus
            row0 = jnp.minimum(c * size, last)
            left, right = _pop_operands(G, Gp, L, row0, size, splits, lengths, last)
            g_c = lax.dynamic_slice_in_dim(g_l, row0, size, axis=4)[:, :, :, :, None]
            mu_c = lax.dynamic_slice_in_dim(mu_l, row0, size, axis=4)
            if count > 1:  # the last chunk's rows that its neighbour already did
                mu_c = jnp.where(row0 + jnp.arange(size) >= c * size, mu_c, 0.0)
            flow = mu_c[:, :, :, :, None] * _share(left + right, g_c)  # [b, p, y, r, (l, u), i]
            to_left = jnp.sum(flow, axis=3).reshape(B, QS, S, splits, Q, size)  # onto gamma[i, l]
            to_right = jnp.sum(flow, axis=1).reshape(B, S, Q, splits, Q, size)  # onto gamma'[i+l, L-l]
            mu = _add_left_box(mu, to_left, L, row0, lengths, last)
            mu_p = _row_add("mu'", mu_p, to_right, lambda L, r: _pop_box(T, r)(L), L, row0, lengths, last)
            return mu, mu_p

        if count == 1:
            mu, mu_p = pop_chunk(0, (mu, mu_p))
        else:
            mu, mu_p = lax.fori_loop(0, count, pop_chunk, (mu, mu_p))
        # 3. Replace terms: gamma[i, L-1][p -> s,z] Delta_t[s,z -> r,y], t = i + L - 1.
        prev = jnp.swapaxes(_column(G, L - 1, rows, _minus_one(lengths)), 2, 3)  # [b, p, s, z, i]
        re = _time_slice("repl_t", repl_t, lambda L: L - 1, rows, L, lengths).reshape(B, 1, Q, S, Q, S, rows)
        total = jnp.swapaxes(g_l, 2, 3)[:, :, None, None]  # [b, p, 1, 1, r, y, i]
        flow = jnp.swapaxes(mu_l, 2, 3)[:, :, None, None] * _share(prev[:, :, :, :, None, None] + re, total)
        d_repl_l = jnp.sum(flow, axis=1).reshape(B, QS, QS, rows)
        d_repl = _add("d_repl", d_repl, d_repl_l, lambda L: (0, 0, 0, L - 1), L, lengths)
        to_prev = jnp.swapaxes(jnp.sum(flow, axis=(4, 5)), 2, 3)  # onto gamma[i, L-1]: [b, p, y, r, i]
        mu = _add_column("mu", mu, to_prev, L - 1, _minus_one(lengths))
        return (mu, mu_p, d_repl, d_pop), None

    carry = (mu, mu_p, d_repl, d_pop)
    for L0, L1 in reversed(blocks):
        rows, splits = _block_sizes(T, L0, L1)
        body = functools.partial(step, rows=rows, splits=splits, lengths=(L0, L1 - 1), first=False)
        carry, _ = lax.scan(body, carry, jnp.arange(L0, L1), reverse=True)
    (_, _, d_repl, d_pop), mu_1 = step(carry, 1, rows=T, splits=1, lengths=(1, 1), first=True)
    # gamma[i, 1] is the push weight itself, so its marginal is the push's.
    d_push = jnp.swapaxes(mu_1, 2, 3).reshape(B, QS, QS, T)
    return d_push, d_repl, d_pop


_chart.defvjp(_chart_fwd, _chart_bwd)


# --------------------------------------------------------------------------- alpha and readings


def _forward_weights(log_gamma):
    """alpha (eq. 27) by a scan over span starts, and its summands beta.

    Row i is complete once every earlier row has added its spans, so step i
    adds A[i] (x) gamma[i, L] into A[i + L] for every L.
    Returns log A [B, T+1, QS] (A[e] is the paper's alpha[e - 1]) and
    beta [B, T, T+1, QS]: beta[b, i, L, r*S+y] = log sum_{q,x} A[i][q,x] gamma[i, L][q,x -> r,y].

    Memory: the step reads row i of the chart in place (not a transposed
    copy as scan input) and is rematerialised in the backward pass
    (`jax.checkpoint`), so reverse-mode AD keeps only the running A per step
    ([T, B, 2T+1, QS]) instead of every step's log-sum-exp shares, which
    are chart-sized ([T, B, QS, S, T+1, Q]: ~0.35 GB at n = 256, batch 8).
    """
    B, QS, S, Q, T, h = _chart_dims(log_gamma)
    acc = jnp.full((B, 2 * T + 1, QS), -jnp.inf, log_gamma.dtype).at[:, 0, 0].set(0.0)  # eq. (23)

    @jax.checkpoint
    def step(acc, i):
        # Row i over every length: L <= h at row i, L > h folded at row T - i of columns T + 1 - L.
        # Past L = T - i the numbers are other spans' (junk); they land in A[i + L > T], never read.
        row = lax.dynamic_index_in_dim(log_gamma, i, axis=5, keepdims=False)  # [b, p, y, L <= h, r]
        if h < T:
            folded = lax.dynamic_index_in_dim(log_gamma, T - i, axis=5, keepdims=False)[:, :, :, 1 : T - h + 1]
            row = jnp.concatenate([row, jnp.flip(folded, axis=3)], axis=3)  # [b, p, y, L, r]
        a_i = lax.dynamic_index_in_dim(acc, i, axis=1, keepdims=False)
        beta = _lse(a_i[:, :, None, None, None] + row, (1,))  # [b, y, L, r]
        beta = beta.transpose(0, 2, 3, 1).reshape(B, T + 1, QS)  # [b, L, r*S+y]
        window = lax.dynamic_slice_in_dim(acc, i, T + 1, axis=1)
        acc = lax.dynamic_update_slice_in_dim(acc, _lse(jnp.stack([window, beta]), (0,)), i, axis=1)
        return acc, beta

    acc, beta = lax.scan(step, acc, jnp.arange(T))
    return acc[:, : T + 1], jnp.moveaxis(beta, 0, 1)


def _start_to_end(x, T, fill):
    """[B, T (start i), T+1 (length L), ...] -> [B, T+1 (end e = i + L), T (start i), ...]."""
    e = np.arange(T + 1)[:, None]
    i = np.arange(T)[None, :]
    length = e - i
    out = x[:, np.broadcast_to(i, length.shape), np.clip(length, 0, T)]
    mask = (length >= 1).reshape(length.shape + (1,) * (x.ndim - 3))
    return jnp.where(mask, out, fill)


def _readings(beta, log_a, log_vecs):
    """Eqs. (28)-(29) as one contraction over the span start i: R [B, T+1, QS, m], R[e] = r_{e-1}.

    R[e] = sum_i W[e, i] v_i with W[e, i] = beta[i, e - i] / Z[e] in [0, 1]
    (the share of the runs at e whose top element came with v_i).
    """
    T = beta.shape[1]
    log_z = _lse(log_a, (2,))  # sum over (r, y) of alpha, eq. (29)'s denominator
    w = jnp.exp(_start_to_end(beta, T, -jnp.inf) - _safe(log_z)[:, :, None, None])
    return jnp.einsum("beiq,bim->beqm", w, jnp.exp(log_vecs))
