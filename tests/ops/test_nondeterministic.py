"""tgjax.ops.nondeterministic_stack against the slow oracle of tests/ops/nd_oracle.py.

The oracle is Appendix B of DuSell & Chiang (2024) written out t-ordered
(eqs. 21-29, zeta included); it is itself checked against eq. (12) by
enumerating every run of the vector PDA. Values are compared on NumPy (no
compilation), gradients through `jax.grad` of the oracle at a few small
shapes that stay fixed so the compiled functions are reused. float64 runs
inside `jax.enable_x64(True)`, so the rest of the test session is unaffected.

Compilation is most of this file's time, so the tests that need the kernel's
readings and gradients share `kernel_and_grads` (one cached, jitted function per
configuration) and, where they can, a few shapes: `_PROP_SHAPE` and
`SHARED_SHAPE` are each compiled once for all the tests that use them.
"""

from __future__ import annotations

import contextlib
import functools
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ops.nd_oracle import brute_force_readings, nondeterministic_oracle
from tgjax.ops import nondeterministic_stack, superposition_stack

stack = jax.jit(nondeterministic_stack, static_argnames="num_blocks")
superposition = jax.jit(superposition_stack)
ARGNUMS = (0, 1, 2, 3, 4)


def _readings_and_grads(fn, patches=contextlib.nullcontext):
    """jit((weights, push, repl, pop, pushed, bottom) -> (readings, the gradients of sum(readings * weights))).

    `patches()` is entered while the function is traced, the backward pass (a custom VJP, traced when the
    gradients are taken) included.
    """

    def readings_and_grads(weights, *args):
        with patches():
            readings, vjp = jax.vjp(fn, *args)
            return readings, vjp(weights.astype(readings.dtype))

    return jax.jit(readings_and_grads)


def kernel_and_grads(num_blocks=None, *, fold=False, chunk_terms=None):
    """The kernel's readings and gradients (`_readings_and_grads`), one cached function per configuration, so
    that tests using one configuration at one shape share one compiled program (`kernel_and_grads(3)` and
    `kernel_and_grads(3, fold=False)` included: the cache is keyed on the configuration, not on how it is spelt).

    `fold`: the chart folded at every size (by default only from T = 129 on), so that small cases test it;
    `chunk_terms`: the pop sum's chunk budget. Both are set while the function is traced (the kernel reads
    them at trace time), never by monkeypatching around a call, which a cached program would not see.
    """
    return _kernel_and_grads(num_blocks, fold, chunk_terms)


@functools.cache
def _kernel_and_grads(num_blocks, fold, chunk_terms):
    import tgjax.ops.nondeterministic as nd

    @contextlib.contextmanager
    def patches():
        with contextlib.ExitStack() as stack:
            if fold:
                stack.enter_context(mock.patch.object(nd, "_FOLD_FROM_T", 1))
            if chunk_terms is not None:
                stack.enter_context(mock.patch.object(nd, "_POP_CHUNK_TERMS", chunk_terms))
            yield

    return _readings_and_grads(functools.partial(nondeterministic_stack, num_blocks=num_blocks), patches)


@functools.cache
def oracle_and_grads():
    """The oracle's readings and gradients through `jax.grad` (jitted: tens of ops per chart cell)."""
    return _readings_and_grads(nondeterministic_oracle)


def loss_value(readings, weights):
    """sum(readings * weights), the scalar whose gradients `kernel_and_grads` returns, in the readings' dtype."""
    readings = np.asarray(readings)
    return np.sum(readings * weights.astype(readings.dtype))


def random_inputs(rng, B, n, Q, S, m, *, scale=1.0, p_neg_inf=0.0, dtype=np.float64):
    """Random log weights (normal * scale, some -inf) and log vectors, as NumPy arrays.

    Staying in (q0, ⊥) by a replace keeps a finite weight, so some run always survives.
    """

    def weights(shape):
        w = rng.normal(size=shape) * scale
        w[rng.random(shape) < p_neg_inf] = -np.inf
        return w

    push, repl, pop = weights((B, n, Q, S, Q, S)), weights((B, n, Q, S, Q, S)), weights((B, n, Q, S, Q))
    repl[:, :, 0, 0, 0, 0] = rng.normal(size=(B, n)) * scale
    pushed = rng.normal(size=(B, n, m))
    bottom = rng.normal(size=(m,))
    return tuple(x.astype(dtype) for x in (push, repl, pop, pushed, bottom))


