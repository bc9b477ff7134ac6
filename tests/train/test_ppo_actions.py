"""PPO in action space (the flat LSTM / OMPN baselines): plain GAE by hand, gradients into the value head and the
policy, the carry restarted at episode starts (in the rollout and in the loss's re-run, which must agree), config
errors named, and a run through the trainer (stop / resume bit-identical) fine-tuning a tiny behaviour-cloned LSTM."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.needs import skip_module_without  # noqa: E402

skip_module_without("rlax", "distrax", "gymnax")

from tests.train.helpers import assert_resumes_bit_identically  # noqa: E402
from tgjax.models.actor_critic import ActorCritic  # noqa: E402
from tgjax.train.tasks.craft_ppo import fold_truncation  # noqa: E402
from tgjax.train.tasks.ppo_actions import plain_gae, ppo_loss, rerun  # noqa: E402

# One compiled program per shape, shared by the tests (op by op, every operation compiles a program of its own).
_plain_gae = jax.jit(plain_gae)
_fold_truncation = jax.jit(fold_truncation)
_rerun = nnx.jit(rerun)


def test_plain_gae_by_hand():
    # gamma 0.5, lambda 0.5, the episode ends after step 1 (discount 0). deltas: 0 + 0.5 * 2 - 1 = 0,
    # 0 + 0 * 3 - 2 = -2, 1 + 0.5 * 4 - 3 = 0. A2 = 0; A1 = -2 (nothing flows across the episode end);
    # A0 = 0 + 0.5 * 0.5 * -2 = -0.5 (lambda 1, as between an option's steps, would give -1).
    advantages = _plain_gae(jnp.array([0.0, 0.0, 1.0]), jnp.array([0.5, 0.0, 0.5]), jnp.array([1.0, 2.0, 3.0, 4.0]),
                            0.5)
    np.testing.assert_allclose(advantages, [-0.5, -2.0, 0.0], atol=1e-6)


def test_plain_gae_matches_the_recursion():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=9), rng.normal(size=10)
    discounts = 0.9 * (rng.random(9) > 0.3)
    expected, running = np.zeros(9), 0.0
    for t in reversed(range(9)):
        running = rewards[t] + discounts[t] * values[t + 1] - values[t] + discounts[t] * 0.8 * running
        expected[t] = running
    got = _plain_gae(jnp.asarray(rewards, jnp.float32), jnp.asarray(discounts, jnp.float32),
                     jnp.asarray(values, jnp.float32), 0.8)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def gae_by_the_equations(rewards, terminated, truncated, values, final_values, gamma, lam):
    """A direct loop over GAE's equations: delta_t = r_t + gamma V' - V_t with V' = 0 after a termination, the
    value of the final observation after a truncation, V_{t+1} otherwise; A_t = delta_t + gamma lambda A_{t+1}
    inside an episode, A_t = delta_t at its last step."""
    advantages, following = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        if terminated[t]:
            next_value = 0.0
        elif truncated[t]:
            next_value = final_values[t]
        else:
            next_value = values[t + 1]
        delta = rewards[t] + gamma * next_value - values[t]
        ends = terminated[t] or truncated[t]
        advantages[t] = following = delta + (0.0 if ends else gamma * lam * following)
    return advantages


def _gae_with_truncation(rewards, terminated, truncated, values, final_values, gamma, lam):
    as_f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    folded, discounts = _fold_truncation(as_f32(rewards), jnp.asarray(terminated), jnp.asarray(truncated),
                                         as_f32(final_values), gamma)
    return np.asarray(_plain_gae(folded, discounts, as_f32(values), lam))


def test_truncated_step_bootstraps_from_the_final_value_by_hand():
    # gamma 0.5, lambda 0.5, values 1, 2, 3 and V(s_3) = 4; step 1 hits the time limit, its final observation worth
    # 10 (step 2 starts the next episode). deltas: 0 + 0.5 * 2 - 1 = 0, 1 + 0.5 * 10 - 2 = 4, 0 + 0.5 * 4 - 3 = -1.
    # A2 = -1; A1 = 4 (nothing flows back from the next episode); A0 = 0 + 0.5 * 0.5 * 4 = 1.
    # As a termination, step 1 would give delta 1 - 2 = -1 and A0 = -0.25.
    args = ([0.0, 1.0, 0.0], [False, False, False], [False, True, False], [1.0, 2.0, 3.0, 4.0], [0.0, 10.0, 0.0])
    np.testing.assert_allclose(_gae_with_truncation(*args, 0.5, 0.5), [1.0, 4.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(gae_by_the_equations(*args, 0.5, 0.5), [1.0, 4.0, -1.0], atol=1e-6)
    # a step that terminates as the limit is reached is a termination: its final value is not read
    ends_both = ([0.0, 1.0, 0.0], [False, True, False], [False, True, False], [1.0, 2.0, 3.0, 4.0], [0.0, 10.0, 0.0])
    np.testing.assert_allclose(_gae_with_truncation(*ends_both, 0.5, 0.5), [-0.25, -1.0, -1.0], atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
def test_gae_with_truncation_matches_the_equations(seed):
    rng = np.random.default_rng(seed)
    T = 12
    rewards, values, final_values = rng.normal(size=T), rng.normal(size=T + 1), rng.normal(size=T)
    terminated, truncated = rng.random(T) < 0.15, rng.random(T) < 0.25
    np.testing.assert_allclose(_gae_with_truncation(rewards, terminated, truncated, values, final_values, 0.9, 0.8),
                               gae_by_the_equations(rewards, terminated, truncated, values, final_values, 0.9, 0.8),
                               rtol=1e-5, atol=1e-5)


@functools.cache
def _module(kind: str):
    """A fresh ActorCritic of `kind` (hidden size 8), built once per kind in one compiled program (not op by op);
    the tests only read it."""
    from tgjax.models.ocn import CraftPolicyConfig

    config = CraftPolicyConfig(kind=kind, num_tasks=1, hidden_size=8)
    return nnx.jit(lambda: ActorCritic(config, rngs=nnx.Rngs(0)))()


def _records(module, T: int = 5, B: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = module.policy.config.input_size
    first = np.zeros((T, B), bool)
    first[0] = True
    first[3, 1] = True
    return {"obs": jnp.asarray(rng.random((T, B, X)) < 0.1, jnp.float32), "first": jnp.asarray(first),
            # the thesis' actions: the rollout never takes DONE (the last), so neither do these records
            "action": jnp.asarray(rng.integers(0, module.policy.config.num_actions - 1, (T, B))),
            "log_pi_old": jnp.asarray(np.log(rng.uniform(0.1, 0.3, (T, B))), jnp.float32)}


@pytest.mark.parametrize("kind", ["lstm", "ompn"])
def test_value_head_and_policy_receive_gradients(kind):
    module = _module(kind)
    rec = _records(module)
    rng = np.random.default_rng(1)
    advantages, targets = (jnp.asarray(rng.normal(size=(5, 3)), jnp.float32) for _ in range(2))
    graphdef, state = nnx.split(module)
    carry = module.init_carry(3)

    def loss(state):
        return ppo_loss(nnx.merge(graphdef, state), carry, rec, advantages, targets, clip_epsilon=0.2,
                        value_coef=0.5, entropy_coef=0.01)[0]

    grads = nnx.to_pure_dict(jax.jit(jax.grad(loss))(state))  # one compiled program, not op by op
    # the norms in NumPy: in JAX each gradient's shape would compile its own abs and sum
    norm = lambda tree: float(sum(np.abs(np.asarray(g)).sum() for g in jax.tree.leaves(tree)))  # noqa: E731
    assert norm(grads["w_v"]) > 0 and norm(grads["b_v"]) > 0
    assert norm(grads["policy"]) > 0
    # the initial-state table (the RL task's row) and the action head are trained
    table, head = {"lstm": ("carry_init", "w_out"), "ompn": ("task_embedding", "cell")}[kind]
    assert norm(grads["policy"][table]) > 0 and norm(grads["policy"][head]) > 0


@pytest.mark.parametrize("kind", ["lstm", "ompn"])
def test_carry_restarts_at_an_episode_start(kind):
    """From an episode's first step on, the re-run does not depend on the carry it came with."""
    module = _module(kind)
    rec = _records(module)
    log_pi, value = _rerun(module, module.init_carry(3), rec["obs"], rec["first"])
    # the garbage carry and the late records made in NumPy (in JAX each would compile its own small program)
    garbage = jax.tree.map(lambda a: jnp.asarray(np.asarray(a) + 3.0) if a.dtype != bool else a,
                           module.init_carry(3))
    late_first = np.array(rec["first"])[3:]
    late_first[0] = True
    log_pi_late, value_late = _rerun(module, garbage, jnp.asarray(np.asarray(rec["obs"])[3:]), jnp.asarray(late_first))
    np.testing.assert_allclose(log_pi[3:, 1], log_pi_late[:, 1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value[3:, 1], value_late[:, 1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(log_pi[3:, 0], log_pi_late[:, 0], atol=1e-4)  # row 0 did carry its state on


def _task(tmp_path, overrides):
    from tgjax.train import sharding as shd
    from tgjax.train.config import apply_overrides
    from tgjax.train.task import RunContext
    from tgjax.train.tasks.ppo_actions import PPOActionsTask, default_config

    config = apply_overrides(default_config(), overrides)
    task = PPOActionsTask(config)
    task.validate_config(config)
    task.setup(RunContext(tmp_path, shd.make_mesh(1, 1), False, 0, 1, lambda text: None))
    return task


# One fresh LSTM's task for the rollout and evaluation tests below (its rollout and reset compiled once): 4
# environments, rollouts of 12 steps, episodes of at most 8 (a rollout ends inside episodes), 64 episodes a
# validation.
FRESH = ["rl.policy_workdir=", "model.hidden_size=8", "rl.num_envs=4", "rl.rollout_steps=12", "rl.max_steps=8",
         "rl.num_minibatches=1", "evaluation.episodes=64"]


@pytest.fixture(scope="module")
def fresh_task(tmp_path_factory):
    return _task(tmp_path_factory.mktemp("fresh_ppo"), FRESH)


@functools.cache
def _fresh_state_program(task):
    """`task.init_state()` as one compiled program (not op by op), placed as the task places it."""
    return jax.jit(task._fresh_state, out_shardings=task.state_shardings)


def _init_state(task):
    """A fresh `task.init_state()` state (new arrays at each call: a rollout may donate them)."""
    return _fresh_state_program(task)()


@functools.cache
def _reset_envs(task):
    """`task.reset_envs`, jitted once per task (not op by op)."""
    return jax.jit(task.reset_envs, static_argnums=1)


def test_rollout_is_what_the_loss_reruns(fresh_task):
    """The rollout's log-probabilities and values are those the loss's re-run computes from the saved carry, over
    several episodes (the carry restarted at each one's first step in both)."""
    task = fresh_task
    state = _init_state(task)
    # a state in the middle of episodes, with a carry that is not the initial one: where a first rollout left it
    (env, obs, carry, first), _ = task._rollout(state)
    state = dataclasses.replace(state, env=env, obs=obs, carry=carry, first=first, step=state.step + 1)
    assert not bool(state.first.all())
    (_, _, _, _), rec = task._rollout(state)
    assert int(rec["first"][1:].sum()) >= 3
    log_pi, value = _rerun(nnx.merge(task.graphdef, state.params), state.carry, rec["obs"], rec["first"])
    taken = jnp.take_along_axis(log_pi, rec["action"][..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(taken, rec["log_pi_old"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, rec["value"], rtol=1e-5, atol=1e-5)


def _uniform_policy_rollouts(task, num_seeds=6):
    """The actions [seeds, T, N] of rollouts of a fresh LSTM (`task`, FRESH's sizes) whose action head is zero
    (every action equally likely before any mask), from random seeds (the rollout's key and its environments)."""
    state = _init_state(task)
    state.params["policy"]["w_out"] = jnp.zeros_like(state.params["policy"]["w_out"])
    state.params["policy"]["b_out"] = jnp.zeros_like(state.params["policy"]["b_out"])
    actions = []
    for seed in np.random.default_rng(0).integers(0, 2**31, num_seeds):
        key = jax.random.key(int(seed))
        obs, env = _reset_envs(task)(key, 4)
        start = dataclasses.replace(state, rng=jax.random.key_data(jax.random.fold_in(key, 1)), obs=obs, env=env)
        _, rec = task._rollout(start)
        actions.append(np.asarray(rec["action"]))
    return np.stack(actions)


def test_rollouts_never_take_done_under_the_thesis_actions(tmp_path, fresh_task):
    """Over random seeds: the thesis' action set (default) never takes DONE; `rl.ompn_done_action=True` (OMPN's
    release) keeps it a choice, and a uniform policy then takes it about once in six steps."""
    from tgjax.envs.craft_rules import DONE

    assert not fresh_task.config.rl.ompn_done_action  # the default
    thesis = _uniform_policy_rollouts(fresh_task)
    assert not np.any(thesis == DONE)
    assert set(np.unique(thesis)) == {0, 1, 2, 3, 4}
    release = _uniform_policy_rollouts(_task(tmp_path, [*FRESH, "rl.ompn_done_action=true"]))
    assert 0.08 < np.mean(release == DONE) < 0.3


def test_selection_and_report_episodes_are_disjoint(fresh_task):
    """The episodes that select the best checkpoint and the held-out ones reported are different maps, and a
    validation records both."""
    from tgjax.train.tasks.craft_ppo import evaluation_keys

    task = fresh_task
    select_key, heldout_key = evaluation_keys(task.config.training.seed)

    def starts(key):
        _, env = _reset_envs(task)(key, 64)
        return {(np.asarray(env.grid[i]).tobytes(), tuple(np.asarray(env.pos[i])), int(env.direction[i]))
                for i in range(64)}

    selection, heldout = starts(select_key), starts(heldout_key)
    assert len(selection) == len(heldout) == 64
    assert not selection & heldout
    state = _init_state(task)
    evaluation = task.evaluate(state, None)
    assert evaluation.values["valid_return"] == evaluation.record["return"]
    assert {"return", "success_rate", "heldout_return", "heldout_success_rate"} <= set(evaluation.record)


@pytest.mark.parametrize("override, message", [
    ("rl.task=AX", r"rl.task.*unknown Craft task name 'AX'"),
    ("rl.num_minibatches=3", r"must divide rl.num_envs"),
    ("model.kind=ocn", r"model.kind.*'ocn'.*ppo_options"),
    ("rl.policy_workdir=/nonexistent/run", r"rl.policy_workdir /nonexistent/run: no checkpoints"),
])
def test_bad_config_is_named(override, message):
    from tgjax.train.config import ConfigError, apply_overrides
    from tgjax.train.tasks.ppo_actions import default_config, describe

    config = apply_overrides(default_config(), [override])
    with pytest.raises(ConfigError, match=message):
        describe(config)  # check_config, then the BC run's checkpoint


def test_config_file():
    from configs.lstm_craft_rl import get_config

    config = get_config("DCA,dense,ompn")
    assert (config.trainer, config.rl.task, config.rl.dense_reward) == ("ppo_actions", "DCA", True)
    assert config.rl.policy_workdir == "runs/ompn_craft" and config.model.kind == "ompn"
    assert get_config().rl.policy_workdir == "runs/lstm_craft"
    with pytest.raises(ValueError, match="unknown argument 'ocn'"):
        get_config("ocn")


@pytest.mark.slow
def test_ppo_actions_runs_and_resumes_bit_identically(tmp_path):
    from tgjax.train.config import ConfigError, apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks import craft_bc, ppo_actions
    from tgjax.train.tasks.craft_ppo import restore_bc_policy

    bc = apply_overrides(craft_bc.default_config(), [
        "model.kind=lstm", "data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4",
        "evaluation.batch_size=4", "training.num_steps=4", "evaluation.interval_steps=4",
        "checkpointing.interval_steps=4", "logging.tensorboard=false"])
    train(bc, tmp_path / "bc", quiet=True)
    overrides = [f"rl.policy_workdir={tmp_path / 'bc'}", "rl.task=ACD", "rl.num_envs=4", "rl.rollout_steps=8",
                 "rl.num_minibatches=2", "rl.num_epochs=2", "rl.max_steps=16", "training.num_steps=6",
                 "evaluation.interval_steps=3", "evaluation.episodes=4", "checkpointing.interval_steps=1",
                 "logging.interval_steps=1", "logging.tensorboard=false"]
    config = apply_overrides(ppo_actions.default_config(), overrides)
    assert "lstm policy with a value head (fine-tuned from step 4)" in ppo_actions.describe(config).name

    # the fine-tuned policy starts from the BC run's parameters, its task row the mean of the BC rows
    task = _task(tmp_path / "probe", overrides)
    bc_policy = restore_bc_policy(tmp_path / "bc", 4, dataclasses.replace(task.policy_config, num_tasks=2))
    start = task.init_state()[0].params["policy"]
    np.testing.assert_array_equal(start["w_out"], bc_policy.w_out[...])
    np.testing.assert_allclose(start["carry_init"][0], bc_policy.carry_init[...].mean(0), rtol=1e-6)
    assert nnx.to_pure_dict(nnx.state(bc_policy)).keys() == start.keys()

    assert_resumes_bit_identically(lambda: apply_overrides(ppo_actions.default_config(), overrides), tmp_path,
                                   stop_after_step=3, num_steps=6)

    # an OCN run has no flat policy to fine-tune: named
    ocn = apply_overrides(craft_bc.default_config(), [
        "data.tasks=AC", "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4",
        "evaluation.batch_size=4", "training.num_steps=1", "evaluation.interval_steps=1",
        "checkpointing.interval_steps=1", "logging.tensorboard=false"])
    train(ocn, tmp_path / "ocn", quiet=True)
    with pytest.raises(ConfigError, match=r"'ocn' policy; PPO in action space fine-tunes lstm or ompn"):
        ppo_actions.describe(apply_overrides(ppo_actions.default_config(), [f"rl.policy_workdir={tmp_path / 'ocn'}"]))


@pytest.mark.slow
def test_fresh_ompn_resumes_bit_identically(tmp_path):
    """A fresh OMPN (rl.policy_workdir=""): its carry (memory, task, first) is checkpointed and restored too."""
    from tgjax.train.config import apply_overrides
    from tgjax.train.tasks import ppo_actions

    overrides = ["model.kind=ompn", "model.hidden_size=8", "rl.task=ACD", "rl.num_envs=4", "rl.rollout_steps=8",
                 "rl.num_minibatches=2", "rl.num_epochs=1", "rl.max_steps=16", "training.num_steps=3",
                 "evaluation.interval_steps=3", "evaluation.episodes=4", "checkpointing.interval_steps=1",
                 "logging.interval_steps=1", "logging.tensorboard=false"]
    assert_resumes_bit_identically(lambda: apply_overrides(ppo_actions.default_config(), overrides), tmp_path,
                                   stop_after_step=2, num_steps=3)


def test_logged_learning_rate_is_the_schedules(tmp_path):
    """The learning rate logged at each iteration is the one its first update uses: linearly from the configured
    rate to 0 over the run (before, the configured rate was logged at every step while Adam's rate fell)."""
    from tests.train.helpers import read_metrics
    from tgjax.train.config import apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks import ppo_actions

    num_steps, rate = 5, 1e-3
    config = apply_overrides(ppo_actions.default_config(), [
        "rl.policy_workdir=", "model.hidden_size=8", "rl.task=AC", "rl.num_envs=2", "rl.rollout_steps=4",
        "rl.num_minibatches=2", "rl.num_epochs=3", "rl.max_steps=8", f"training.num_steps={num_steps}",
        f"training.learning_rate={rate}", f"evaluation.interval_steps={num_steps}", "evaluation.episodes=2",
        f"checkpointing.interval_steps={num_steps}", "logging.interval_steps=1", "logging.tensorboard=false"])
    train(config, tmp_path, quiet=True, stop_after_step=4)  # stopped before the end: nothing to validate
    logged = {r["step"]: r["learning_rate"] for r in read_metrics(tmp_path) if r["split"] == "train"}
    assert sorted(logged) == [1, 2, 3, 4]
    for step, value in logged.items():
        np.testing.assert_allclose(value, rate * (1 - (step - 1) / num_steps), rtol=1e-6)
