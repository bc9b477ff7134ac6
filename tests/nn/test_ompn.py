"""The OMPN step against a slow, obvious NumPy oracle of released-code.md §5.7's equations (float64, one
example and one slot at a time, probability space; the pointer restated from the release's `Distribution`,
om_utils.py, for both its processes), on random parameters and observations over several steps; and its
properties: the pointer sums to 1, pi is nondecreasing, log pi is normalised, the first step uses
phat = [0, 1, 0, ...], stick-breaking's phat is a distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.nn.randomise import randomised_module
from tgjax.models.ocn import CraftPolicyConfig, OrderedMemoryPolicy, build_policy
from tgjax.nn.ompn import POINTERS, boundary_log_score, pointer_log_distribution


def ln(z, scale=1.0, bias=0.0):
    return (z - z.mean()) / np.sqrt(z.var() + 1e-5) * scale + bias


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def com_cell(P, i, v, m, u):
    """ComCell_i(v, m, u) = LN(g_v v + g_m m + g_c c), [z_g; c] = ReLU([v; m; u] W1 + b1) W2 + b2."""
    H = len(v)
    z = np.maximum(np.concatenate([v, m, u]) @ P["com_w1"][i] + P["com_b1"][i], 0) @ P["com_w2"][i] + P["com_b2"][i]
    g = sigmoid(ln(z[:3 * H], P["com_ln_scale"][i], P["com_ln_bias"][i]))
    g_v, g_m, g_c = g[:H], g[H:2 * H], g[2 * H:]
    return ln(g_v * v + g_m * m + g_c * z[3 * H:])


def decom_cell(P, i, v, u):
    """DecomCell_i(v, u) = LN(g_v v + g_c c), [z_g; c] = ReLU([v; u] W1 + b1) W2 + b2."""
    H = len(v)
    z = np.maximum(np.concatenate([v, u]) @ P["dec_w1"][i] + P["dec_b1"][i], 0) @ P["dec_w2"][i] + P["dec_b2"][i]
    g = sigmoid(ln(z[:2 * H], P["dec_ln_scale"][i], P["dec_ln_bias"][i]))
    return ln(g[:H] * v + g[H:] * z[2 * H:])


def score(P, u, m, c):
    """beta = LeakyReLU([u; m; c] W1 + b1) . w2 + b2 (the release's `Distribution.mlp`)."""
    a = np.concatenate([u, m, c]) @ P["score_w1"] + P["score_b1"]
    a = np.where(a > 0, a, 0.01 * a)
    return a @ P["score_w2"] + P["score_b2"]


def stick_breaking(beta):
    """`process_stickbreaking` after the sigmoid: slots visited from the last, each taking b_i of what is left;
    the "end" class (first) gets the rest. beta [n] -> phat [n + 1]."""
    b = sigmoid(beta)
    phat = np.zeros(len(b) + 1)
    left = 1.0
    for i in range(len(b) - 1, -1, -1):
        phat[i + 1] = b[i] * left
        left *= 1.0 - b[i]
    phat[0] = left
    return phat


def padded_softmax(beta, hidden_size):
    """`process_softmax` without a mask: beta / sqrt(H), a 0 padded in front for "end", then an L1-normalised
    exp. beta [n] -> phat [n + 1]."""
    x = np.exp(np.concatenate([[0.0], beta / np.sqrt(hidden_size)]))
    return x / x.sum()


def oracle_pointer(beta, pointer, hidden_size):
    return stick_breaking(beta) if pointer == "stickbreaking" else padded_softmax(beta, hidden_size)


def oracle_ompn(P, task, obs_enc_seq, pointer="stickbreaking"):
    """One episode: task [H], obs_enc_seq [T, H] -> per step (pi [A], phat [n+1], pi_cum [n], pi_rev [n],
    boundary score s, memory after the step [n, H])."""
    n, H = P["com_w1"].shape[0], len(task)
    M = np.zeros((n, H))
    M[0] = ln(task)
    results = []
    for t, o in enumerate(obs_enc_seq):
        u = np.concatenate([o, task])
        if t == 0:
            C = M.copy()
            phat = np.zeros(n + 1)
            phat[1] = 1.0
        else:
            C = np.zeros((n, H))
            h = o
            for i in range(n - 1, -1, -1):
                h = com_cell(P, i, h, M[i], u)
                C[i] = h
            beta = np.array([score(P, u, M[i], C[i]) for i in range(n)])
            phat = oracle_pointer(beta, pointer, H)
        p_end = phat[0]
        p = phat[1:] / phat[1:].sum()
        pi_cum = np.array([p[:i + 1].sum() for i in range(n)])
        pi_rev = np.array([p[i:].sum() for i in range(n)])
        c = np.zeros(H)
        c_in = np.zeros((n, H))
        for i in range(n):
            c_in[i] = c
            c = decom_cell(P, i, pi_rev[i] * C[i] + (1 - pi_rev[i]) * c, u)
        M = np.array([(1 - pi_cum[i]) * M[i] + p[i] * C[i] + (1 - pi_rev[i]) * c_in[i] for i in range(n)])
        out = M[n - 1]
        others = softmax(np.concatenate([out, task, o]) @ P["w_pi"] + P["b_pi"]) * (1 - p_end)
        pi = np.concatenate([others, [p_end]])
        expected_position = sum(j * phat[j] for j in range(n + 1))
        results.append((pi, phat, pi_cum, pi_rev, 1 - expected_position / n, M.copy()))
    return results


def _policy(seed=0, scale=0.5, **kwargs) -> OrderedMemoryPolicy:
    config = CraftPolicyConfig(**{"kind": "ompn", "num_tasks": 3, "num_slots": 3, "hidden_size": 6,
                                  "num_actions": 4, "live_inputs": False, **kwargs})
    policy = randomised_module(build_policy, config, seed, seed + 1, scale)  # one compiled program per config
    assert isinstance(policy, OrderedMemoryPolicy)
    return policy




# One compiled program per policy config and shape, shared by the tests (a fresh jit per call compiles anew).
_sequence = nnx.jit(lambda policy, obs, task_ids: policy(obs, task_ids))
_cell_step = nnx.jit(lambda policy, carry, obs: policy.cell(carry, policy._encode(obs)))
_step = nnx.jit(lambda policy, carry, obs: policy.step(carry, obs))
_init_carry = nnx.jit(lambda policy, task_ids: policy.init_carry(task_ids))
_pointer_log_distribution = jax.jit(pointer_log_distribution, static_argnums=(1, 2))


def _observations(seed, batch, steps):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, size=(batch, steps, 1075)) * rng.normal(size=(1, 1, 1075)) * 0.2).astype(np.float32)