def loss_fn(fn, weights):
    """A scalar that mixes every reading: sum(readings * weights)."""
    return lambda *args: jnp.sum(fn(*args) * weights)


def assert_grads_close(got, want, rtol, atol):
    for name, g, w in zip(("push", "repl", "pop", "pushed", "bottom"), got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol, err_msg=name)


# --------------------------------------------------------------------------- the oracle itself


@pytest.mark.parametrize("n, Q, S, m, p_neg_inf", [(3, 2, 2, 2, 0.0), (4, 1, 2, 3, 0.0), (3, 2, 2, 1, 0.4)])
def test_oracle_matches_run_enumeration(n, Q, S, m, p_neg_inf):
    """Eqs. (21)-(29) (the oracle) equal eq. (12): every run of the vector PDA, enumerated."""
    rng = np.random.default_rng(n * 10 + Q)
    push, repl, pop, pushed, bottom = random_inputs(rng, 1, n, Q, S, m, p_neg_inf=p_neg_inf)
    want = brute_force_readings(push[0], repl[0], pop[0], pushed[0], bottom)
    got = nondeterministic_oracle(push, repl, pop, pushed, bottom, xp=np)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- values


SHAPES = [(1, 1, 1), (2, 1, 2), (1, 2, 3), (3, 2, 2), (2, 3, 1), (3, 3, 2)]


# n = 1..6 (every shape of SHAPES once) in CI; n = 7..12 (each shape again, longer) with -m slow.
@pytest.mark.parametrize("n", [n if n <= 6 else pytest.param(n, marks=pytest.mark.slow) for n in range(1, 13)])
def test_readings_match_oracle_float64(n):
    Q, S, m = SHAPES[n % len(SHAPES)]
    rng = np.random.default_rng(n)
    with jax.enable_x64(True):
        args = random_inputs(rng, 2, n, Q, S, m, scale=2.0)
        got = np.asarray(stack(*args))
    want = nondeterministic_oracle(*args, xp=np)
    assert got.shape == (2, n, Q, S, m)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


_PROP_SHAPE = (2, 4, 3, 2, 3)  # B, n, Q, S, m: fixed so that the compiled functions are reused
# B, n, Q, S, m of the tests of num_blocks, row chunks, the folded chart and float32: one shape, shared programs.
SHARED_SHAPE = (2, 21, 2, 3, 2)


def test_shared_and_per_sequence_bottom():
    """bottom [m] is the same as bottom broadcast to [B, m]; its gradient sums over the batch."""
    B, n, Q, S, m = _PROP_SHAPE
    rng = np.random.default_rng(7)
    with jax.enable_x64(True):
        push, repl, pop, pushed, bottom = random_inputs(rng, B, n, Q, S, m)
        per_seq = np.broadcast_to(bottom, (B, m)).copy()
        weights = rng.normal(size=(B, n, Q, S, m))
        r_shared, g_shared = kernel_and_grads()(weights, push, repl, pop, pushed, bottom)
        r_per_seq, g_per_seq = kernel_and_grads()(weights, push, repl, pop, pushed, per_seq)
    np.testing.assert_allclose(r_shared, r_per_seq)
    np.testing.assert_allclose(g_shared[4], np.asarray(g_per_seq[4]).sum(0), rtol=1e-12)


# One block against three in CI (the three-block program is shared with the float32, folded-chart and oracle
# (test_several_blocks_match_oracle, which checks five blocks too) tests); with seven too with -m slow (each count
# is a program of its own).
@pytest.mark.parametrize("counts", [(1, 3), pytest.param((1, 3, 7), marks=pytest.mark.slow)])
def test_num_blocks_changes_nothing(counts):
    rng = np.random.default_rng(11)
    with jax.enable_x64(True):
        args = random_inputs(rng, *SHARED_SHAPE, scale=3.0, p_neg_inf=0.2)
        weights = rng.normal(size=SHARED_SHAPE)
        results = [kernel_and_grads(k)(weights, *args) for k in counts]
    for readings, grads in results[1:]:
        np.testing.assert_allclose(loss_value(readings, weights), loss_value(results[0][0], weights), rtol=1e-12)
        assert_grads_close(grads, results[0][1], rtol=1e-10, atol=1e-12)


def _fold_always(monkeypatch):
    """Fold the chart at every size (by default only from T = 129 on), so that small cases test it."""
    import tgjax.ops.nondeterministic as nd

    monkeypatch.setattr(nd, "_FOLD_FROM_T", 1)


