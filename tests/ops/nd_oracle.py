"""Slow oracles for the stack kernels, written straight from the paper's equations.

DuSell & Chiang, "Stack Attention" (ICLR 2024):

* `superposition_oracle`: eqs. (5)-(8), one Python list of stack elements per
  time step, the stack starting as V_0 = [0].
* `nondeterministic_oracle`: Appendix B, eqs. (21)-(29), with the paper's
  indices (-1 <= i < t <= n), the chart kept in dictionaries keyed by
  (i, t), gamma' rebuilt for every t, zeta (the vector inner weights)
  computed as in eq. (26), everything in log space, t-ordered. It runs on
  NumPy (`xp=np`: values, no compilation) or on jax.numpy (`xp=jnp`, the
  default), so that `jax.grad` through it gives the reference gradients.
* `brute_force_readings`: eq. (12) itself — every run of the vector PDA
  enumerated (NumPy, float64), for a handful of time steps. It checks the
  oracle, not the kernel.

These are references for the tests and the benchmark: one Python-level
operation per (i, t) (the sum over the split k of eq. 24 is one logsumexp
over the stacked terms), O(n^3) work with an m-sized zeta, and a jitted
version compiles in tens of seconds; they should not be used elsewhere.
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import jax.scipy.special
import numpy as np
import scipy.special

# log 0 inside the oracle: finite, so that jax.grad through its logsumexps has
# no NaN (exp(-1e5) is exactly 0 in float64, so values are unchanged). Inputs
# that hold -inf are clipped to it in `nondeterministic_oracle`.
LOG_ZERO = -1e5


def superposition_oracle(actions, pushed, xp=jnp):
    """Eqs. (5)-(8): `actions` [B, n, 3] (push, pop, no-op), `pushed` [B, n, m] -> [B, n, m].

    The stack is a Python list of elements, top first, of length t at step t.
    """
    n = pushed.shape[1]
    zero = xp.zeros_like(pushed[:, 0])
    stack = [zero]  # V_0 = [0]
    readings = []
    for t in range(1, n + 1):
        a_push, a_pop, a_noop = (actions[:, t - 1, j][:, None] for j in range(3))
        v_t = pushed[:, t - 1]
        new = []
        for i in range(1, t + 1):
            above = v_t if i == 1 else stack[i - 2]  # eq. (6): V_{t-1}[i-1]
            at = stack[i - 1] if i < t else zero  # eq. (7)
            below = stack[i] if i < t - 1 else zero  # eq. (8)
            new.append(a_push * above + a_noop * at + a_pop * below)  # eq. (5)
        stack = new
        readings.append(stack[0])  # r_t = V_t[1]
    return xp.stack(readings, axis=1)


def nondeterministic_oracle(push, repl, pop, pushed, bottom, xp=jnp):
    """Appendix B, eqs. (21)-(29), in log space, t-ordered.

    Shapes as `tgjax.ops.nondeterministic_stack`: `push`, `repl`
    [B, n, Q, S, Q, S], `pop` [B, n, Q, S, Q], `pushed` [B, n, m], `bottom`
    [m] or [B, m] (all logs). Returns r_1..r_n, [B, n, Q, S, m], real space.
    Delta_t of the paper is (push, repl, pop)[:, t - 1].
    """
    logsumexp = scipy.special.logsumexp if xp is np else jax.scipy.special.logsumexp

    def _lse(terms):
        return logsumexp(xp.stack(terms), axis=0)

    B, n, Q, S = push.shape[:4]
    m = pushed.shape[-1]
    push, repl, pop, pushed, bottom = (
        xp.maximum(xp.asarray(x), LOG_ZERO) for x in (push, repl, pop, pushed, bottom)
    )
    bottom = xp.broadcast_to(bottom, (B, m))

    # Eqs. (21)-(23): the bottom span [-1 -> 0] and alpha[-1], with q0 = 0, ⊥ = 0.
    first = np.zeros((Q, S), bool)
    first[0, 0] = True  # (q0, ⊥)
    indicator = xp.where(xp.asarray(first[:, :, None, None] & first), 0.0, LOG_ZERO) + 0 * push[:, 0]
    gamma = {(-1, 0): indicator}  # gamma[(i, t)][b, q, x, r, y]
    zeta = {(-1, 0): indicator[..., None] + bottom[:, None, None, None, None, :]}
    alpha = {-1: xp.where(xp.asarray(first), 0.0, LOG_ZERO) + 0 * push[:, 0, :, :, 0, 0]}

    def alpha_at(t):  # eq. (27)
        terms = [
            logsumexp(alpha[i][:, :, :, None, None] + gamma[(i, t)], axis=(1, 2))
            for i in range(-1, t)
        ]
        return _lse(terms)

    alpha[0] = alpha_at(0)
    readings = []
    for t in range(1, n + 1):
        push_t, repl_t, pop_t = push[:, t - 1], repl[:, t - 1], pop[:, t - 1]
        v_t = pushed[:, t - 1]
        # Eq. (25): gamma'[k -> t][u, y -> r] for 0 <= k <= t - 2, summing over (s, z);
        # stacked over k, as [k, b, u, r, y].
        gamma_p = [
            xp.swapaxes(
                logsumexp(
                    gamma[(k, t - 1)][:, :, :, :, :, None] + pop_t[:, None, None, :, :, :],
                    axis=(3, 4),
                ),
                2,
                3,
            )
            for k in range(0, t - 1)
        ]
        for i in range(-1, t):
            g_terms, z_terms = [], []
            if i == t - 1:  # push
                g_terms.append(push_t)
                z_terms.append(push_t[..., None] + v_t[:, None, None, None, None, :])
            if i <= t - 2:  # replace: sum over (s, z) of gamma[i -> t-1][q,x -> s,z] Delta[s,z -> r,y]
                g_terms.append(
                    logsumexp(
                        gamma[(i, t - 1)][:, :, :, :, :, None, None]
                        + repl_t[:, None, None, :, :, :, :],
                        axis=(3, 4),
                    )
                )
                z_terms.append(
                    logsumexp(
                        zeta[(i, t - 1)][:, :, :, :, :, None, None, :]
                        + repl_t[:, None, None, :, :, :, :, None],
                        axis=(3, 4),
                    )
                )
            ks = range(i + 1, t - 1)
            if len(ks):  # pop: sum over k and u of gamma[i -> k][q,x -> u,y] gamma'[k -> t][u,y -> r]
                g_ik = xp.stack([gamma[(i, k)] for k in ks])  # [k, b, q, x, u, y]
                z_ik = xp.stack([zeta[(i, k)] for k in ks])  # [k, b, q, x, u, y, m]
                gp = xp.stack([gamma_p[k] for k in ks])[:, :, None, None]  # [k, b, 1, 1, u, r, y]
                g_terms.append(logsumexp(g_ik[:, :, :, :, :, None, :] + gp, axis=(0, 4)))
                z_terms.append(
                    logsumexp(z_ik[:, :, :, :, :, None, :, :] + gp[..., None], axis=(0, 4))
                )
            gamma[(i, t)] = _lse(g_terms)  # eq. (24)
            zeta[(i, t)] = _lse(z_terms)  # eq. (26)
        alpha[t] = alpha_at(t)
        # Eq. (28): eta_t[r, y] = sum over i, q, x of alpha[i][q, x] zeta[i -> t][q, x -> r, y].
        eta = _lse(
            [
                logsumexp(alpha[i][:, :, :, None, None, None] + zeta[(i, t)], axis=(1, 2))
                for i in range(-1, t)
            ]
        )
        norm = logsumexp(alpha[t], axis=(1, 2))  # eq. (29)
        readings.append(xp.exp(eta - norm[:, None, None, None]))
    return xp.stack(readings, axis=1)


def brute_force_readings(push, repl, pop, pushed, bottom):
    """Eq. (12) by enumerating every run of the vector PDA (one sequence, NumPy).

    `push`, `repl` [n, Q, S, Q, S], `pop` [n, Q, S, Q], `pushed` [n, m],
    `bottom` [m] (logs). A run is a list of (symbol, vector index) pairs and a
    state; the bottom element (⊥, v_0) can never be popped (a run that would
    pop it has no top symbol and ends). Returns [n, Q, S, m]. Branching is
    2|Q||Γ| + |Q| per step, so keep n * log(branching) small.
    """
    n, Q, S = push.shape[:3]
    vecs = np.exp(np.concatenate([np.asarray(bottom)[None], np.asarray(pushed)], axis=0))
    runs = [(1.0, 0, ((0, 0),))]  # (weight, state, stack of (symbol, vector index))
    out = []
    for t in range(1, n + 1):
        new_runs = []
        for weight, q, stack in runs:
            x, vec = stack[-1]
            for r, y in itertools.product(range(Q), range(S)):
                w_push = np.exp(push[t - 1, q, x, r, y])
                if w_push > 0:
                    new_runs.append((weight * w_push, r, stack + ((y, t),)))
                w_repl = np.exp(repl[t - 1, q, x, r, y])
                if w_repl > 0:
                    new_runs.append((weight * w_repl, r, stack[:-1] + ((y, vec),)))
            if len(stack) > 1:
                for r in range(Q):
                    w_pop = np.exp(pop[t - 1, q, x, r])
                    if w_pop > 0:
                        new_runs.append((weight * w_pop, r, stack[:-1]))
        runs = new_runs
        num = np.zeros((Q, S, vecs.shape[1]))
        total = 0.0
        for weight, r, stack in runs:
            y, vec = stack[-1]
            num[r, y] += weight * vecs[vec]
            total += weight
        out.append(num / total)
    return np.stack(out)