def _run_steps(policy, obs, task_ids):
    """The cell's own outputs (pi, pi~, phat, memory) step by step, through `step`'s encoder."""
    carry = _init_carry(policy, jnp.asarray(task_ids))
    outs, memories = [], []
    for t in range(obs.shape[1]):
        carry, out = _cell_step(policy, carry, jnp.asarray(obs[:, t]))
        outs.append(jax.tree.map(np.asarray, out))  # read in NumPy: indexing JAX arrays compiles op by op
        memories.append(np.asarray(carry.memory))
    return outs, memories


# The default pointer (the release's stick-breaking) in CI, one slot and three (the edge case and the general one),
# twice each, over four steps: two compiled shapes. Every slot count and episode length, and the softmax switch,
# with -m slow (the softmax pointer's distribution alone is checked in CI by test_properties_over_a_long_episode).
@pytest.mark.parametrize("num_slots", [1, 3])
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.3, 1.0]))
def test_ompn_matches_oracle(num_slots, seed, scale):
    check_ompn_against_oracle(POINTERS[0], seed, num_slots, 4, scale)


@pytest.mark.slow
@pytest.mark.parametrize("pointer", POINTERS)
@settings(max_examples=4, deadline=None)  # each example compiles its own shapes
@given(seed=st.integers(0, 10_000), num_slots=st.integers(1, 4), steps=st.integers(2, 5),
       scale=st.sampled_from([0.3, 1.0]))