@pytest.mark.parametrize("shape, num_blocks, folded", [(SHARED_SHAPE, 3, False), ((2, 14, 2, 2, 2), 5, True)])
def test_several_blocks_match_oracle(shape, num_blocks, folded, monkeypatch):
    """n = 21 (`SHARED_SHAPE`: the three-block program of the tests above, compiled once for all) cut into 3
    blocks, or n = 14 into 5: values, and a directional derivative, against the oracle.

    The gradient is checked against central differences of the NumPy oracle
    (no compilation of the oracle at this size). `folded`: the chart in its
    folded layout (lengths past T/2 in the short lengths' rows; a sixth block
    starts at the fold; T = 15 odd, where the folded chart of
    test_folded_chart_equals_the_square_one has T even).
    """
    from tgjax.ops.nondeterministic import _blocks

    B, n, Q, S, m = shape
    if folded:
        _fold_always(monkeypatch)  # for the count of blocks below; the kernel folds its chart itself
        assert len(_blocks(n + 1, num_blocks)) == 6

    assert len(_blocks(n + 1, num_blocks)) >= 3
    rng = np.random.default_rng(n)
    with jax.enable_x64(True):
        args = random_inputs(rng, B, n, Q, S, m, scale=2.0, p_neg_inf=0.1)
        weights = rng.normal(size=(B, n, Q, S, m))
        got, grads = kernel_and_grads(num_blocks, fold=folded)(weights, *args)
        got = np.asarray(got)
    np.testing.assert_allclose(got, nondeterministic_oracle(*args, xp=np), rtol=1e-10, atol=1e-10)
    # d/de loss(args + e * direction) at e = 0; -inf entries stay -inf (no direction there).
    direction = [np.where(np.isfinite(x), rng.normal(size=x.shape), 0.0) for x in args]
    eps = 1e-5

    def oracle_loss(e):
        moved = [x + e * d for x, d in zip(args, direction)]
        return float(np.sum(nondeterministic_oracle(*moved, xp=np) * weights))

    want = (oracle_loss(eps) - oracle_loss(-eps)) / (2 * eps)
    have = sum(float(np.sum(np.asarray(g) * d)) for g, d in zip(grads, direction))
    np.testing.assert_allclose(have, want, rtol=1e-6)


# The folded chart in CI: its blocks below the fold read and write the chart as the square chart's blocks do,
# and those above read a second box (`_left_box`), so it runs every chunked path; the square chart with -m slow.
@pytest.mark.parametrize("folded", [pytest.param(False, marks=pytest.mark.slow), True])
def test_row_chunks_change_nothing(monkeypatch, folded):
    """The pop sum worked through span starts in chunks (forward and backward) equals one chunk.

    A small chunk budget makes every block loop over several chunks, and
    some blocks' rows are not a multiple of the chunk size, so their last
    chunk overlaps its neighbour (which the backward must count once).
    """
    import tgjax.ops.nondeterministic as nd

    B, n, Q, S, m = SHARED_SHAPE
    num_blocks = 3
    budget = 4 * B * Q * S * S * Q * Q * 8  # ~4 rows at 8 splits
    rng = np.random.default_rng(7)
    with jax.enable_x64(True):
        args = random_inputs(rng, B, n, Q, S, m, scale=2.0, p_neg_inf=0.1)
        weights = rng.normal(size=(B, n, Q, S, m))
        whole = kernel_and_grads(num_blocks, fold=folded)(weights, *args)
        chunked = kernel_and_grads(num_blocks, fold=folded, chunk_terms=budget)(weights, *args)
    # The chunks the kernel was traced with, recomputed (the kernels above set fold and budget themselves).
    if folded:
        _fold_always(monkeypatch)
    monkeypatch.setattr(nd, "_POP_CHUNK_TERMS", budget)
    chunkings = []
    for L0, L1 in nd._blocks(n + 1, num_blocks):
        rows, splits = nd._block_sizes(n + 1, L0, L1)
        chunkings.append((rows,) + nd._row_chunks(rows, B * Q * S * S * Q * Q * splits))
    assert all(count > 1 for _, _, count in chunkings), chunkings
    assert any(size * count > rows for rows, size, count in chunkings), chunkings  # an overlap
    np.testing.assert_allclose(loss_value(chunked[0], weights), loss_value(whole[0], weights), rtol=1e-12)
    assert_grads_close(chunked[1], whole[1], rtol=1e-10, atol=1e-12)


