"""PPO in option space: the semi-MDP advantages and the masked clipped loss by hand, and a run through the trainer
(stop / resume bit-identical) on options from a tiny behaviour-cloning run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.needs import skip_module_without  # noqa: E402

skip_module_without("rlax", "distrax", "gymnax")

from tests.train.helpers import assert_resumes_bit_identically, train_losses  # noqa: E402
from tgjax.train.tasks.ppo_options import masked_clipped_loss, smdp_advantages  # noqa: E402

# The functions under test jitted: one compiled program per shape rather than each operation compiled on its own.
_smdp_advantages = jax.jit(smdp_advantages)
_masked_clipped_loss = jax.jit(masked_clipped_loss, static_argnums=3)


def test_smdp_advantage_by_hand():
    # gamma 0.5, lambda 0.5; an option decided at step 0 runs steps 0-1, the next decision is at step 2.
    # values 1, 2, 3, 4: deltas 0, -0.5, 0. A2 = 0; A1 = -0.5 + 0.5 * 0.5 * 0 = -0.5 (step 2 is a decision: lambda);
    # A0 = 0 + 0.5 * 1 * A1 = -0.25 (step 1 is not: lambda 1), the semi-MDP advantage
    # r0 + g r1 + g^2 V(s2) - V(s0) = 0.25 * 3 - 1 = -0.25.
    advantages = _smdp_advantages(jnp.array([0.0, 0.0, 1.0]), jnp.full(3, 0.5), jnp.array([False, True, True]),
                                  jnp.array([1.0, 2.0, 3.0, 4.0]), 0.5)
    np.testing.assert_allclose(advantages, [-0.25, -0.5, 0.0], atol=1e-6)


def test_masked_clipped_loss_by_hand():
    # decisions at 0 and 2: min(2 * 1, 1.2 * 1) = 1.2 and min(0.5 * -1, 0.8 * -1) = -0.8; the middle step
    # (advantage 5) is not a decision and must not count: loss = -(1.2 - 0.8) / 2
    loss = _masked_clipped_loss(jnp.asarray(np.log([2.0, 1.0, 0.5]), jnp.float32), jnp.array([1.0, 5.0, -1.0]),
                                jnp.array([1.0, 0.0, 1.0]), 0.2)
    assert float(loss) == pytest.approx(-0.2, abs=1e-6)


def _policy(num_options: int, seed: int, hidden_size: int = 8):
    from flax import nnx

    from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy

    config = CraftPolicyConfig(kind="ocn", num_tasks=2, num_options=num_options, hidden_size=hidden_size)
    policy = OptionControllerPolicy(config, rngs=nnx.Rngs(seed))
    policy.h_o_init[...] = jnp.asarray(np.random.default_rng(seed).normal(size=policy.h_o_init[...].shape))
    return policy


def test_pooled_options_are_each_runs_options():
    """Setting S2: pooling runs of 2 and 1 options gives 3 options that act exactly as the runs' own."""
    from flax import nnx

    from tgjax.models.ocn import pool_options

    first, second = _policy(2, seed=1), _policy(1, seed=2)
    pooled = pool_options([first, second])
    assert pooled.config.num_options == 3
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(5, first.config.input_size)), jnp.float32)
    h = jnp.asarray(rng.normal(size=(5, 3, 8)), jnp.float32)
    options = nnx.jit(lambda policy, x, h: policy.options(policy.options.project_observation(x), h))  # not op by op
    pooled_out = options(pooled, x, h)
    for run, cells in ((first, slice(0, 2)), (second, slice(2, 3))):
        run_out = options(run, x, h[:, cells])
        for got, want in zip(pooled_out, run_out):
            np.testing.assert_allclose(got[:, cells], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(pooled.h_o_init[...][cells], run.h_o_init[...])


def test_options_that_differ_are_not_pooled():
    from tgjax.models.ocn import pool_options
    from tgjax.workdir import split_workdirs

    assert split_workdirs(" runs/a, runs/b ,") == ["runs/a", "runs/b"]
    with pytest.raises(ValueError, match=r"runs/a and runs/b cannot be pooled: hidden_size 8 against 16"):
        pool_options([_abstract_policy(2), _abstract_policy(2, hidden_size=16)], ["runs/a", "runs/b"])


def _abstract_policy(num_options: int, hidden_size: int = 8):
    """`_policy`'s config, its parameters shapes only (`nnx.eval_shape`: nothing compiled); enough for the
    configs that `pool_options` compares before it reads any parameter."""
    from flax import nnx

    from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy

    config = CraftPolicyConfig(kind="ocn", num_tasks=2, num_options=num_options, hidden_size=hidden_size)
    return nnx.eval_shape(lambda: OptionControllerPolicy(config, rngs=nnx.Rngs(0)))


@pytest.mark.slow
def test_ppo_runs_and_resumes_bit_identically(tmp_path):
    from tgjax.train.config import apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks import craft_bc, ppo_options

    bc = apply_overrides(craft_bc.default_config(), [
        "data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4",
        "evaluation.batch_size=4", "training.num_steps=4", "evaluation.interval_steps=4",
        "checkpointing.interval_steps=4", "logging.tensorboard=false"])
    train(bc, tmp_path / "bc", quiet=True)
    overrides = [f"rl.options_workdir={tmp_path / 'bc'}", "rl.task=ACD", "rl.num_envs=4", "rl.rollout_steps=8",
                 "rl.num_minibatches=2", "rl.num_epochs=2", "rl.max_steps=16", "training.num_steps=6",
                 "evaluation.interval_steps=3", "evaluation.episodes=4", "checkpointing.interval_steps=1",
                 "logging.interval_steps=1", "logging.tensorboard=false"]
    assert_resumes_bit_identically(lambda: apply_overrides(ppo_options.default_config(), overrides), tmp_path,
                                   stop_after_step=3, num_steps=6)


@pytest.mark.slow
def test_ppo_over_two_runs_pooled_options(tmp_path):
    """Setting S2 through the trainer: two BC runs of 2 options on disjoint tasks, one controller over all 4."""
    from tgjax.train.config import apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks import craft_bc, ppo_options

    for name, tasks in (("bc1", "AC"), ("bc2", "CD")):
        bc = apply_overrides(craft_bc.default_config(), [
            f"data.tasks={tasks}", "data.num_demos=10", "model.num_options=2", "model.hidden_size=8",
            "training.batch_size=4", "evaluation.batch_size=4", "training.num_steps=2", "evaluation.interval_steps=2",
            "checkpointing.interval_steps=2", "logging.tensorboard=false"])
        train(bc, tmp_path / name, quiet=True)
    config = apply_overrides(ppo_options.default_config(), [
        f"rl.options_workdir={tmp_path / 'bc1'},{tmp_path / 'bc2'}", "rl.task=DCA", "rl.num_envs=4",
        "rl.rollout_steps=8", "rl.num_minibatches=2", "rl.num_epochs=1", "rl.max_steps=16", "training.num_steps=2",
        "evaluation.interval_steps=2", "evaluation.episodes=4", "checkpointing.interval_steps=2",
        "logging.interval_steps=1", "logging.tensorboard=false"])
    assert ppo_options.describe(config).vocab_size == 4
    train(config, tmp_path / "s2", quiet=True)
    assert list(train_losses(tmp_path / "s2")) == [1, 2]


@pytest.mark.parametrize("override, message", [
    ("rl.task=AX", r"rl.task.*unknown Craft task name 'AX'"),
    ("rl.task=CC", r"rl.task.*'get iron', is unreachable"),
    ("rl.options_workdir=", r"rl.options_workdir"),
    ("rl.num_minibatches=3", r"must divide rl.num_envs"),
])
def test_bad_rl_config_is_named(override, message):
    from tgjax.train.config import ConfigError, apply_overrides
    from tgjax.train.tasks.ppo_options import check_config, default_config

    config = apply_overrides(default_config(), ["rl.options_workdir=runs/x", override])
    with pytest.raises(ConfigError, match=message):
        check_config(config)


def test_smdp_advantage_of_an_option_cut_by_the_time_limit():
    # gamma 0.5, lambda 0.5; one option decided at step 0 runs until the limit truncates the episode at step 1,
    # whose final observation is worth 8 (V(s_2) = 100 is the next episode's and must not leak in). The semi-MDP
    # advantage r0 + g r1 + g^2 V(final) - V(s0) = 0 + 0.5 + 0.25 * 8 - 1 = 1.5; A1 = 1 + 0.5 * 8 - 2 = 3.
    from tgjax.train.tasks.craft_ppo import fold_truncation

    rewards, discounts = jax.jit(fold_truncation)(jnp.array([0.0, 1.0]), jnp.array([False, False]),
                                                  jnp.array([False, True]), jnp.array([0.0, 8.0]), 0.5)
    advantages = _smdp_advantages(rewards, discounts, jnp.array([False, True]), jnp.array([1.0, 2.0, 100.0]), 0.5)
    np.testing.assert_allclose(advantages, [1.5, 3.0], atol=1e-6)


@pytest.fixture(scope="module")
def default_options_task(tmp_path_factory):
    """`_options_task` with the default settings, set up once for the module."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _options_task(tmp_path_factory.mktemp("default_options"), monkeypatch)


def _options_task(tmp_path, monkeypatch, *overrides):
    """A PPOOptionsTask over 3 fresh options (no BC run: the loader is replaced) whose action heads are zero, so
    every action is equally likely before any mask."""
    from tgjax.train import sharding as shd
    from tgjax.train.config import apply_overrides
    from tgjax.train.task import RunContext
    from tgjax.train.tasks import ppo_options

    policy = _policy(3, seed=0)
    policy.options.w_pi[...] = jnp.zeros_like(policy.options.w_pi[...])
    monkeypatch.setattr(ppo_options, "_load_options", lambda workdir, step: (policy, {"step": 0, "kind": "ocn"}))
    config = apply_overrides(ppo_options.default_config(), [
        "rl.options_workdir=runs/unused", "rl.task=ACD", "rl.num_envs=4", "rl.max_steps=8", "rl.num_minibatches=1",
        *overrides])
    task = ppo_options.PPOOptionsTask(config)
    task.validate_config(config)
    task.setup(RunContext(tmp_path, shd.make_mesh(1, 1), False, 0, 1, lambda text: None))
    return task


def _option_rollout_actions(task, steps=16, num_seeds=6):
    """The actions [seeds, steps, N] of `task._act` from random seeds (the keys and the environments)."""
    import jax
    from flax import nnx

    from tgjax.train.tasks.ppo_options import _merge

    # `task.init_state()` as one compiled program (not op by op), placed as the task places it
    state = jax.jit(task._fresh_state, out_shardings=task.state_shardings)()
    options_graphdef = nnx.graphdef(task.options_policy)

    @jax.jit
    def act(params, options_state, carry, key):
        return task._act(nnx.merge(options_graphdef, options_state), _merge(task.graphdef, params), carry, key)

    actions = []
    reset_envs = jax.jit(task.reset_envs, static_argnums=1)  # compiled once, not op by op
    for seed in np.random.default_rng(0).integers(0, 2**31, num_seeds):
        key = jax.random.key(int(seed))
        obs, env = reset_envs(key, 4)
        carry = (env, obs, state.h_c, state.h_o, state.option, state.first)
        for t in range(steps):
            carry, rec = act(state.params, task.options_state, carry, jax.random.fold_in(key, t + 1))
            actions.append(np.asarray(rec["action"]))
    return np.stack(actions)


def test_option_rollouts_never_take_done_under_the_thesis_actions(tmp_path, monkeypatch, default_options_task):
    """Over random seeds: with the thesis' actions (default) the running option never takes DONE; with
    `rl.ompn_done_action=True` (OMPN's release) a uniform option takes it about once in six steps."""
    from tgjax.envs.craft_rules import DONE

    thesis = _option_rollout_actions(default_options_task)
    assert not np.any(thesis == DONE) and set(np.unique(thesis)) == {0, 1, 2, 3, 4}
    release = _option_rollout_actions(_options_task(tmp_path / "release", monkeypatch, "rl.ompn_done_action=true"))
    assert 0.08 < np.mean(release == DONE) < 0.3


def test_controller_temperature_is_a_switch(tmp_path, monkeypatch, default_options_task):
    """The fresh controller's tau: the thesis' 10 by default (imitation's), 1 when asked; the controller's
    option probabilities are its logits over tau."""
    import jax
    from flax import nnx

    from tgjax.models.actor_critic import Controller

    default = default_options_task
    one = _options_task(tmp_path / "one", monkeypatch, "rl.controller_temperature=1.0")
    assert default.controller_args[-1] == 10.0 and one.controller_args[-1] == 1.0
    # both controllers built in one compiled program, and run in another (not op by op)
    cold, hot = nnx.jit(lambda: tuple(Controller(*task.controller_args, rngs=nnx.Rngs(0)) for task in (one, default)))()
    assert cold.cell.temperature == 1.0 and hot.cell.temperature == 10.0
    x = jnp.asarray(np.random.default_rng(0).random((2, one.controller_args[0])) < 0.2, jnp.float32)
    h = jnp.zeros((2, one.controller_args[1]))
    log_cold, log_hot = nnx.jit(lambda cold, hot: (cold(x, h)[1], hot(x, h)[1]))(cold, hot)
    np.testing.assert_allclose(jax.nn.log_softmax(log_cold / 10.0), log_hot, atol=1e-5)