def test_ompn_matches_oracle_every_shape(pointer, seed, num_slots, steps, scale):
    check_ompn_against_oracle(pointer, seed, num_slots, steps, scale)


def check_ompn_against_oracle(pointer, seed, num_slots, steps, scale):
    policy = _policy(seed, scale, num_slots=num_slots, ompn_pointer=pointer)
    obs = _observations(seed, 2, steps)
    task_ids = np.array([2, 0], np.int32)
    whole = jax.tree.map(np.asarray, _sequence(policy, jnp.asarray(obs), jnp.asarray(task_ids)))
    outs, memories = _run_steps(policy, obs, task_ids)
    P = {name: np.asarray(value, np.float64) for name, value in nnx.to_pure_dict(nnx.state(policy.cell)).items()}
    w_obs, b_obs = np.asarray(policy.w_obs[...], np.float64), np.asarray(policy.b_obs[...], np.float64)
    tasks = np.asarray(policy.task_embedding[...], np.float64)
    close = dict(atol=5e-5, rtol=2e-4)
    for b in range(2):
        expected = oracle_ompn(P, tasks[task_ids[b]], obs[b].astype(np.float64) @ w_obs + b_obs, pointer)
        for t, (pi, phat, pi_cum, pi_rev, s, memory) in enumerate(expected):
            np.testing.assert_allclose(np.exp(np.asarray(whole.log_pi[b, t])), pi, **close)
            np.testing.assert_allclose(np.exp(np.asarray(whole.log_done[b, t])), s, **close)
            np.testing.assert_allclose(np.exp(np.asarray(whole.log_p[b, t])), phat[1:] / phat[1:].sum(), **close)
            np.testing.assert_allclose(np.exp(np.asarray(outs[t].log_p_hat[b])), phat, **close)
            np.testing.assert_allclose(np.asarray(outs[t].cumulative[b]), pi_cum, **close)
            np.testing.assert_allclose(np.asarray(outs[t].reverse_cumulative[b]), pi_rev, **close)
            np.testing.assert_allclose(memories[t][b], memory, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("pointer", POINTERS)
def test_properties_over_a_long_episode(pointer):
    """The pointer sums to 1, pi is nondecreasing with pi_{n-1} = 1 and pi~ nonincreasing with pi~_0 = 1,
    pi + pi~ - p = 1, log pi is normalised and finite, over 65 steps (the sizes of test_ompn_matches_oracle's
    three slots: the same compiled step)."""
    policy = _policy(3, 0.7, ompn_pointer=pointer)
    obs = _observations(4, 3, 65)
    outs, _ = _run_steps(policy, obs, np.array([0, 1, 2], np.int32))
    for out in outs:
        p = np.exp(np.asarray(out.log_p))
        pi, pi_rev = np.asarray(out.cumulative), np.asarray(out.reverse_cumulative)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.diff(pi, axis=-1) >= -1e-6) and np.all(np.diff(pi_rev, axis=-1) <= 1e-6)
        np.testing.assert_allclose(pi[:, -1], 1.0, atol=1e-5)
        np.testing.assert_allclose(pi_rev[:, 0], 1.0, atol=1e-5)
        np.testing.assert_allclose(pi + pi_rev - p, 1.0, atol=1e-5)
        assert np.all(np.isfinite(np.asarray(out.log_pi)))
        np.testing.assert_allclose(np.exp(np.asarray(out.log_pi)).sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(np.exp(np.asarray(out.log_p_hat)).sum(-1), 1.0, atol=1e-5)
        score = np.exp(np.asarray(out.log_done))
        assert np.all((score >= 0) & (score <= 1 + 1e-6))


def test_first_step_uses_the_fixed_pointer():
    """phat_1 = [0, 1, 0, ...]: DONE has probability 0, the pointer is on slot 0 (pi = 1, pi~ = [1, 0, ...]),
    slot 0 keeps LN(task embedding) and the boundary score is (n - 1) / n."""
    policy = _policy(5, 1.0, num_slots=3)
    obs = _observations(6, 2, 2)
    outs, memories = _run_steps(policy, obs, np.array([1, 2], np.int32))
    first = outs[0]
    np.testing.assert_allclose(np.exp(np.asarray(first.log_p_hat)), [[0, 1, 0, 0]] * 2, atol=1e-7)
    np.testing.assert_allclose(np.exp(np.asarray(first.log_pi[:, -1])), 0.0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(first.cumulative), 1.0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(first.reverse_cumulative), [[1, 0, 0]] * 2, atol=1e-7)
    np.testing.assert_allclose(np.exp(np.asarray(first.log_done)), 2 / 3, atol=1e-6)
    task = np.asarray(policy.task_embedding[...])[[1, 2]]
    normed = (task - task.mean(-1, keepdims=True)) / np.sqrt(task.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(memories[0][:, 0], normed, atol=1e-5)
    # the second step is free: the learned distribution, with DONE possible
    assert np.all(np.exp(np.asarray(outs[1].log_pi[:, -1])) > 0)


def test_step_by_step_equals_sequence():
    """`step` from `init_carry`, one observation at a time, is the scanned `__call__` (what rollouts use)."""
    policy = _policy(7, 0.5, num_actions=6)
    obs = _observations(8, 2, 5)
    task_ids = jnp.array([1, 0])
    whole = _sequence(policy, jnp.asarray(obs), task_ids)
    carry = _init_carry(policy, task_ids)
    for t in range(5):
        carry, out = _step(policy, carry, jnp.asarray(obs[:, t]))
        for name in ("log_pi", "log_done", "log_p"):
            np.testing.assert_allclose(getattr(out, name), getattr(whole, name)[:, t], atol=1e-5)


def test_boundary_score_orders_like_the_expected_position():
    """s = 1 - E / n is decreasing in OMPN's expected expansion position E = sum_j j phat_j (same top-k)."""
    rng = np.random.default_rng(0)
    phat = rng.dirichlet(np.ones(4), size=50)
    position = (np.arange(4) * phat).sum(-1)
    score = np.exp(np.asarray(jax.jit(boundary_log_score)(jnp.asarray(np.log(phat), jnp.float32))))  # not op by op
    np.testing.assert_allclose(score, 1 - position / 3, atol=1e-6)
    np.testing.assert_array_equal(np.argsort(-score)[:10], np.argsort(position)[:10])


@settings(max_examples=60, deadline=None)
@given(beta=hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 6)),
                       elements=st.floats(-60, 60, width=32)))
