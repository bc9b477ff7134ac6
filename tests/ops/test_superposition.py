"""tgjax.ops.superposition_stack against eqs. (5)-(8) of DuSell & Chiang (2024), written out."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.ops.nd_oracle import superposition_oracle
from tgjax.ops import superposition_stack

stack = jax.jit(superposition_stack)


def random_inputs(rng, B, n, m):
    logits = rng.normal(size=(B, n, 3)) * 2
    actions = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # (push, pop, no-op)
    return actions, rng.normal(size=(B, n, m))


def gradients(f, weights):
    """jit(the gradients of sum(f(actions, pushed) * weights) in both arguments)."""
    return jax.jit(jax.grad(lambda a, v: jnp.sum(f(a, v) * weights), argnums=(0, 1)))


def oracle_gradients(actions, pushed, weights):
    """The gradients of sum(oracle * weights), exactly, from two batched calls of the NumPy oracle.

    Eqs. (5)-(8) are linear in the pushed vectors (the stack starts at 0), and affine in each step's actions (V_t
    is an a_t-weighted sum of V_{t-1} and v_t; later pushes add terms without a_t). So d/dv[j, c] is the loss with
    pushed = the basis vector e_(j, c), and d/da[t, k] the loss with a_t = e_k less the loss with a_t = 0: one
    row of a batch each.
    """
    B, n, m = pushed.shape
    basis_a = np.broadcast_to(actions, (n, 4) + actions.shape).copy()  # [t, k, B, n, 3]
    basis_a[np.arange(n), :, :, np.arange(n)] = np.eye(4, 3)[:, None, :]  # a_t = e_k, and a_t = 0 at k = 3
    readings = superposition_oracle(basis_a.reshape(-1, n, 3), np.broadcast_to(pushed, (n * 4,) + pushed.shape)
                                    .reshape(-1, n, m), xp=np).reshape(n, 4, B, n, m)
    losses = np.einsum("tkbsc,bsc->btk", readings, weights)
    grad_a = losses[..., :3] - losses[..., 3:]
    basis_v = np.zeros((n, m, B, n, m))
    basis_v[np.arange(n)[:, None], np.arange(m), :, np.arange(n)[:, None], np.arange(m)] = 1.0  # v = e_(j, c)
    readings = superposition_oracle(np.broadcast_to(actions, (n * m,) + actions.shape).reshape(-1, n, 3),
                                    basis_v.reshape(-1, n, m), xp=np).reshape(n, m, B, n, m)
    grad_v = np.einsum("jcbsd,bsd->bjc", readings, weights)
    return grad_a, grad_v


@pytest.mark.parametrize("n, m", [(1, 1), (2, 3), (5, 2), (9, 4), (16, 3)])
def test_matches_equations_5_to_8(n, m):
    rng = np.random.default_rng(n)
    with jax.enable_x64(True):
        actions, pushed = random_inputs(rng, 3, n, m)
        got = np.asarray(stack(actions, pushed))
    assert got.shape == (3, n, m)
    np.testing.assert_allclose(got, superposition_oracle(actions, pushed, xp=np), rtol=1e-12, atol=1e-13)


def test_hard_actions_behave_like_a_stack():
    """One-hot actions: push v1, push v2, no-op, pop, pop, pop (empty), push v7."""
    push, pop, noop = [1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]
    actions = np.array([[push, push, noop, pop, pop, pop, push]])
    pushed = np.arange(1.0, 8.0)[None, :, None] * np.array([1.0, -1.0])  # v_t = (t, -t)
    readings = np.asarray(stack(actions, pushed))[0, :, 0]
    np.testing.assert_array_equal(readings, [1, 2, 2, 1, 0, 0, 7])


def test_gradients_match_oracle_autodiff():
    """The kernel's gradients are the oracle's (jax.grad through it), which are `oracle_gradients`'."""
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        actions, pushed = random_inputs(rng, 2, 6, 3)
        weights = rng.normal(size=(2, 6, 3))
        got = gradients(superposition_stack, weights)(actions, pushed)
        want = gradients(superposition_oracle, weights)(actions, pushed)
    for g, w, exact in zip(got, want, oracle_gradients(actions, pushed, weights)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(exact, w, rtol=1e-12, atol=1e-13)


def test_float32():
    rng = np.random.default_rng(2)
    actions, pushed = random_inputs(rng, 2, 12, 4)
    got = stack(actions.astype(np.float32), pushed.astype(np.float32))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, superposition_oracle(actions, pushed, xp=np), atol=1e-5)


