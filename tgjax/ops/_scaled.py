"""Scaled-real arithmetic for the nondeterministic-stack charts.

A chart cell holds a matrix X[p, q] over a *start* configuration p (the
state and top symbol where a span begins) and an *end* configuration q.
It is stored as a real mantissa `m[..., p, q]` and a log scale `s[..., q]`,
one per end configuration:

    X[p, q] = m[p, q] * exp(s[q]),    max_p |m[p, q]| = 1 (or the column is 0, s = -inf).

Why this split: along q (where a span ends) the weights of a chart cell
can differ by any amount, so every q gets its own scale and is exact; along
p (where it starts) they differ only by what the first transition out of p
weighs, so a mantissa holds them (in float32, entries more than ~87 nats
below their column's maximum underflow; in float64 ~708). Products are real
matrix products of mantissas (BLAS on CPU, the MXU on TPU): an operand is
exponentiated once, when written, and a contraction only exponentiates a
small weight per (summed index, output column) — the "shift one operand
by its max over the summed indices, move the rest onto the other" rule of
DESIGN.md, with the scale of the first operand moved onto the second.

-inf (a zero weight) is allowed anywhere; every shift goes through `_safe`
so that no -inf - -inf (NaN) is ever formed. Mantissas may be signed (the
backward pass stores adjoints this way).
"""

from __future__ import annotations

import jax.numpy as jnp


def safe(x):
    """`x` where finite, else 0: a shift that is harmless when a max is -inf."""
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def contract(m_a, s_a, log_b):
    """sum_j X_A[..., p, j] * exp(log_b[..., j, q]), with X_A = (m_a, s_a) scaled (s_a per j).

    Args:
      m_a: [..., P, J] mantissa of the left operand.
      s_a: [..., J] its scales (one per summed index j).
      log_b: [..., J, Qo] log weights of the right operand (-inf allowed).
    Returns:
      (mantissa [..., P, Qo], scale [..., Qo]), not normalised; |mantissa| <= J * max|m_a|.
    """
    e = s_a[..., :, None] + log_b
    e_max = jnp.max(e, axis=-2)
    w = jnp.exp(e - safe(e_max)[..., None, :])
    return jnp.matmul(m_a, w), e_max


def add(m1, s1, m2, s2):
    """(m1, s1) + (m2, s2) in scaled form (scales per column, broadcast over rows)."""
    s = jnp.maximum(s1, s2)
    shift = safe(s)
    m = m1 * jnp.exp(s1 - shift)[..., None, :] + m2 * jnp.exp(s2 - shift)[..., None, :]
    return m, s


def normalize(m, s):
    """Rescale every column so that max_p |m[p, q]| = 1; all-zero columns get s = -inf."""
    norm = jnp.max(jnp.abs(m), axis=-2)
    nonzero = norm > 0
    norm = jnp.where(nonzero, norm, jnp.ones_like(norm))
    m = m / norm[..., None, :]
    s = jnp.where(nonzero, s + jnp.log(norm), jnp.full_like(s, -jnp.inf))
    return m, s


def from_log(log_x):
    """Scaled form of a log matrix [..., P, Q] (columns normalised)."""
    s = jnp.max(log_x, axis=-2)
    return jnp.exp(log_x - safe(s)[..., None, :]), s


def to_log(m, s):
    """log |X| of a scaled matrix: [..., P, Q] (-inf where the entry is 0)."""
    return jnp.log(jnp.abs(m)) + s[..., None, :]


def signed_logaddexp(l1, g1, l2, g2):
    """(log|a|, sign a) + (log|b|, sign b) -> (log|a+b|, sign(a+b))."""
    mx = jnp.maximum(l1, l2)
    shift = safe(mx)
    v = g1 * jnp.exp(l1 - shift) + g2 * jnp.exp(l2 - shift)
    return shift + jnp.log(jnp.abs(v)), jnp.sign(v)


def signed_logsumexp(log_abs, sign, axis):
    """(log|sum x|, sign(sum x)) over `axis` for x = sign * exp(log_abs)."""
    mx = jnp.max(log_abs, axis=axis, keepdims=True)
    shift = safe(mx)
    v = jnp.sum(sign * jnp.exp(log_abs - shift), axis=axis, keepdims=True)
    out = shift + jnp.log(jnp.abs(v))
    return jnp.squeeze(out, axis), jnp.squeeze(jnp.sign(v), axis)