def test_row_chunks_cover_every_row_within_budget():
    from tgjax.ops.nondeterministic import _POP_CHUNK_TERMS, _row_chunks

    for rows, per_row in [(1, 10), (7, 10), (150, 2**16), (257, 3**5 * 8 * 100), (5, 2 * _POP_CHUNK_TERMS)]:
        size, count = _row_chunks(rows, per_row)
        starts = [min(c * size, rows - size) for c in range(count)]
        covered = set().union(*(range(a, a + size) for a in starts))
        assert covered == set(range(rows)) and 1 <= size <= rows, (rows, per_row, size, count)
        assert size * per_row <= _POP_CHUNK_TERMS or size == 1, (rows, per_row, size)
        assert (count - 1) * size < rows, (rows, size, count)  # no chunk is wholly redundant


# --------------------------------------------------------------------------- gradients


# (n, Q, S, m). Each shape compiles the oracle's gradient (seconds): in CI, the property test's shape (Q > S,
# m > S; compiled once for both tests) and a short one with Q = 1 < S; Q = S = m and a longer Q = 1 with -m slow.
GRAD_SHAPES = [_PROP_SHAPE[1:], (3, 1, 3, 2), pytest.param(3, 2, 2, 2, marks=pytest.mark.slow),
               pytest.param(5, 1, 3, 2, marks=pytest.mark.slow)]


@pytest.mark.parametrize("n, Q, S, m", GRAD_SHAPES)
def test_gradients_match_oracle_autodiff(n, Q, S, m):
    rng = np.random.default_rng(100 + n)
    with jax.enable_x64(True):
        args = random_inputs(rng, 2, n, Q, S, m, scale=2.0)
        weights = rng.normal(size=(2, n, Q, S, m))
        _, got = kernel_and_grads()(weights, *args)
        _, want = oracle_and_grads()(weights, *args)
    assert_grads_close(got, want, rtol=1e-9, atol=1e-11)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.1, 1.0, 5.0, 20.0, 50.0]),
    p_neg_inf=st.sampled_from([0.0, 0.3, 0.6]),
)
def test_property_values_and_gradients(seed, scale, p_neg_inf):
    """Random weights, impossible transitions and |w| up to ~150: kernel == oracle, all finite."""
    B, n, Q, S, m = _PROP_SHAPE
    weights = np.linspace(-1.0, 1.0, B * n * Q * S * m).reshape(B, n, Q, S, m)
    with jax.enable_x64(True):
        args = random_inputs(np.random.default_rng(seed), *_PROP_SHAPE, scale=scale, p_neg_inf=p_neg_inf)
        readings, grads = kernel_and_grads()(weights, *args)
        want_readings, want_grads = oracle_and_grads()(weights, *args)
    value, want_value = loss_value(readings, weights), loss_value(want_readings, weights)
    assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)
    np.testing.assert_allclose(value, want_value, rtol=1e-9, atol=1e-10)
    assert_grads_close(grads, want_grads, rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------- numerics


def _extreme_inputs(rng, dtype):
    B, n, Q, S, m = SHARED_SHAPE
    push, repl, pop, pushed, bottom = random_inputs(rng, B, n, Q, S, m, scale=50.0, p_neg_inf=0.3)
    repl[:, 3, 1, 2, 0, 1] = 150.0
    pop[:, 5] = -150.0
    pushed = np.log(1 / (1 + np.exp(-3 * rng.normal(size=(B, n, m)))))  # log sigmoid, as in attention
    pushed[0, 2, 1] = -np.inf
    return tuple(x.astype(dtype) for x in (push, repl, pop, pushed, bottom))


def test_no_nan_or_inf_with_impossible_and_huge_weights():
    """|w| ~ 50-150 and -inf weights: finite values and gradients, float32 close to float64."""
    rng = np.random.default_rng(5)
    weights = rng.normal(size=SHARED_SHAPE)
    results = {}
    for dtype in (np.float32, np.float64):
        with jax.enable_x64(dtype == np.float64):
            args = _extreme_inputs(np.random.default_rng(6), dtype)
            readings, grads = kernel_and_grads(3)(weights.astype(dtype), *args)
            assert readings.dtype == dtype and all(g.dtype == dtype for g in grads)
            assert np.isfinite(readings).all()
            for g in grads:
                assert np.isfinite(g).all()
            results[dtype] = (np.asarray(readings), [np.asarray(g) for g in grads])
    args64 = _extreme_inputs(np.random.default_rng(6), np.float64)
    want = nondeterministic_oracle(*args64, xp=np)
    np.testing.assert_allclose(results[np.float64][0], want, rtol=1e-9, atol=1e-10)
    r32, g32 = results[np.float32]
    r64, g64 = results[np.float64]
    np.testing.assert_allclose(r32, r64, atol=1e-3)
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, atol=2e-3 * max(1.0, np.abs(b).max()))