def test_stick_breaking_is_a_distribution(beta):
    """Stick-breaking's phat over "end" and the n slots is finite in log space, each entry in [0, 1], the
    whole summing to 1, and equal to the release's process restated (the oracle), for any scores, saturated
    sigmoids included."""
    log_p_hat = np.asarray(_pointer_log_distribution(jnp.asarray(beta), "stickbreaking", 8), np.float64)
    assert log_p_hat.shape == (beta.shape[0], beta.shape[1] + 1)
    assert np.all(np.isfinite(log_p_hat)) and np.all(log_p_hat <= 1e-6)
    np.testing.assert_allclose(np.exp(log_p_hat).sum(-1), 1.0, atol=1e-5)
    for row, scores in zip(log_p_hat, beta.astype(np.float64)):
        # float32 in log space against float64: a few ulps of 1 (Hypothesis found 1.4e-6 at beta = (32, -2))
        np.testing.assert_allclose(np.exp(row), stick_breaking(scores), atol=5e-6)


def test_stick_breaking_by_hand():
    """Two slots, b = sigmoid(beta) = (1/2, 3/4): slot 1 takes 3/4, slot 0 half of the 1/4 left, "end" the rest."""
    beta = np.log(np.array([[1.0, 3.0]]))                       # sigmoid(log 1) = 1/2, sigmoid(log 3) = 3/4
    phat = np.exp(np.asarray(pointer_log_distribution(jnp.asarray(beta, jnp.float32), "stickbreaking", 4)))
    np.testing.assert_allclose(phat, [[1 / 8, 1 / 8, 3 / 4]], atol=1e-6)
