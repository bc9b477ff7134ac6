"""The OCN step against a slow, obvious NumPy oracle of released-code.md §5.2's equations (probability space,
one option at a time), on random parameters and observations; and the MoE / first-step special cases."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.nn.randomise import randomised_module
from tgjax.models.ocn import (
    CraftPolicyConfig,
    OptionControllerPolicy,
    build_policy,
    live_observation_indices,
)
from tgjax.nn.ocn import CellBank, OptionBranches, follow_option


def oracle_cell(params: dict, k: int, x: np.ndarray, h: np.ndarray, depth: int, tau: float):
    """Cell k on one example: hbar = MLP([x; h]) (tanh), pi = softmax(W_pi hbar / tau), e = sigmoid(w_e hbar + b_e)."""
    w_first = np.concatenate([params["w_x"][k], params["w_h"][k]], axis=0)         # [X + H, H]
    hidden = np.tanh(np.concatenate([x, h]) @ w_first + params["b_in"][k])
    for layer in range(depth - 1):
        hidden = np.tanh(hidden @ params["w_deep"][k, layer] + params["b_deep"][k, layer])
    logits = hidden @ params["w_pi"][k] / tau
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    e = 1.0 / (1.0 + np.exp(-(hidden @ params["w_e"][k] + params["b_e"][k])))
    return hidden, pi, e


def oracle_ocn(options: dict, controller: dict, h_c0: np.ndarray, h_o0: np.ndarray, xs: np.ndarray, depth: int,
               tau_c: float, always_done: bool = False):
    """Action distributions [T, A], done probabilities [T] and option mixtures [T, K] of one episode xs [T, X]."""
    K = h_o0.shape[0]
    pis, es, ps = [], [], []
    h_c, p, h_o = h_c0, None, [h_o0[i] for i in range(K)]
    for t, x in enumerate(xs):
        # the "done" branch: the controller steps, the options restart from h_o0
        h_c_new, p_new, _ = oracle_cell(controller, 0, x, h_c, depth, tau_c)
        restart = [oracle_cell(options, i, x, h_o0[i], depth, 1.0) for i in range(K)]
        pi_hat = sum(p_new[i] * restart[i][1] for i in range(K))
        if t == 0 or always_done:
            e, pi = 1.0, pi_hat
            h_cont = [restart[i][0] for i in range(K)]
        else:
            cont = [oracle_cell(options, i, x, h_o[i], depth, 1.0) for i in range(K)]
            e = sum(p[i] * cont[i][2] for i in range(K))
            pi_bar = sum(p[i] * cont[i][1] for i in range(K))
            pi = e * pi_hat + (1 - e) * pi_bar
            h_cont = [cont[i][0] for i in range(K)]
        p = p_new if p is None else e * p_new + (1 - e) * p
        h_c = e * h_c_new + (1 - e) * h_c
        h_o = [e * restart[i][0] + (1 - e) * h_cont[i] for i in range(K)]
        pis.append(pi), es.append(e), ps.append(p)
    return np.array(pis), np.array(es), np.array(ps)


# One compiled program per policy config and shape, shared by the tests (a fresh jit per call compiles anew).
_sequence = nnx.jit(lambda policy, obs, task_ids: policy(obs, task_ids))
_step = nnx.jit(lambda policy, carry, obs: policy.step(carry, obs))


def oracle_config(kind: str, num_options: int = 3, depth: int = 2) -> CraftPolicyConfig:
    """The policies of the oracle test (and of test_done_probability_one_restarts_controller, which shares their
    compiled programs)."""
    return CraftPolicyConfig(kind=kind, num_tasks=3, num_options=num_options, hidden_size=5, depth=depth,
                             controller_temperature=10.0, num_actions=4, live_inputs=False)


def randomised_policy(config: CraftPolicyConfig, seed: int, randomise_seed: int, scale: float):
    """The policy of `config` (`build_policy`: OCN or MoE here) with `randomise_params(policy, randomise_seed, scale)`,
    built in one compiled program per config (`randomised_module`)."""
    return randomised_module(build_policy, config, seed, randomise_seed, scale)


def _bank_params(bank: CellBank) -> dict:
    return {name: np.asarray(getattr(bank, name)[...], np.float64)
            for name in ("w_x", "w_h", "b_in", "w_deep", "b_deep", "w_pi", "w_e", "b_e")}


# CI: three options, two layers, four steps (the first step's restart and three of the recursion), each kind
# twice: two compiled programs. Every option count (one included), depth (one: no deep layers) and length with
# -m slow.
@pytest.mark.parametrize("kind", ["ocn", "moe"])
@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.sampled_from([0.3, 1.0, 3.0]))
def test_ocn_matches_oracle(kind, seed, scale):
    check_ocn_against_oracle(seed, 3, 2, 4, kind, scale)


@pytest.mark.slow
@settings(max_examples=4, deadline=None)  # each example compiles its own shapes
@given(seed=st.integers(0, 10_000), num_options=st.integers(1, 4), depth=st.integers(1, 3),
       steps=st.integers(1, 5), kind=st.sampled_from(["ocn", "moe"]), scale=st.sampled_from([0.3, 1.0, 3.0]))
def test_ocn_matches_oracle_every_shape(seed, num_options, depth, steps, kind, scale):
    check_ocn_against_oracle(seed, num_options, depth, steps, kind, scale)


def check_ocn_against_oracle(seed, num_options, depth, steps, kind, scale):
    policy = randomised_policy(oracle_config(kind, num_options, depth), seed, seed + 1, scale)
    rng = np.random.default_rng(seed)
    batch = 2
    obs = rng.integers(0, 2, size=(batch, steps, 1075)).astype(np.float32) * rng.normal(size=(1, 1, 1075)).astype(
        np.float32) * 0.05
    task_ids = np.array([2, 0], np.int32)
    out = jax.tree.map(np.asarray, _sequence(policy, jnp.asarray(obs), jnp.asarray(task_ids)))  # read in NumPy
    opts, ctl = _bank_params(policy.options), _bank_params(policy.controller)
    h_c0 = np.asarray(policy.h_c_init[...], np.float64)
    h_o0 = np.asarray(policy.h_o_init[...], np.float64)
    for b in range(batch):
        pi, e, p = oracle_ocn(opts, ctl, h_c0[task_ids[b]], h_o0, obs[b].astype(np.float64), depth, 10.0,
                              always_done=kind == "moe")
        np.testing.assert_allclose(np.exp(np.asarray(out.log_pi[b])), pi, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(np.exp(np.asarray(out.log_done[b])), e, atol=2e-5, rtol=1e-4)
        np.testing.assert_allclose(np.exp(np.asarray(out.log_p[b])), p, atol=2e-5, rtol=1e-4)


def test_step_by_step_equals_sequence():
    """`step` from `init_carry`, one observation at a time, is the scanned `__call__` (what rollouts use)."""
    config = CraftPolicyConfig(num_tasks=2, num_options=3, hidden_size=8)
    policy = randomised_policy(config, 0, 3, 0.5)
    obs = jnp.asarray(np.random.default_rng(1).random((2, 5, 1075)) < 0.1, jnp.float32)
    task_ids = jnp.array([1, 0])
    whole = _sequence(policy, obs, task_ids)
    carry = nnx.jit(lambda policy, task_ids: policy.init_carry(task_ids))(policy, task_ids)  # not op by op
    for t in range(5):
        carry, out = _step(policy, carry, obs[:, t])
        np.testing.assert_allclose(out.log_pi, whole.log_pi[:, t], atol=1e-5)


def test_done_probability_one_restarts_controller():
    """With done probabilities forced to 1 (large b_e) OCN is MoE: every step is the "done" branch."""
    config = oracle_config("ocn")
    ocn = randomised_policy(config, 0, 5, 0.7)
    ocn.options.b_e[...] = jnp.full((config.num_options,), 50.0)
    # every parameter is the OCN's: the MoE's own draws are never read (shapes only, nothing compiled)
    moe = nnx.eval_shape(lambda: OptionControllerPolicy(oracle_config("moe"), rngs=nnx.Rngs(0)))
    nnx.update(moe, nnx.state(ocn, nnx.Param))
    obs = jax.random.normal(jax.random.key(2), (2, 4, 1075)) * 0.1
    task_ids = jnp.zeros(2, jnp.int32)
    np.testing.assert_allclose(_sequence(ocn, obs, task_ids).log_pi, _sequence(moe, obs, task_ids).log_pi, atol=1e-5)


def test_live_inputs_are_the_only_nonzero_features():
    """Every feature left out by `live_observation_indices` is zero on real Craft observations."""
    pytest.importorskip("gymnax")
    from tgjax.envs.craft import Craft

    env = Craft(("ACD",))
    params = env.params("ACD")
    keys = jax.random.split(jax.random.key(0), 64)
    actions = jax.random.randint(jax.random.key(1), (40, 64), 0, 6)

    @jax.jit
    def rollout(keys, actions):
        obs, states = jax.vmap(env.reset_env, in_axes=(0, None))(keys, params)

        def body(states, action):
            obs, states, *_ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(keys, states, action, params)
            return states, obs

        return jnp.concatenate([obs[None], jax.lax.scan(body, states, actions)[1]])

    seen = np.asarray(rollout(keys, actions)).reshape(-1, 1075)
    dropped = np.setdiff1d(np.arange(1075), live_observation_indices())
    assert np.all(seen[:, dropped] == 0)
    assert len(live_observation_indices()) == 25 * 9 + 21 + 4


def test_option_mixture_stays_normalised_over_long_episodes():
    """sum_i p_{t,i} = 1 at every step of a 65-step episode (the exact recursion's fixed point is unstable in
    floating point: without renormalising, the sum overflowed after ~50 steps)."""
    config = CraftPolicyConfig(num_tasks=1, num_options=3, hidden_size=8)

    @jax.jit
    def run(key):  # the fresh policy built, the observations drawn and the episode run in one compiled program
        policy = OptionControllerPolicy(config, rngs=nnx.Rngs(0))
        obs = jnp.zeros((2, 65, 1075)).at[:, :10].set(
            jax.random.bernoulli(key, 0.2, (2, 10, 1075)).astype(jnp.float32))
        return policy(obs, jnp.zeros(2, jnp.int32))

    out = run(jax.random.key(0))
    assert np.all(np.isfinite(np.asarray(out.log_pi)))
    np.testing.assert_allclose(np.exp(np.asarray(out.log_p)).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np.exp(np.asarray(out.log_pi)).sum(-1), 1.0, atol=1e-5)


def test_follow_option_restarts_where_chosen_and_reads_the_picked_option():
    # distinct values per (row, option) so that a wrong row, option or branch shows
    B, K, H, A = 3, 2, 4, 5
    rng = np.random.default_rng(0)
    branches = OptionBranches(*(rng.normal(size=shape).astype(np.float32) for shape in
                                ((B, K, H), (B, K, A), (B, K), (B, K, H), (B, K, A))))  # NumPy: read by NumPy
    option, chosen = jnp.array([1, 0, 1]), jnp.array([True, False, False])
    h_o, log_pi = (np.asarray(a) for a in jax.jit(follow_option)(jax.tree.map(jnp.asarray, branches), option,
                                                                  chosen))  # one compiled program, not op by op
    np.testing.assert_array_equal(h_o[0], branches.h_restart[0])          # every option restarts at a choice
    np.testing.assert_array_equal(h_o[1:], branches.h_cont[1:])
    np.testing.assert_array_equal(log_pi[0], branches.log_pi_restart[0, 1])
    np.testing.assert_array_equal(log_pi[1], branches.log_pi_cont[1, 0])
    np.testing.assert_array_equal(log_pi[2], branches.log_pi_cont[2, 1])


@functools.cache
def _initial_task_states() -> dict:
    """h_c_init of fresh policies of each std below, built in one compiled program (not op by op)."""
    configs = {std: CraftPolicyConfig(num_tasks=64, hidden_size=64, task_state_init_std=std) for std in (0.1, 1.0)}
    build = nnx.jit(lambda: {std: OptionControllerPolicy(config, rngs=nnx.Rngs(0)).h_c_init[...]
                             for std, config in configs.items()})
    return build()


@pytest.mark.parametrize("std", [0.1, 1.0])
def test_per_task_controller_states_start_at_the_configured_scale(std):
    rows = np.asarray(_initial_task_states()[std])          # 4096 draws of N(0, std^2)
    assert abs(rows.std() / std - 1.0) < 0.05 and abs(rows.mean()) < 0.05 * std


@functools.cache
def _fresh_done_heads() -> dict:
    """For each bias below: (b_e, log done probabilities [8, 12]) of a fresh craft_bc policy (3 tasks) built with
    `model.option_done_bias_init` = bias, on the same observations; every policy built and run in one compiled
    program (not op by op)."""
    from tgjax.train.tasks.craft_bc import default_config, policy_config

    configs = {}
    for bias in (0.0, -4.0):
        config = default_config()
        config.model.option_done_bias_init = bias
        configs[bias] = policy_config(config, num_tasks=3)
    obs = jax.random.bernoulli(jax.random.key(1), 0.1, (8, 12, 1075)).astype(jnp.float32)

    @jax.jit
    def run(obs):
        heads = {}
        for bias, config in configs.items():
            policy = OptionControllerPolicy(config, rngs=nnx.Rngs(0))
            heads[bias] = (policy.options.b_e[...], policy(obs, jnp.zeros(8, jnp.int32)).log_done)
        return heads

    return run(obs)


@pytest.mark.parametrize("bias", [0.0, -4.0])
def test_options_done_bias_starts_at_the_configured_value(bias):
    """`option_done_bias_init` sets b_e of every option at the start: the done probability of a fresh policy on
    real-scale observations is sigma(b_e + w_e . hbar), about 1/2 at 0 and below sigma(-4 + |w_e . hbar|) at -4."""
    b_e, log_done = _fresh_done_heads()[bias]
    np.testing.assert_array_equal(np.asarray(b_e), bias)
    done = np.exp(np.asarray(log_done)[:, 1:])              # step 1 is the "done" branch by definition
    if bias == 0.0:
        assert 0.3 < np.median(done) < 0.7
    else:
        assert np.median(done) < 0.1


@functools.cache
def _policies_told_and_not_told_the_task() -> dict:
    """(kind, task_input) -> log_pi [3, 4, A] of a fresh craft_bc policy (3 tasks, hidden 8) run on the same
    observations under task ids 0, 1, 2; every policy built and run in one compiled program."""
    from tgjax.train.tasks.craft_bc import default_config, policy_config

    configs = {}
    for kind in ("ocn", "lstm", "ompn"):
        for told in (True, False):
            config = default_config()
            config.model.kind, config.model.hidden_size, config.model.task_input = kind, 8, told
            config.model.task_state_init_std = 1.0   # the OCN's task rows far enough apart to show
            configs[kind, told] = policy_config(config, num_tasks=3)
    obs = jnp.broadcast_to(jax.random.bernoulli(jax.random.key(2), 0.1, (1, 4, 1075)), (3, 4, 1075))

    @jax.jit
    def run(obs):
        return {key: build_policy(config, nnx.Rngs(0))(obs, jnp.arange(3)).log_pi for key, config in configs.items()}

    return run(obs.astype(jnp.float32))


@pytest.mark.parametrize("kind", ["ocn", "lstm", "ompn"])
def test_a_policy_not_told_the_task_acts_the_same_for_every_task(kind):
    """`model.task_input=False` starts every task from the same learned state: the same observations give the
    same actions whatever the task id; told the task (the default), the per-task states set them apart."""
    runs = _policies_told_and_not_told_the_task()
    hidden, told = np.asarray(runs[kind, False]), np.asarray(runs[kind, True])
    for task in (1, 2):   # rows of one batch may round differently in the last bit
        np.testing.assert_allclose(hidden[task], hidden[0], rtol=0, atol=1e-5)
        assert np.abs(told[task] - told[0]).max() > 1e-4   # fresh policies: small, but 10x the rounding
