"""Trained Craft policies back from a workdir, and their rollouts in the environment.

    policy, checkpoint = tgjax.load("runs/ocn_craft").restore()       # best validation NLL
    result = rollout(policy, Craft(("AC", "CD")), task="AC", policy_task_id=0, key=key, num_episodes=200)
    table = option_subtask_success(policy, key=key, num_episodes=200)  # OCN: option x subtask (thesis Table 5.2)

Rollouts sample actions from the policy (the thesis evaluates the stochastic
policy) and step the environment without gymnax's auto-reset, so an episode
ends at its termination or at `max_steps`: its return is the sum of rewards
until then, success = every subtask done (return >= number of subtasks under
the dense reward, as OMPN counts it).

`option_subtask_success` runs one option alone from its initial state on a
one-subtask task (thesis Table 5.2: "the success rate of using each option
to solve each subtask"; the protocol was not given). At every step after
the first the option's done probability is sampled, and when it fires:

* `on_done="reselect"` (default): Algorithm 4 asks the controller again,
  and a controller that always picks this option restarts it from its
  initial state, so the option goes on (the thesis' reading: the option is
  the one used for the whole subtask);
* `on_done="stop"`: the option's run ends there, counted a failure unless
  the subtask was already done (the stricter reading: the option must also
  not report done before its subtask is).

Success = the subtask was completed within the time limit (and, for
"stop", before the option stopped).

`scripted_controller_rollout` runs the frozen options on a (longer, unseen)
task under a controller that is told the current subtask and picks the
option given for it, with Algorithm 4's rollout: an option runs until its
done fires, then the controller chooses again and the chosen option
restarts from its initial state. It is the most an option-space controller
(PPO's, `tgjax.train.tasks.ppo_options`) can expect from these options, so
it tells a weak RL result's two causes apart: the options, or the search.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.infer.loading import FamilyCheckpoint, open_family_checkpoint, restore_state_items
from tgjax.models.ocn import (
    CraftPolicyConfig,
    OptionControllerPolicy,
    build_policy,
    demonstration_scores,
    pool_options,
)
from tgjax.nn.ocn import follow_option, option_branches

__all__ = ["RolloutResult", "episode_runner", "option_subtask_success", "pooled_options",
           "rollout", "scripted_controller_rollout"]


def _restore_policy(workdir: str | Path, step: str | int = "best") -> tuple[nnx.Module, FamilyCheckpoint]:
    """The policy of a `craft_bc` run (`tgjax.infer.loading` checks the step and its trainer): the `craft_bc`
    entry of `tgjax.load`'s family table (`tgjax.infer.api`)."""
    checkpoint = open_family_checkpoint(workdir, step, trainer="craft_bc", config_class=CraftPolicyConfig,
                                        reader="tgjax eval craft reads Craft policies (configs/ocn_craft.py)")
    abstract = nnx.eval_shape(lambda: build_policy(checkpoint.model_config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    target = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(state))
    params = restore_state_items(checkpoint, {"params": target})["params"]
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state), checkpoint


def pooled_options(models: Sequence) -> tuple[OptionControllerPolicy, list[FamilyCheckpoint]]:
    """Setting S2: the options of several craft_bc runs (OCN or MoE; `tgjax.load(workdir)` each) pooled in the
    order given (`tgjax.models.ocn.pool_options`; the pooled controller is left at initialisation) and each run's
    checkpoint. ValueError names a run without options, or two runs whose options cannot be pooled."""
    loaded = [model.restore() for model in models]
    for policy, checkpoint in loaded:
        if not isinstance(policy, OptionControllerPolicy):
            raise ValueError(f"{checkpoint.where}: a {checkpoint.model_config.kind!r} policy has no options to pool")
    pooled = pool_options([policy for policy, _ in loaded], [str(c.workdir) for _, c in loaded])
    return pooled, [checkpoint for _, checkpoint in loaded]


def episode_runner(policy: nnx.Module):
    """A jitted `rows -> (-log pi of each row's action [B, T], correct actions over the mask, log done [B, T],
    option in use [B, T])` over padded demonstration rows (`tgjax.data.craft_episodes.score_episodes`'s `run`)."""
    graphdef, state = nnx.split(policy)

    @jax.jit
    def run(state, obs, actions, mask, task_ids):
        return demonstration_scores(nnx.merge(graphdef, state), obs, actions, mask, task_ids)

    return lambda rows: jax.device_get(run(state, rows["obs"], rows["actions"], rows["mask"], rows["task_ids"]))


@dataclasses.dataclass
class RolloutResult:
    """returns [N], success [N] bool, lengths [N] (steps until the end or the limit)."""

    returns: np.ndarray
    success: np.ndarray
    lengths: np.ndarray

    def summary(self) -> dict[str, float]:
        return {"return": float(self.returns.mean()), "success_rate": float(self.success.mean()),
                "episode_length": float(self.lengths.mean()), "episodes": len(self.returns)}


