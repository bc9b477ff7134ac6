"""The nondeterministic stack (dVPDA) of DuSell & Chiang, as a scan over span lengths.

Public entry point: `nondeterministic_stack(push, repl, pop, pushed, bottom)`.
Equation numbers refer to "Stack Attention" (DuSell & Chiang, ICLR 2024),
Appendix B.

Indexing. The paper's inner weights gamma[i -> t] (-1 <= i < t <= n) are
kept here as a chart over (start i' = i + 1, length L = t - i): a span
(i', L) begins at chart row i' in 0..n and ends at paper time i' + L - 1,
so with T = n + 1 rows, 1 <= L <= T - i'. Transitions are indexed by paper
time t = 0..n (Delta_t is the input at t - 1; the t = 0 "push" is the
indicator of eq. (21)). The forward weights alpha[t] (eq. 27) are kept as
A[e] with e = t + 1 in 0..T.

Three facts shape the algorithm.

* zeta is not needed. A span [i -> t] never pops the element pushed at
  i + 1 (a pop inside the span pops an element pushed later; eq. 24), and
  replace keeps the vector, so every run summed in zeta[i -> t] has v_{i+1}
  on top at t: zeta[i -> t] = gamma[i -> t] * v_{i+1} (v_0 for i = -1),
  which follows from eqs. (22), (26) by induction. Hence eq. (28) is
  eta_t[r, y] = sum_i v_{i+1} * beta[i, t, r, y] with
  beta[i, t, r, y] = sum_{q, x} alpha[i][q, x] gamma[i -> t][q, x -> r, y],
  the summands of eq. (27). The chart is m times smaller and the O(n^3)
  work has no factor m.
* Spans of one length are independent (Lang's recurrence reads only
  shorter spans), so the chart is a `lax.scan` over L with all starts in
  parallel; alpha is then a cheap scan over rows and the readings one
  contraction. The scan is split into a few blocks of lengths with static
  slice sizes, so that the pop sum reads a rectangle close to the cells
  actually needed (a single block would do ~6x the work).
* Memory: a `custom_vjp` whose backward pass is the outside algorithm run
  as the exact transpose of each forward step (descending L), so forward +
  backward keep O(n^2 Q^2 S^2) (plus O(n^2 Q S m) for the readings), not
  the O(n^3) that reverse-mode AD through the scan would store.

Numerics: chart cells are stored in the scaled-real form of `_scaled`
(mantissa over the start configuration, log scale per end configuration),
so contractions are real matrix products and -inf weights never make NaN.
The adjoints of the backward pass are signed and use the same form. alpha,
beta, and the adjoints of alpha are exact per entry (log space).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from tgjax.ops import _scaled as sc

__all__ = ["nondeterministic_stack", "default_num_blocks"]


# --------------------------------------------------------------------------- API


def nondeterministic_stack(push, repl, pop, pushed, bottom, *, num_blocks: int | None = None):
    """Readings of the differentiable vector PDA (dVPDA), Appendix B of DuSell & Chiang (2024).

    All inputs are logs (-inf is a zero weight / an impossible transition).
    State 0 is the initial state q0 and symbol 0 the bottom symbol ⊥; the
    bottom element (⊥, v_0) is never popped.

    Args:
      push: [B, n, Q, S, Q, S]; push[b, t, q, x, r, y] is the log weight of
        "in state q with top symbol x, go to state r and push y" (with the
        vector pushed[b, t]) when reading position t.
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
      on top, divided by the weight of all runs. Where no run survives (all
      weights -inf), the reading is 0.

    Differentiable in all inputs (custom VJP, the outside pass); float32 or
    float64 (`jax_enable_x64`). Shape errors are raised at trace time; NaN
    and +inf inputs are rejected when the inputs are concrete (eager calls),
    and are not checked under `jit`. Each new n compiles anew: bucket
    sequence lengths. Pushed vectors must fit the dtype in real space
    (the readings are real), e.g. log v <= ~80 in float32.
    """
    push, repl, pop, pushed, bottom = _check_inputs(push, repl, pop, pushed, bottom)
    B, n, Q, S = push.shape[:4]
    m = pushed.shape[-1]
    if num_blocks is None:
        num_blocks = default_num_blocks(n)
    if not (isinstance(num_blocks, (int, np.integer)) and num_blocks >= 1):
        raise ValueError(f"num_blocks must be a positive integer, got {num_blocks!r}")
    bottom = jnp.broadcast_to(bottom, (B, m))
    # v_0..v_n: the vector that the span starting at row i' has on top.
    log_vecs = jnp.concatenate([bottom[:, None, :], pushed], axis=1)
    readings = _nd_stack(
        push.reshape(B, n, Q * S, Q * S),
        repl.reshape(B, n, Q * S, Q * S),
        pop.reshape(B, n, Q * S, Q),
        log_vecs,
        int(num_blocks),
    )
    return readings.reshape(B, n, Q, S, m)


def default_num_blocks(n: int) -> int:
    """Blocks for the span scan: 1 for short sequences, up to 8 for long ones."""
    return int(max(1, min(8, (n + 1) // 16)))


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


# --------------------------------------------------------------------------- kernel


def _blocks(T: int, num_blocks: int):
    """Static blocks [L0, L1) covering span lengths 2..T, of near-equal width."""
    lengths = T - 1
    k = max(1, min(num_blocks, lengths))
    edges = [2 + (lengths * j) // k for j in range(k + 1)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _block_sizes(T: int, L0: int, L1: int):
    """Rows (span starts) and pop splits that lengths L0 <= L < L1 can touch."""
    rows = T - L0 + 1  # spans of length L exist for starts 0..T-L
    splits = max(L1 - 2, 1)  # the pop sum uses splits l = 1..L-2
    return rows, splits


def _time_indexed(push, repl, pop):
    """Transitions indexed by paper time t, padded with -inf for dynamic slices.

    push_t [B, T, QS, QS] (t = 0: the indicator of eq. 21), repl_t [B, 2T, QS, QS],
    pop_t [B, 2T, QS, Q] (t = 0 and t > n: -inf).
    """
    B, n, QS, Q = pop.shape
    T = n + 1
    neg = functools.partial(jnp.full, fill_value=-jnp.inf, dtype=push.dtype)
    init = neg((B, 1, QS, QS)).at[:, 0, 0, 0].set(0.0)
    push_t = jnp.concatenate([init, push], axis=1)
    repl_t = jnp.concatenate([neg((B, 1, QS, QS)), repl, neg((B, T, QS, QS))], axis=1)
    pop_t = jnp.concatenate([neg((B, 1, QS, Q)), pop, neg((B, T, QS, Q))], axis=1)
    return push_t, repl_t, pop_t


def _start_to_end(x, T, fill):
    """Chart by (start i, length L) [B, T, T+1, ...] -> by (end e = i + L, start i) [B, T+1, T, ...]."""
    e = np.arange(T + 1)[:, None]
    i = np.arange(T)[None, :]
    length = e - i
    valid = length >= 1
    out = x[:, np.broadcast_to(i, length.shape), np.clip(length, 0, T)]
    mask = valid.reshape(valid.shape + (1,) * (x.ndim - 3))
    return jnp.where(mask, out, fill)


def _end_to_start(x, T, fill):
    """Inverse of `_start_to_end`: [B, T+1, T, ...] -> [B, T, T+1, ...]."""
    i = np.arange(T)[:, None]
    length = np.arange(T + 1)[None, :]
    e = i + length
    valid = (length >= 1) & (e <= T)
    out = x[:, np.clip(e, 0, T), np.broadcast_to(i, e.shape)]
    mask = valid.reshape(valid.shape + (1,) * (x.ndim - 3))
    return jnp.where(mask, out, fill)


def _inside(push_t, repl_t, pop_t, num_blocks):
    """The chart gamma (eq. 24) and gamma' (eq. 25), one span length per scan step.

    Returns (Gm, Gs, Pm, Ps):
      Gm [B, T, T+1, QS, QS], Gs [B, T, T+1, QS]: gamma by (start, length), scaled
        (mantissa over the start configuration q*S+x, scale per end r*S+y).
      Pm [B, 2T, 2T, QS, Q], Ps [B, 2T, 2T, Q]: gamma'[k, L'] at row k + L' - 1
        (its end time) and column T + 1 - L', so that the pop sum of a step
        reads one rectangle; mantissa over (u, y), scale per r.
    """
    B, T, QS, _ = push_t.shape
    Q = pop_t.shape[-1]
    S = QS // Q
    dt = push_t.dtype
    Gm = jnp.zeros((B, T, T + 1, QS, QS), dt)
    Gs = jnp.full((B, T, T + 1, QS), -jnp.inf, dt)
    Pm = jnp.zeros((B, 2 * T, 2 * T, QS, Q), dt)
    Ps = jnp.full((B, 2 * T, 2 * T, Q), -jnp.inf, dt)

    # Length 1: the pushes (and the bottom span [-1 -> 0], eq. 21).
    m1, s1 = sc.from_log(push_t)
    Gm = Gm.at[:, :, 1].set(m1)
    Gs = Gs.at[:, :, 1].set(s1)
    # gamma' of length 2 (eq. 25): G[k, 1] (x) pop at time k + 1.
    gm, gs = sc.normalize(*sc.contract(m1, s1, pop_t[:, 1 : T + 1]))
    Pm = lax.dynamic_update_slice(Pm, gm[:, :, None], (0, 1, T - 1, 0, 0))
    Ps = lax.dynamic_update_slice(Ps, gs[:, :, None], (0, 1, T - 1, 0))

    def step(carry, L, rows, splits):
        Gm, Gs, Pm, Ps = carry
        # Replace (eq. 24, 2nd line): gamma[i -> t-1] (x) Delta_t[s,z -> r,y].
        prev_m = lax.dynamic_slice(Gm, (0, 0, L - 1, 0, 0), (B, rows, 1, QS, QS))[:, :, 0]
        prev_s = lax.dynamic_slice(Gs, (0, 0, L - 1, 0), (B, rows, 1, QS))[:, :, 0]
        re = lax.dynamic_slice(repl_t, (0, L - 1, 0, 0), (B, rows, QS, QS))
        rep_m, rep_s = sc.contract(prev_m, prev_s, re)
        # Pop (eq. 24, 3rd line): sum over splits l and states u of
        # gamma[i, l][q,x -> u,y] gamma'[i + l, L - l][u,y -> r]; y is a batch index.
        a_m = Gm[:, :rows, :splits].reshape(B, rows, splits, QS, Q, S)
        a_s = Gs[:, :rows, :splits].reshape(B, rows, splits, Q, S)
        p_m = lax.dynamic_slice(Pm, (0, L - 1, T + 1 - L, 0, 0), (B, rows, splits, QS, Q))
        p_m = p_m.reshape(B, rows, splits, Q, S, Q)
        p_s = lax.dynamic_slice(Ps, (0, L - 1, T + 1 - L, 0), (B, rows, splits, Q))
        # The left operand's scale moves onto the right one; shift by the max over (l, u).
        e = a_s[..., None] + p_s[:, :, :, None, None, :]  # [B, i, l, u, y, r]
        e_max = jnp.max(e, axis=(2, 3))  # [B, i, y, r]
        w = p_m * jnp.exp(e - sc.safe(e_max)[:, :, None, None])
        pop_m = jnp.einsum("bilpuy,biluyr->bipry", a_m, w).reshape(B, rows, QS, QS)
        pop_s = jnp.swapaxes(e_max, 2, 3).reshape(B, rows, QS)
        new_m, new_s = sc.normalize(*sc.add(rep_m, rep_s, pop_m, pop_s))
        Gm = lax.dynamic_update_slice(Gm, new_m[:, :, None], (0, 0, L, 0, 0))
        Gs = lax.dynamic_update_slice(Gs, new_s[:, :, None], (0, 0, L, 0))
        # gamma' of length L + 1 (eq. 25): gamma[i, L] (x) pop at time i + L.
        po = lax.dynamic_slice(pop_t, (0, L, 0, 0), (B, rows, QS, Q))
        gp_m, gp_s = sc.normalize(*sc.contract(new_m, new_s, po))
        Pm = lax.dynamic_update_slice(Pm, gp_m[:, :, None], (0, L, T - L, 0, 0))
        Ps = lax.dynamic_update_slice(Ps, gp_s[:, :, None], (0, L, T - L, 0))
        return (Gm, Gs, Pm, Ps), None

    carry = (Gm, Gs, Pm, Ps)
    for L0, L1 in _blocks(T, num_blocks):
        rows, splits = _block_sizes(T, L0, L1)
        body = functools.partial(step, rows=rows, splits=splits)
        carry, _ = lax.scan(body, carry, jnp.arange(L0, L1))
    return carry


def _log_chart_row(Gm, Gs, i):
    """log gamma for the spans starting at row i: [B, T+1, QS, QS]."""
    row_m = lax.dynamic_index_in_dim(Gm, i, axis=1, keepdims=False)
    row_s = lax.dynamic_index_in_dim(Gs, i, axis=1, keepdims=False)
    return sc.to_log(row_m, row_s)


def _forward_weights(Gm, Gs):
    """alpha (eq. 27) by a scan over span starts, and its summands beta.

    Row i is final once all shorter rows have added their spans, so step i
    adds A[i] (x) gamma[i, L] into A[i + L] for every L (exact log space).
    Returns logA [B, T+1, QS] (A[e] = the paper's alpha[e - 1]) and
    beta [B, T, T+1, QS], beta[i, L, r*S+y] = log sum_{q,x} A[i][q,x] gamma[i, L][q,x -> r,y].
    """
    B, T, _, QS, _ = Gm.shape
    acc = jnp.full((B, 2 * T + 1, QS), -jnp.inf, Gm.dtype).at[:, 0, 0].set(0.0)  # eq. (23)

    def step(acc, i):
        a_i = lax.dynamic_index_in_dim(acc, i, axis=1, keepdims=False)
        log_g = _log_chart_row(Gm, Gs, i)
        beta = jax.nn.logsumexp(a_i[:, None, :, None] + log_g, axis=2)  # [B, L, ry]
        window = lax.dynamic_slice(acc, (0, i, 0), (B, T + 1, QS))
        acc = lax.dynamic_update_slice(acc, jnp.logaddexp(window, beta), (0, i, 0))
        return acc, beta

    acc, beta = lax.scan(step, acc, jnp.arange(T))
    return acc[:, : T + 1], jnp.moveaxis(beta, 0, 1)


def _readings(beta, log_a, log_vecs):
    """Eqs. (28)-(29) as one contraction over the span start i.

    Returns W [B, T+1, T, QS] = beta[i, e - i] / Z[e] (by end e; the share of
    the runs at e whose top element was pushed with v_i), log Z [B, T+1],
    and R [B, T+1, QS, m] with R[e] the paper's r_{e-1}.
    """
    T = beta.shape[1]
    log_z = jax.nn.logsumexp(log_a, axis=-1)
    beta_end = _start_to_end(beta, T, -jnp.inf)
    w = jnp.exp(beta_end - sc.safe(log_z)[:, :, None, None])
    r = jnp.einsum("beiq,bim->beqm", w, jnp.exp(log_vecs))
    return w, log_z, r


def _forward(push, repl, pop, log_vecs, num_blocks):
    push_t, repl_t, pop_t = _time_indexed(push, repl, pop)
    Gm, Gs, Pm, Ps = _inside(push_t, repl_t, pop_t, num_blocks)
    log_a, beta = _forward_weights(Gm, Gs)
    w, log_z, r = _readings(beta, log_a, log_vecs)
    residuals = (push_t, repl_t, pop_t, log_vecs, Gm, Gs, Pm, Ps, log_a, w, log_z, r)
    return r[:, 2:], residuals


def _alpha_adjoints(Gm, Gs, d_log, d_sign):
    """Adjoints of beta (and alpha), by a reverse scan over span starts.

    beta_hat[i, L] = D[i, L] / Z[i + L] + A_hat[i + L] and
    A_hat[i][q,x] = sum_{L, r, y} gamma[i, L][q,x -> r,y] beta_hat[i, L, r*S+y],
    where A_hat[e] is the adjoint of A[e] through its later uses (rows > e).
    All in signed log space, exact per entry. d_log, d_sign: D/Z by (start, length).
    Returns beta_hat as (log |.|, sign), [B, T, T+1, QS] each.
    """
    B, T, _, QS, _ = Gm.shape
    a_log = jnp.full((B, 2 * T + 1, QS), -jnp.inf, Gm.dtype)
    a_sign = jnp.zeros((B, 2 * T + 1, QS), Gm.dtype)

    def step(carry, i):
        a_log, a_sign = carry
        # A_hat[i + L] for L = 0..T; row i itself is still -inf (written below).
        fut_log = lax.dynamic_slice(a_log, (0, i, 0), (B, T + 1, QS))
        fut_sign = lax.dynamic_slice(a_sign, (0, i, 0), (B, T + 1, QS))
        d_l = lax.dynamic_index_in_dim(d_log, i, axis=1, keepdims=False)
        d_s = lax.dynamic_index_in_dim(d_sign, i, axis=1, keepdims=False)
        b_log, b_sign = sc.signed_logaddexp(d_l, d_s, fut_log, fut_sign)  # [B, L, ry]
        log_g = _log_chart_row(Gm, Gs, i)  # [B, L, qx, ry]
        terms = log_g + b_log[:, :, None, :]
        signs = jnp.broadcast_to(b_sign[:, :, None, :], terms.shape)
        ah_log, ah_sign = sc.signed_logsumexp(terms, signs, axis=(1, 3))  # [B, qx]
        a_log = lax.dynamic_update_slice(a_log, ah_log[:, None], (0, i, 0))
        a_sign = lax.dynamic_update_slice(a_sign, ah_sign[:, None], (0, i, 0))
        return (a_log, a_sign), (b_log, b_sign)

    _, (b_log, b_sign) = lax.scan(step, (a_log, a_sign), jnp.arange(T), reverse=True)
    return jnp.moveaxis(b_log, 0, 1), jnp.moveaxis(b_sign, 0, 1)


def _outside(res, b_log, b_sign, num_blocks):
    """The outside pass: adjoints of gamma and gamma', descending span length.

    Step L is the transpose of the forward step L: first the adjoint of
    gamma'[., L+1] flows back onto gamma[., L], which is then final (it also
    gets its direct term A[i] beta_hat[i, L] from the readings); then it is
    pushed onto the operands of the pop sum (gamma[i, l] and
    gamma'[i + l, L - l], the same rectangle the forward read) and of the
    replace term (gamma[i, L - 1]). Gradients of the log weights are
    accumulated per time step as marginals w * dL/dw, computed as
    exp(log |inner| + scales), which are bounded.
    Returns (d push_t [B, T, QS, QS], d repl_t [B, 2T, QS, QS], d pop_t [B, 2T, QS, Q]).
    """
    push_t, repl_t, pop_t, _, Gm, Gs, Pm, Ps, log_a, _, _, _ = res
    B, T, _, QS, _ = Gm.shape
    Q = pop_t.shape[-1]
    S = QS // Q
    dt = Gm.dtype
    a_max = sc.safe(jnp.max(log_a, axis=-1))  # [B, T+1]
    a_exp = jnp.exp(log_a - a_max[..., None])  # [B, T+1, QS]

    Hm = jnp.zeros_like(Gm)
    Hs = jnp.full_like(Gs, -jnp.inf)
    HPm = jnp.zeros_like(Pm)
    HPs = jnp.full_like(Ps, -jnp.inf)
    d_repl = jnp.zeros((B, 2 * T, QS, QS), dt)
    d_pop = jnp.zeros((B, 2 * T, QS, Q), dt)

    def marginal(inner, s_left, s_right, log_w):
        return jnp.sign(inner) * jnp.exp(
            jnp.log(jnp.abs(inner)) + s_left[..., :, None] + s_right[..., None, :] + log_w
        )

    def column(x, L, rows):
        return lax.dynamic_slice(x, (0, 0, L) + (0,) * (x.ndim - 3), (B, rows, 1) + x.shape[3:])[:, :, 0]

    def set_column(x, L, value):
        return lax.dynamic_update_slice(x, value[:, :, None], (0, 0, L) + (0,) * (x.ndim - 3))

    def step(carry, L, rows, splits, first):
        Hm, Hs, HPm, HPs, d_repl, d_pop = carry
        # 1. gamma'[i, L+1] = gamma[i, L] (x) pop at time i + L  (eq. 25, transposed).
        hp_m = lax.dynamic_slice(HPm, (0, L, T - L, 0, 0), (B, rows, 1, QS, Q))[:, :, 0]
        hp_s = lax.dynamic_slice(HPs, (0, L, T - L, 0), (B, rows, 1, Q))[:, :, 0]
        po = lax.dynamic_slice(pop_t, (0, L, 0, 0), (B, rows, QS, Q))
        t1_m, t1_s = sc.contract(hp_m, hp_s, jnp.swapaxes(po, -1, -2))
        g_m, g_s = column(Gm, L, rows), column(Gs, L, rows)
        inner = jnp.einsum("bius,biur->bisr", g_m, hp_m)
        window = lax.dynamic_slice(d_pop, (0, L, 0, 0), (B, rows, QS, Q))
        d_pop = lax.dynamic_update_slice(d_pop, window + marginal(inner, g_s, hp_s, po), (0, L, 0, 0))
        # 2. gamma[., L] is final: accumulated + direct term A[i] beta_hat[i, L] + step 1.
        acc_m, acc_s = column(Hm, L, rows), column(Hs, L, rows)
        bl, bs = column(b_log, L, rows), column(b_sign, L, rows)
        dir_m = a_exp[:, :rows, :, None] * bs[:, :, None, :]
        dir_s = a_max[:, :rows, None] + bl
        f_m, f_s = sc.normalize(*sc.add(*sc.add(acc_m, acc_s, dir_m, dir_s), t1_m, t1_s))
        Hm, Hs = set_column(Hm, L, f_m), set_column(Hs, L, f_s)
        if first:  # L = 1: the pushes; nothing shorter to feed.
            return (Hm, Hs, HPm, HPs, d_repl, d_pop), None
        f_m5 = f_m.reshape(B, rows, QS, Q, S)  # [b, i, qx, r, y]
        f_s2 = f_s.reshape(B, rows, Q, S)  # [b, i, r, y]
        # 3. The pop sum, transposed onto both operands.
        p_m = lax.dynamic_slice(Pm, (0, L - 1, T + 1 - L, 0, 0), (B, rows, splits, QS, Q))
        p_m = p_m.reshape(B, rows, splits, Q, S, Q)  # [b, i, l, u, y, r]
        p_s = lax.dynamic_slice(Ps, (0, L - 1, T + 1 - L, 0), (B, rows, splits, Q))
        # 3a. onto gamma[i, l][q,x -> u,y] += sum_r H[i, L][q,x -> r,y] gamma'[i+l, L-l][u,y -> r].
        e1 = f_s2[:, :, None] + p_s[..., None]  # [b, i, l, r, y]
        m1 = jnp.max(e1, axis=3)  # [b, i, l, y]
        w1 = jnp.exp(e1 - sc.safe(m1)[:, :, :, None, :])
        bp = p_m * jnp.swapaxes(w1, 3, 4)[:, :, :, None]  # [b, i, l, u, y, r]
        c1_m = jnp.einsum("bipry,biluyr->bilpuy", f_m5, bp).reshape(B, rows, splits, QS, QS)
        c1_s = jnp.broadcast_to(m1[:, :, :, None, :], (B, rows, splits, Q, S)).reshape(B, rows, splits, QS)
        h_m, h_s = sc.add(Hm[:, :rows, :splits], Hs[:, :rows, :splits], c1_m, c1_s)
        Hm = lax.dynamic_update_slice(Hm, h_m, (0, 0, 0, 0, 0))
        Hs = lax.dynamic_update_slice(Hs, h_s, (0, 0, 0, 0))
        # 3b. onto gamma'[i+l, L-l][u,y -> r] += sum_{q,x} gamma[i, l][q,x -> u,y] H[i, L][q,x -> r,y].
        ga_m = Gm[:, :rows, :splits].reshape(B, rows, splits, QS, Q, S)
        ga_s = Gs[:, :rows, :splits].reshape(B, rows, splits, Q, S)
        inner2 = jnp.einsum("bilpuy,bipry->biluyr", ga_m, f_m5)
        e2 = ga_s[..., None] + jnp.swapaxes(f_s2, 2, 3)[:, :, None, None]  # [b, i, l, u, y, r]
        m2 = jnp.max(e2, axis=(3, 4))  # [b, i, l, r]
        c2_m = (inner2 * jnp.exp(e2 - sc.safe(m2)[:, :, :, None, None])).reshape(B, rows, splits, QS, Q)
        start = (0, L - 1, T + 1 - L)
        hp_m, hp_s = sc.add(
            lax.dynamic_slice(HPm, start + (0, 0), (B, rows, splits, QS, Q)),
            lax.dynamic_slice(HPs, start + (0,), (B, rows, splits, Q)),
            c2_m,
            m2,
        )
        HPm = lax.dynamic_update_slice(HPm, hp_m, start + (0, 0))
        HPs = lax.dynamic_update_slice(HPs, hp_s, start + (0,))
        # 4. Replace, transposed: gamma[i, L-1][q,x -> s,z] += sum_ry H[i, L][q,x -> r,y] Delta[s,z -> r,y].
        re = lax.dynamic_slice(repl_t, (0, L - 1, 0, 0), (B, rows, QS, QS))
        t4_m, t4_s = sc.contract(f_m, f_s, jnp.swapaxes(re, -1, -2))
        prev_m, prev_s = column(Gm, L - 1, rows), column(Gs, L - 1, rows)
        col_m, col_s = sc.add(column(Hm, L - 1, rows), column(Hs, L - 1, rows), t4_m, t4_s)
        Hm, Hs = set_column(Hm, L - 1, col_m), set_column(Hs, L - 1, col_s)
        inner = jnp.einsum("bips,bipr->bisr", prev_m, f_m)
        window = lax.dynamic_slice(d_repl, (0, L - 1, 0, 0), (B, rows, QS, QS))
        d_repl = lax.dynamic_update_slice(
            d_repl, window + marginal(inner, prev_s, f_s, re), (0, L - 1, 0, 0)
        )
        return (Hm, Hs, HPm, HPs, d_repl, d_pop), None

    carry = (Hm, Hs, HPm, HPs, d_repl, d_pop)
    for L0, L1 in reversed(_blocks(T, num_blocks)):
        rows, splits = _block_sizes(T, L0, L1)
        body = functools.partial(step, rows=rows, splits=splits, first=False)
        carry, _ = lax.scan(body, carry, jnp.arange(L0, L1), reverse=True)
    carry, _ = step(carry, 1, rows=T, splits=1, first=True)
    Hm, Hs, _, _, d_repl, d_pop = carry
    h1_m, h1_s = Hm[:, :, 1], Hs[:, :, 1]
    d_push = jnp.sign(h1_m) * jnp.exp(push_t + sc.to_log(h1_m, h1_s))
    return d_push, d_repl, d_pop


def _backward(num_blocks, res, g):
    push_t, _, _, log_vecs, Gm, Gs, _, _, _, w, log_z, r = res
    B, T = Gs.shape[:2]
    QS = Gs.shape[-1]
    m = log_vecs.shape[-1]
    g_e = jnp.zeros((B, T + 1, QS, m), g.dtype).at[:, 2:].set(g)  # cotangent of R[e]
    vecs = jnp.exp(log_vecs)
    # Readings R[e] = sum_i W[e, i] v_i with W = beta / Z[e].
    d_log_vecs = vecs * jnp.einsum("beiq,beqm->bim", w, g_e)
    c = jnp.sum(g_e * r, axis=(2, 3))  # through Z[e] = sum_{i, ry} beta[i, e, ry]
    d_end = jnp.einsum("beqm,bim->beiq", g_e, vecs) - c[:, :, None, None]
    d_log = jnp.log(jnp.abs(d_end)) - sc.safe(log_z)[:, :, None, None]  # dL/d beta = D / Z
    d_log = _end_to_start(d_log, T, -jnp.inf)
    d_sign = _end_to_start(jnp.sign(d_end), T, 0.0)
    b_log, b_sign = _alpha_adjoints(Gm, Gs, d_log, d_sign)
    d_push_t, d_repl_t, d_pop_t = _outside(res, b_log, b_sign, num_blocks)
    n = T - 1
    return d_push_t[:, 1:T], d_repl_t[:, 1:T], d_pop_t[:, 1:T], d_log_vecs


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _nd_stack(push, repl, pop, log_vecs, num_blocks):
    """push, repl [B, n, QS, QS], pop [B, n, QS, Q], log_vecs [B, n+1, m] -> [B, n, QS, m]."""
    return _forward(push, repl, pop, log_vecs, num_blocks)[0]


def _nd_stack_fwd(push, repl, pop, log_vecs, num_blocks):
    return _forward(push, repl, pop, log_vecs, num_blocks)


_nd_stack.defvjp(_nd_stack_fwd, _backward)