def test_no_surviving_run_gives_zero_readings():
    """If every transition at some step is impossible, all runs die: readings 0, gradients finite."""
    rng = np.random.default_rng(9)
    push, repl, pop, pushed, bottom = random_inputs(rng, *SHARED_SHAPE)
    push[:, 2], repl[:, 2], pop[:, 2] = -np.inf, -np.inf, -np.inf
    args = tuple(x.astype(np.float32) for x in (push, repl, pop, pushed, bottom))
    readings, grads = kernel_and_grads(3)(np.ones(SHARED_SHAPE, np.float32), *args)  # of readings.sum()
    readings = np.asarray(readings)
    assert np.isfinite(readings[:, :2]).all() and readings[:, :2].any()
    np.testing.assert_array_equal(readings[:, 2:], 0.0)
    assert all(np.isfinite(g).all() for g in grads)


def test_float32_matches_float64():
    rng = np.random.default_rng(21)
    weights = rng.normal(size=SHARED_SHAPE)
    with jax.enable_x64(True):
        args = random_inputs(rng, *SHARED_SHAPE, scale=3.0, p_neg_inf=0.1)
        r64, g64 = kernel_and_grads(3)(weights, *args)
    v64 = loss_value(r64, weights)
    args32 = tuple(x.astype(np.float32) for x in args)
    r32, g32 = kernel_and_grads(3)(weights.astype(np.float32), *args32)
    v32 = loss_value(r32, weights)
    assert r32.dtype == jnp.float32
    np.testing.assert_allclose(r32, r64, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(v32, v64, rtol=1e-5)
    for a, b in zip(g32, g64):
        np.testing.assert_allclose(a, b, atol=1e-4 * max(1.0, np.abs(b).max()))


def _trained_size_inputs(rng, B, n, Q, S, m):
    """Log weights as a trained Tf+Nd layer makes them: a linear layer's raw outputs (sd 3, 2% at +-12),
    and the released code's raw W_v x as log pushed vectors (log v ~ N(0, 2^2))."""
    push, repl, pop, pushed, bottom = random_inputs(rng, B, n, Q, S, m, scale=3.0)
    for x in (push, repl, pop):
        spikes = rng.random(x.shape) < 0.02
        x[spikes] = 12.0 * np.sign(rng.normal(size=spikes.sum()))
    return push, repl, pop, 2.0 * pushed, 2.0 * bottom


def test_float32_matches_float64_at_n64_readings():
    """The fast case of the next test: n = 64, trained-size logits, readings only (2 blocks, small Q, S)."""
    rng = np.random.default_rng(64)
    args = _trained_size_inputs(rng, 1, 64, 2, 2, 3)
    kernel = jax.jit(functools.partial(nondeterministic_stack, num_blocks=2))
    with jax.enable_x64(True):
        r64 = np.asarray(kernel(*args))
    r32 = np.asarray(kernel(*(x.astype(np.float32) for x in args)))
    assert r32.dtype == np.float32 and np.isfinite(r32).all()
    # Entry by entry (readings are positive averages of the pushed vectors): a float32 path that underflowed
    # inside the span sums would lose the small readings, which a tolerance scaled by the largest would miss.
    assert (r64 > 0).all()
    np.testing.assert_allclose(r32, r64, rtol=1e-3, atol=1e-7 * r64.max())


@pytest.mark.slow
@pytest.mark.parametrize("n", [64, 100])
def test_float32_matches_float64_long_sequences(n):
    """n = 64 and 100 with logits of a trained model's size: float32 readings and gradients track float64.

    The action logits are a linear layer's raw outputs (sd 3, a few at +-12,
    as a trained Tf+Nd layer produces), the pushed vectors the released
    code's raw W_v x (log v ~ N(0, 2^2)). Over 100 steps the chart's
    unnormalised weights span hundreds of nats, which float32 must carry
    through the split-point sums without underflow.
    """
    rng = np.random.default_rng(n)
    B, Q, S, m = 2, 3, 3, 4
    args = _trained_size_inputs(rng, B, n, Q, S, m)
    weights = rng.normal(size=(B, n, Q, S, m))
    with jax.enable_x64(True):
        f64 = jax.jit(jax.value_and_grad(loss_fn(nondeterministic_stack, weights), argnums=ARGNUMS))
        v64, g64 = f64(*args)
        r64 = np.asarray(stack(*args))
    args32 = tuple(x.astype(np.float32) for x in args)
    f32 = jax.jit(jax.value_and_grad(loss_fn(nondeterministic_stack, weights.astype(np.float32)), argnums=ARGNUMS))
    v32, g32 = f32(*args32)
    r32 = np.asarray(stack(*args32))
    assert np.isfinite(r32).all() and all(np.isfinite(g).all() for g in g32)
    scale = np.abs(r64).max()
    np.testing.assert_allclose(r32, r64, atol=1e-4 * scale)
    np.testing.assert_allclose(v32, v64, rtol=1e-4)
    for name, a, b in zip(("push", "repl", "pop", "pushed", "bottom"), g32, g64):
        np.testing.assert_allclose(a, b, atol=1e-3 * max(1.0, np.abs(b).max()), err_msg=name)


# --------------------------------------------------------------------------- the superposition stack (§4)


def _superposition_inputs(rng, B, n, m):
    logits = rng.normal(size=(B, n, 3))
    actions = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # (push, pop, no-op)
    return actions, rng.normal(size=(B, n, m))


def test_superposition_is_a_dvpda_with_q_s_1_when_nothing_pops():
    """§4 with |Q| = |Γ| = 1, normalised weights, v_0 = 0, as long as no pop is possible.

    With pops the literal claim fails: the superposition stack lets a run pop
    the (zero) bottom and go on, while the dVPDA can never pop ⊥, so such runs
    are dropped and the survivors renormalised (see the next test).
    """
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        actions, pushed = _superposition_inputs(rng, 2, 9, 4)
        actions[..., 2] += actions[..., 1]
        actions[..., 1] = 0.0  # no pops
        push, noop = (np.log(actions[..., k]).reshape(2, 9, 1, 1, 1, 1) for k in (0, 2))
        pop = np.full((2, 9, 1, 1, 1), -np.inf)
        nd = stack(push, noop, pop, np.log(np.abs(pushed)), np.full(4, -np.inf))
        sup = superposition(actions, np.abs(pushed))
    np.testing.assert_allclose(nd[:, :, 0, 0], sup, rtol=1e-12, atol=1e-14)


def test_superposition_is_a_dvpda_special_case():
    """§4, exactly: |Q| = 1, Γ = {⊥, A}, normalised weights, v_0 = 0, popping ⊥ folded into no-op.

    Every push pushes A; A can be popped; on ⊥ (the zero bottom the
    superposition stack keeps below its elements) a pop leaves ⊥ in place,
    like the superposition stack popping its zero padding. No run dies, so
    the dVPDA's normaliser is 1 and the reading summed over the top symbol
    is the superposition stack's reading.
    """
    rng = np.random.default_rng(4)
    B, n, m = 2, 11, 3
    with jax.enable_x64(True):
        actions, pushed = _superposition_inputs(rng, B, n, m)
        log_a = np.log(actions)
        push = np.full((B, n, 1, 2, 1, 2), -np.inf)
        push[..., 0, :, 0, 1] = log_a[..., 0, None]  # on ⊥ or A, push A
        repl = np.full((B, n, 1, 2, 1, 2), -np.inf)
        repl[..., 0, 1, 0, 1] = log_a[..., 2]  # no-op on A
        repl[..., 0, 0, 0, 0] = np.log(actions[..., 2] + actions[..., 1])  # no-op or pop on ⊥
        pop = np.full((B, n, 1, 2, 1), -np.inf)
        pop[..., 0, 1, 0] = log_a[..., 1]  # pop A
        vecs = np.abs(pushed)  # the dVPDA takes log vectors, so keep them positive
        nd = stack(push, repl, pop, np.log(vecs), np.full(m, -np.inf))
        sup = superposition(actions, vecs)
    np.testing.assert_allclose(np.asarray(nd)[:, :, 0].sum(axis=2), sup, rtol=1e-12, atol=1e-14)


def test_bottom_pops_are_dropped_and_renormalised():
    """n = 2, |Q| = |Γ| = 1, v_0 = 0: the dVPDA reading by hand, next to the superposition stack's.

    The two steps are the first two of a batch of the previous test's shapes (its compiled programs): the
    readings at t = 2 read no later step and no other sequence; v_t is the first entry of the pushed vectors.
    """
    p, o, a = np.array([0.5, 0.3]), np.array([0.2, 0.3]), np.array([0.3, 0.4])  # push, pop, no-op
    v = np.array([[2.0], [3.0]])
    actions, pushed = _superposition_inputs(np.random.default_rng(5), 2, 9, 4)
    actions[0, :2] = np.stack([p, o, a], -1)
    pushed = np.abs(pushed)  # the dVPDA takes log vectors
    pushed[0, :2, :1] = v
    log = lambda k, *shape: np.log(actions[..., k]).reshape(2, 9, 1, 1, 1, *shape)  # noqa: E731
    with jax.enable_x64(True):
        nd = np.asarray(stack(log(0, 1), log(2, 1), log(1), np.log(pushed), np.full(4, -np.inf)))[:, :, :, :, :1]
        sup = np.asarray(superposition(actions, pushed))[:, :, :1]
    # Surviving runs at t = 2: (push, push/no-op/pop), (no-op, push/no-op); the pop runs of t = 1 die.
    survivors = p[0] * (p[1] + a[1] + o[1]) + a[0] * (p[1] + a[1])
    top = (p[0] * p[1] + a[0] * p[1]) * v[1] + p[0] * a[1] * v[0]
    np.testing.assert_allclose(nd[0, 1, 0, 0], top / survivors, rtol=1e-12)
    np.testing.assert_allclose(sup[0, 1], p[1] * v[1] + a[1] * p[0] * v[0], rtol=1e-12)


# --------------------------------------------------------------------------- bad input


def _good(B=2, n=3, Q=2, S=2, m=2):
    return random_inputs(np.random.default_rng(0), B, n, Q, S, m)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: (a[0][..., 0],) + a[1:], "push must be"),
        (lambda a: (a[0][..., :1, :],) + a[1:], "push must be"),
        (lambda a: (a[0], a[1][:, :2]) + a[2:], "repl must have"),
        (lambda a: a[:2] + (a[2][..., :1],) + a[3:], "pop must be"),
        (lambda a: a[:3] + (a[3][:1],) + a[4:], "pushed must be"),
        (lambda a: a[:3] + (a[3][:, :, :0],) + a[4:], "pushed must be"),
        (lambda a: a[:4] + (a[4][:1],), "bottom must be"),
        (lambda a: a[:4] + (np.zeros((3, 2)),), "bottom must be"),
    ],
)
def test_shape_errors(change, message):
    with pytest.raises(ValueError, match=message):
        nondeterministic_stack(*change(_good()))
    with pytest.raises(ValueError, match=message):  # at trace time, too
        jax.jit(nondeterministic_stack).lower(*change(_good()))