def rollout(policy: nnx.Module, env, task, policy_task_id: int, key: jax.Array, num_episodes: int,
            *, dense_reward: bool = True, max_steps: int = 64) -> RolloutResult:
    """`num_episodes` episodes of `task` (in `env`'s table) with actions sampled from the policy, which is told
    task id `policy_task_id` (its row of learned initial states)."""
    params = env.params(task, dense_reward=dense_reward, max_steps=max_steps)
    graphdef, state = nnx.split(policy)
    returns, success, lengths = jax.device_get(_sampled_episodes(
        graphdef, state, env, params, jnp.int32(policy_task_id), key, num_episodes=num_episodes,
        max_steps=max_steps))
    return RolloutResult(np.asarray(returns), np.asarray(success), np.asarray(lengths))


# The episode programs below are jitted once per (model structure, environment, sizes): the parameters, the task
# and the key are arguments, so every task of an evaluation, and every policy of one structure, runs one program.

@functools.partial(jax.jit, static_argnames=("graphdef", "env", "num_episodes", "max_steps"))
def _sampled_episodes(graphdef, state, env, params, policy_task_id, key, *, num_episodes: int, max_steps: int):
    """(returns [N], success [N], lengths [N]) of `rollout`."""
    model = nnx.merge(graphdef, state)
    reset_keys = jax.random.split(jax.random.fold_in(key, 0), num_episodes)
    obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys, params)
    carry = model.init_carry(jnp.full((num_episodes,), policy_task_id, jnp.int32))
    alive = jnp.ones(num_episodes, bool)
    zeros = jnp.zeros(num_episodes)

    def body(loop, t):
        obs, env_state, carry, alive, returns, lengths, success = loop
        carry, out = model.step(carry, obs)
        action = jax.random.categorical(jax.random.fold_in(key, t + 1), out.log_pi)
        obs, env_state, reward, done, _ = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
            key, env_state, action, params)
        returns = returns + alive * reward
        lengths = lengths + alive
        success = success | (alive & done)
        return (obs, env_state, carry, alive & ~done, returns, lengths, success), None

    init = (obs, env_state, carry, alive, zeros, zeros, jnp.zeros(num_episodes, bool))
    final, _ = jax.lax.scan(body, init, jnp.arange(max_steps))
    return final[4], final[6], final[5]


ON_DONE = ("reselect", "stop")


def option_subtask_success(policy: OptionControllerPolicy, key: jax.Array, num_episodes: int,
                           subtasks: str = "ACD", max_steps: int = 64, on_done: str = "reselect") -> np.ndarray:
    """[K, len(subtasks)]: success rate of option i run alone on the one-subtask task j; `on_done` says what
    its done firing does (module docstring)."""
    from tgjax.envs.craft import Craft

    if not isinstance(policy, OptionControllerPolicy):
        raise ValueError("the option x subtask table needs an option policy (ocn or moe), not an LSTM")
    if on_done not in ON_DONE:
        raise ValueError(f"on_done={on_done!r}: expected one of {ON_DONE}")
    env = Craft(tuple(subtasks))
    num_options = policy.config.num_options
    graphdef, state = nnx.split(policy)
    table = np.zeros((num_options, len(subtasks)))
    for i in range(num_options):
        for j in range(len(subtasks)):
            table[i, j] = float(_one_option_success(
                graphdef, state, env, jnp.int32(i), jnp.int32(j), jax.random.fold_in(key, i * 100 + j),
                num_episodes=num_episodes, max_steps=max_steps, on_done=on_done))
    return table


