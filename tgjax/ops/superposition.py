"""The superposition stack of Joulin & Mikolov (2015), eqs. (5)-(8) of DuSell & Chiang (2024)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["superposition_stack"]


def superposition_stack(actions, pushed):
    """Readings of the superposition stack.

    Args:
      actions: [B, n, 3] action probabilities in the order (push, pop, no-op).
      pushed: [B, n, m] the pushed vectors v_1..v_n.

    Returns:
      readings [B, n, m]: readings[b, t] is the top of the stack after the
      action at t (the paper's r_{t+1} = V_{t+1}[1]); the stack starts empty
      (all zeros, V_0 = [0]).

    Each step is eq. (5): every element becomes push * (the element above;
    v_t on top) + no-op * (itself) + pop * (the element below), with zeros
    past the bottom (eqs. 6-8). A `lax.scan` over time, cut into a few
    static blocks, whose carry is one zero-padded stack trimmed to the
    elements that still matter: before step t, min(t, n - t + 2) of them
    (deeper ones are zero, or too deep to reach the top by step n), about
    half of n on average. A forward pass holds O(n m) per sequence;
    reverse-mode AD stores the stack at every step, O(n^2 m) (halved by the
    trimming), as in the paper's Table 4. Shape errors are raised at trace
    time; NaN inputs are rejected when the inputs are concrete (not under
    `jit`).
    """
    actions = jnp.asarray(actions)
    pushed = jnp.asarray(pushed)
    dtype = jnp.result_type(float, actions, pushed)
    actions, pushed = actions.astype(dtype), pushed.astype(dtype)
    if actions.ndim != 3 or actions.shape[-1] != 3:
        raise ValueError(f"actions must be [B, n, 3] (push, pop, no-op), got shape {actions.shape}")
    if pushed.ndim != 3 or pushed.shape[:2] != actions.shape[:2]:
        raise ValueError(
            f"pushed must be [B, n, m] with actions' [B, n] = {actions.shape[:2]}, got {pushed.shape}"
        )
    B, n, m = pushed.shape
    if n < 1:
        raise ValueError(f"superposition_stack needs n >= 1, got actions of shape {actions.shape}")
    for name, x in (("actions", actions), ("pushed", pushed)):
        if not isinstance(x, jax.core.Tracer) and bool(jnp.isnan(x).any()):
            where = tuple(int(k) for k in np.argwhere(np.asarray(jnp.isnan(x)))[0])
            raise ValueError(f"{name} contains NaN (first at index {where})")

    def step(stack, inputs):
        a, v = inputs  # a [B, 3], v [B, m]
        a_push, a_pop, a_noop = a[:, 0, None, None], a[:, 1, None, None], a[:, 2, None, None]
        above = jnp.concatenate([v[:, None], stack[:, :-1]], axis=1)  # eq. (6)
        below = jnp.concatenate([stack[:, 1:], jnp.zeros_like(stack[:, :1])], axis=1)  # eq. (8)
        # eq. (7): AT is the stack itself (the zero padding covers i = t).
        stack = a_push * above + a_noop * stack + a_pop * below  # eq. (5)
        return stack, stack[:, 0]

    actions_t, pushed_t = jnp.swapaxes(actions, 0, 1), jnp.swapaxes(pushed, 0, 1)
    stack = jnp.zeros((B, 1, m), dtype)  # V_0 = [0]
    readings = []
    for t0, t1 in _step_blocks(n):
        height = _height(n, t0, t1)
        if stack.shape[1] < height:  # deeper elements are still zero
            stack = jnp.pad(stack, ((0, 0), (0, height - stack.shape[1]), (0, 0)))
        stack = stack[:, :height]  # deeper elements can no longer reach the top by step n
        stack, r = lax.scan(step, stack, (actions_t[t0 - 1 : t1], pushed_t[t0 - 1 : t1]))
        readings.append(r)
    return jnp.swapaxes(jnp.concatenate(readings, axis=0), 0, 1)


def _step_blocks(n: int, num_blocks: int = 8):
    """Static blocks [t0, t1] (1-based, inclusive) of the time steps 1..n, of near-equal length."""
    k = max(1, min(num_blocks, n))
    edges = [1 + (n * j) // k for j in range(k + 1)]
    return [(a, b - 1) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _height(n: int, t0: int, t1: int) -> int:
    """Stack elements a scan over steps t0..t1 must carry: max over t of min(t, n - t + 2).

    Before step t the stack holds t - 1 elements (deeper ones are zero), and
    the element at depth d (0 = top) can reach the top by step n only if
    d <= n - t + 1 (one pop per step); step t reads one element below each.
    Trimming to this height is exact and carries about half the n slots.
    """
    return max(1, min(n, max(min(t, n - t + 2) for t in range(t0, t1 + 1))))