@pytest.mark.parametrize("B, n, Q, S", [(2, 0, 2, 2), (2, 3, 0, 2), (2, 3, 2, 0), (0, 3, 2, 2)])
def test_empty_sizes_are_errors(B, n, Q, S):
    args = (
        np.zeros((B, n, Q, S, Q, S)),
        np.zeros((B, n, Q, S, Q, S)),
        np.zeros((B, n, Q, S, Q)),
        np.zeros((B, n, 2)),
        np.zeros(2),
    )
    with pytest.raises(ValueError, match="B, n, Q, S >= 1"):
        nondeterministic_stack(*args)


@pytest.mark.parametrize("which", range(5))
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_positive_inf_are_rejected_eagerly(which, bad):
    args = list(_good())
    args[which] = args[which].copy()
    args[which].flat[1] = bad
    name = ("push", "repl", "pop", "pushed", "bottom")[which]
    with pytest.raises(ValueError, match=f"{name} contains NaN or \\+inf"):
        nondeterministic_stack(*args)


def test_bad_num_blocks():
    with pytest.raises(ValueError, match="num_blocks"):
        nondeterministic_stack(*_good(), num_blocks=0)


# --------------------------------------------------------------------------- static bounds


def test_box_outside_its_array_raises():
    """A box that would leave its array for some L of the scan raises at trace time, naming it."""
    from tgjax.ops.nondeterministic import _check_box

    _check_box("x", (4, 10), lambda L: (0, L - 1), (4, 5), (2, 6))  # 5 + 5 = 10: fits
    with pytest.raises(AssertionError, match=r"x: box at \(0, 6\) of size \(4, 5\).* L = 7"):
        _check_box("x", (4, 10), lambda L: (0, L - 1), (4, 5), (2, 7))
    with pytest.raises(AssertionError, match="leaves the array"):
        _check_box("x", (4, 10), lambda L: (0, L - 3), (4, 5), (2, 7))  # negative start at L = 2