@functools.partial(jax.jit, static_argnames=("graphdef", "env", "num_episodes", "max_steps", "on_done"))
def _one_option_success(graphdef, state, env, option, task_id, key, *, num_episodes: int, max_steps: int,
                        on_done: str):
    """The success rate of `option_subtask_success`'s cell (option, task_id)."""
    model = nnx.merge(graphdef, state)
    params = dataclasses.replace(env.default_params, task_id=task_id, max_steps_in_episode=max_steps)
    obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num_episodes), params)
    h_init = jnp.broadcast_to(model.h_o_init[...], (num_episodes,) + model.h_o_init.shape)

    def body(loop, t):
        obs, env_state, h, running, success = loop
        x = model.options.project_observation(
            jnp.take(obs, jnp.asarray(rules.live_observation_indices()), axis=-1)
            if model.config.live_inputs else obs)
        branches = option_branches(model.options, x, h, model.h_o_init[...])
        step_key = jax.random.fold_in(key, t + 1)
        # e_t is read on observation t from the running state, as in `ocn_step`'s "not done" branch
        fires = (t > 0) & jax.random.bernoulli(jax.random.fold_in(step_key, 1),
                                               jax.nn.sigmoid(branches.done_logit[:, option]))
        if on_done == "stop":
            running = running & ~fires
        # "reselect": the option is chosen again, so it acts on observation t from its initial state; the
        # first step starts from it anyway
        chosen = (t == 0) | fires if on_done == "reselect" else jnp.broadcast_to(t == 0, (num_episodes,))
        h_new, log_pi = follow_option(branches, jnp.full(num_episodes, option), chosen)
        action = jax.random.categorical(step_key, log_pi)
        obs, env_state, _, done, _ = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
            key, env_state, action, params)
        success = success | (running & done)
        return (obs, env_state, h_new, running & ~done, success), None

    init = (obs, env_state, h_init, jnp.ones(num_episodes, bool), jnp.zeros(num_episodes, bool))
    final, _ = jax.lax.scan(body, init, jnp.arange(max_steps))
    return jnp.mean(final[4])


def scripted_controller_rollout(policy: OptionControllerPolicy, env, task: str, option_of_subtask: dict[str, int],
                                key: jax.Array, num_episodes: int, *, dense_reward: bool = True,
                                max_steps: int = 64) -> RolloutResult:
    """`num_episodes` episodes of `task` (subtask letters, in `env`'s table) by the frozen options under the
    controller that picks `option_of_subtask[letter]` for the current subtask (module docstring)."""
    if not isinstance(policy, OptionControllerPolicy):
        raise ValueError("a scripted controller needs an option policy (ocn or moe), not an LSTM or OMPN")
    missing = sorted(set(task) - set(option_of_subtask))
    bad = {s: i for s, i in option_of_subtask.items() if not 0 <= i < policy.config.num_options}
    if missing or bad:
        raise ValueError(f"task {task!r}: no option given for subtask(s) {missing}" if missing else
                         f"options {bad} out of range: the policy has {policy.config.num_options}")
    params = env.params(task, dense_reward=dense_reward, max_steps=max_steps)
    option_at_position = jnp.asarray([option_of_subtask[letter] for letter in task], jnp.int32)   # [S]
    graphdef, state = nnx.split(policy)
    returns, success, lengths = jax.device_get(_scripted_episodes(
        graphdef, state, env, params, option_at_position, key, num_episodes=num_episodes, max_steps=max_steps))
    return RolloutResult(np.asarray(returns), np.asarray(success), np.asarray(lengths))


@functools.partial(jax.jit, static_argnames=("graphdef", "env", "num_episodes", "max_steps"))
def _scripted_episodes(graphdef, state, env, params, option_at_position, key, *, num_episodes: int,
                       max_steps: int):
    """(returns [N], success [N], lengths [N]) of `scripted_controller_rollout`; option_at_position: [S]."""
    live = jnp.asarray(rules.live_observation_indices())
    model = nnx.merge(graphdef, state)
    # the keys of `option_subtask_success`: on a one-subtask task the two agree episode by episode
    obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num_episodes), params)
    h_init = jnp.broadcast_to(model.h_o_init[...], (num_episodes,) + model.h_o_init.shape)
    rows = jnp.arange(num_episodes)
    zeros = jnp.zeros(num_episodes)

    def body(loop, t):
        obs, env_state, h, option, alive, returns, lengths, success = loop
        x = model.options.project_observation(jnp.take(obs, live, axis=-1) if model.config.live_inputs else obs)
        branches = option_branches(model.options, x, h, model.h_o_init[...])
        step_key = jax.random.fold_in(key, t + 1)
        fires = jax.random.bernoulli(jax.random.fold_in(step_key, 1),
                                     jax.nn.sigmoid(branches.done_logit[rows, option]))
        decision = (t == 0) | fires
        current = jnp.minimum(env_state.subtask, option_at_position.shape[0] - 1)   # subtasks done so far
        option = jnp.where(decision, option_at_position[current], option)
        h, log_pi = follow_option(branches, option, decision)
        action = jax.random.categorical(step_key, log_pi)
        obs, env_state, reward, done, _ = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
            key, env_state, action, params)
        returns = returns + alive * reward
        lengths = lengths + alive
        success = success | (alive & done)
        return (obs, env_state, h, option, alive & ~done, returns, lengths, success), None

    init = (obs, env_state, h_init, jnp.zeros(num_episodes, jnp.int32), jnp.ones(num_episodes, bool), zeros,
            zeros, jnp.zeros(num_episodes, bool))
    final, _ = jax.lax.scan(body, init, jnp.arange(max_steps))
    return final[5], final[7], final[6]