def _forward_temp_bytes(n, m=32, B=8):
    args = (jax.ShapeDtypeStruct((B, n, 3), jnp.float32), jax.ShapeDtypeStruct((B, n, m), jnp.float32))
    return jax.jit(superposition_stack).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_forward_memory_is_linear_in_n():
    """Forward only, the scan carries one stack of n elements: O(n m) scratch, not O(n^2 m)."""
    small, large = _forward_temp_bytes(128), _forward_temp_bytes(512)
    assert large <= 4.5 * small, (small, large)  # linear: x4 for n x4 (quadratic would be x16)


@pytest.mark.parametrize(
    "actions_shape, pushed_shape, message",
    [
        ((2, 5, 2), (2, 5, 3), "actions must be"),
        ((2, 5), (2, 5, 3), "actions must be"),
        ((2, 5, 3), (2, 4, 3), "pushed must be"),
        ((2, 5, 3), (2, 5), "pushed must be"),
        ((2, 0, 3), (2, 0, 3), "n >= 1"),
    ],
)
def test_shape_errors(actions_shape, pushed_shape, message):
    with pytest.raises(ValueError, match=message):
        superposition_stack(np.zeros(actions_shape), np.zeros(pushed_shape))
    with pytest.raises(ValueError, match=message):
        jax.jit(superposition_stack).lower(np.zeros(actions_shape), np.zeros(pushed_shape))


def test_nan_is_rejected_eagerly():
    actions, pushed = random_inputs(np.random.default_rng(0), 1, 3, 2)
    pushed[0, 1, 1] = np.nan
    with pytest.raises(ValueError, match=r"pushed contains NaN \(first at index \(0, 1, 1\)\)"):
        superposition_stack(actions, pushed)
    actions[0, 2, 0] = np.nan
    with pytest.raises(ValueError, match="actions contains NaN"):
        superposition_stack(actions, pushed)


def test_trimmed_height_is_exact_over_blocks():
    """n = 40 over 8 blocks whose carried height shrinks to min(t, n - t + 2): still eqs. (5)-(8).

    Pushes dominate early (deep stacks) and pops late, so elements deeper
    than the trimmed height exist and the readings depend on the deep ones
    that do come back up.
    """
    from tgjax.ops.superposition import _height, _step_blocks

    n, m = 40, 3
    blocks = _step_blocks(n)
    assert len(blocks) == 8 and max(_height(n, a, b) for a, b in blocks) < n
    rng = np.random.default_rng(40)
    logits = rng.normal(size=(2, n, 3))
    logits[:, : n // 2, 0] += 3.0  # push
    logits[:, n // 2 :, 1] += 3.0  # pop
    actions = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    pushed = rng.normal(size=(2, n, m))
    weights = rng.normal(size=(2, n, m))
    with jax.enable_x64(True):
        got = np.asarray(stack(actions, pushed))
        got_grads = gradients(superposition_stack, weights)(actions, pushed)
    np.testing.assert_allclose(got, superposition_oracle(actions, pushed, xp=np), rtol=1e-12, atol=1e-13)
    # The oracle's gradients from NumPy (its jax.grad, op by op at n = 40, took seconds; checked against
    # `oracle_gradients` at n = 6 by test_gradients_match_oracle_autodiff).
    for g, w in zip(got_grads, oracle_gradients(actions, pushed, weights)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
