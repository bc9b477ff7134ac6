"""PPO in option space: the semi-MDP advantages and the masked clipped loss by hand, and a run through the trainer
(stop / resume bit-identical) on options from a tiny behaviour-cloning run."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("rlax")
pytest.importorskip("distrax")
pytest.importorskip("gymnax")

from tests.train.helpers import assert_resumes_bit_identically, train_losses  # noqa: E402
from tgjax.train.tasks.ppo_options import masked_clipped_loss, smdp_advantages  # noqa: E402


def test_smdp_advantage_by_hand():
    # gamma 0.5, lambda 0.5; an option decided at step 0 runs steps 0-1, the next decision is at step 2.
    # values 1, 2, 3, 4: deltas 0, -0.5, 0. A2 = 0; A1 = -0.5 + 0.5 * 0.5 * 0 = -0.5 (step 2 is a decision: lambda);
    # A0 = 0 + 0.5 * 1 * A1 = -0.25 (step 1 is not: lambda 1), the semi-MDP advantage
    # r0 + g r1 + g^2 V(s2) - V(s0) = 0.25 * 3 - 1 = -0.25.
    advantages = smdp_advantages(jnp.array([0.0, 0.0, 1.0]), jnp.full(3, 0.5), jnp.array([False, True, True]),
                                 jnp.array([1.0, 2.0, 3.0, 4.0]), 0.5)
    np.testing.assert_allclose(advantages, [-0.25, -0.5, 0.0], atol=1e-6)


def test_masked_clipped_loss_by_hand():
    # decisions at 0 and 2: min(2 * 1, 1.2 * 1) = 1.2 and min(0.5 * -1, 0.8 * -1) = -0.8; the middle step
    # (advantage 5) is not a decision and must not count: loss = -(1.2 - 0.8) / 2
    loss = masked_clipped_loss(jnp.log(jnp.array([2.0, 1.0, 0.5])), jnp.array([1.0, 5.0, -1.0]),
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
    from tgjax.models.ocn import pool_options

    first, second = _policy(2, seed=1), _policy(1, seed=2)
    pooled = pool_options([first, second])
    assert pooled.config.num_options == 3
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(5, first.config.input_size)), jnp.float32)
    h = jnp.asarray(rng.normal(size=(5, 3, 8)), jnp.float32)
    pooled_out = pooled.options(pooled.options.project_observation(x), h)
    for run, cells in ((first, slice(0, 2)), (second, slice(2, 3))):
        run_out = run.options(run.options.project_observation(x), h[:, cells])
        for got, want in zip(pooled_out, run_out):
            np.testing.assert_allclose(got[:, cells], want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(pooled.h_o_init[...][cells], run.h_o_init[...])


def test_options_that_differ_are_not_pooled():
    from tgjax.models.ocn import pool_options
    from tgjax.workdir import split_workdirs

    assert split_workdirs(" runs/a, runs/b ,") == ["runs/a", "runs/b"]
    with pytest.raises(ValueError, match=r"runs/a and runs/b cannot be pooled: hidden_size 8 against 16"):
        pool_options([_policy(2, 1), _policy(2, 2, hidden_size=16)], ["runs/a", "runs/b"])


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
    assert ppo_options.describe(config)["vocab_size"] == 4
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
