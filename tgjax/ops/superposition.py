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
    past the bottom (eqs. 6-8). A `lax.scan` over time whose carry is one
    zero-padded stack of n elements, so a forward pass holds O(n m) per
    sequence; reverse-mode AD stores the stack at every step, O(n^2 m), as
    in the paper's Table 4. Shape errors are raised at trace time; NaN
    inputs are rejected when the inputs are concrete (not under `jit`).
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

    stack0 = jnp.zeros((B, n, m), dtype)
    _, readings = lax.scan(step, stack0, (jnp.swapaxes(actions, 0, 1), jnp.swapaxes(pushed, 0, 1)))
    return jnp.swapaxes(readings, 0, 1)