@pytest.mark.parametrize(
    "slip",
    [
        # G' one column and one time step too small for the widest block's overhang
        lambda nd: ("_gamma_prime_extent", lambda T, blocks, f=nd._gamma_prime_extent: f(T, blocks) - 1),
        # a block that reads one split point more than the chart has room for
        lambda nd: ("_block_sizes", lambda T, L0, L1, f=nd._block_sizes: (f(T, L0, L1)[0], f(T, L0, L1)[1] + 1)),
        # a block that reads one span start more
        lambda nd: ("_block_sizes", lambda T, L0, L1, f=nd._block_sizes: (f(T, L0, L1)[0] + 1, f(T, L0, L1)[1])),
    ],
)
def test_index_slips_raise_instead_of_clamping(monkeypatch, slip):
    """Sizes one too large for the arrays raise (lax.dynamic_slice would clamp and read wrong spans)."""
    import tgjax.ops.nondeterministic as nd

    name, slipped = slip(nd)
    monkeypatch.setattr(nd, name, slipped)
    shapes = [(1, 13, 2, 2, 2, 2)] * 2 + [(1, 13, 2, 2, 2), (1, 13, 2), (2,)]
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    f = jax.grad(lambda *a: nondeterministic_stack(*a, num_blocks=3).sum(), argnums=ARGNUMS)
    with pytest.raises(AssertionError, match="leaves the array"):
        jax.jit(f).lower(*args)


# --------------------------------------------------------------------------- memory


def _temp_bytes(n, num_blocks):
    B, Q, S, m = 2, 2, 2, 2
    shapes = [(B, n, Q, S, Q, S)] * 2 + [(B, n, Q, S, Q), (B, n, m), (m,)]
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    f = jax.grad(lambda *a: nondeterministic_stack(*a, num_blocks=num_blocks).sum(), argnums=ARGNUMS)
    return jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_forward_backward_memory_grows_quadratically():
    """The custom VJP keeps O(n^2): doubling n roughly quadruples the scratch memory (not x8)."""
    small, large = _temp_bytes(24, 2), _temp_bytes(48, 2)
    assert large / small < 5.0, (small, large)


def test_chart_is_folded_to_half_a_square():
    """From n = 128 on, the chart (and so its marginals) keeps lengths past T/2 in the short lengths' rows."""
    import tgjax.ops.nondeterministic as nd

    B, n, Q, S = 1, 128, 1, 2
    assert n + 1 >= nd._FOLD_FROM_T
    T = n + 1
    push_t = jax.ShapeDtypeStruct((B, Q * S, Q * S, T), jnp.float32)
    repl_t = jax.ShapeDtypeStruct((B, Q * S, Q * S, 2 * T), jnp.float32)
    pop_t = jax.ShapeDtypeStruct((B, Q * S, Q, 2 * T), jnp.float32)
    chart = jax.eval_shape(lambda a, b, c: nd._chart(a, b, c, 3), push_t, repl_t, pop_t)
    assert chart.shape == (B, Q * S, S, (T + 1) // 2 + 1, Q, T + 1)
    square = B * Q * S * S * (T + 1) * Q * T
    assert np.prod(chart.shape) <= 0.55 * square


def test_folded_chart_equals_the_square_one():
    """Values and gradients with the folded chart equal the square layout's (float64, n = 21, 3 blocks)."""
    rng = np.random.default_rng(21)
    B, n, Q, S, m = SHARED_SHAPE
    assert (n, Q, S) == (21, 2, 3)  # T = 22, even (test_several_blocks_match_oracle folds an odd T)
    with jax.enable_x64(True):
        args = random_inputs(rng, B, n, Q, S, m, scale=2.0, p_neg_inf=0.1)
        weights = rng.normal(size=(B, n, Q, S, m))
        square = kernel_and_grads(3)(weights, *args)
        folded = kernel_and_grads(3, fold=True)(weights, *args)
    np.testing.assert_allclose(loss_value(folded[0], weights), loss_value(square[0], weights), rtol=1e-12)
    assert_grads_close(folded[1], square[1], rtol=1e-10, atol=1e-12)
