"""Trained Craft policies back from a workdir, and their rollouts in the environment.

    policy, checkpoint = load_craft_policy("runs/ocn_craft")          # best validation NLL
    result = rollout(policy, Craft(("AC", "CD")), task="AC", policy_task_id=0, key=key, num_episodes=200)
    table = option_subtask_success(policy, key=key, num_episodes=200)  # OCN: option x subtask (thesis Table 5.2)

Rollouts sample actions from the policy (the thesis evaluates the stochastic
policy) and step the environment without gymnax's auto-reset, so an episode
ends at its termination or at `max_steps`: its return is the sum of rewards
until then, success = every subtask done (return >= number of subtasks under
the dense reward, as OMPN counts it).

`option_subtask_success` runs one option alone from its initial state on a
one-subtask task, Algorithm 4's way: at every step after the first the
option's done probability is sampled, and the option stops when it fires;
success = the subtask was completed before the option stopped (or within
the time limit).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.infer.loading import FamilyCheckpoint, open_family_checkpoint, restore_state_items
from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy, build_policy

__all__ = ["RolloutResult", "episode_runner", "load_craft_policy", "option_subtask_success", "rollout"]


def load_craft_policy(workdir: str | Path, step: str | int = "best") -> tuple[nnx.Module, FamilyCheckpoint]:
    """The policy of a `craft_bc` run (`tgjax.infer.loading` checks the step and its trainer)."""
    checkpoint = open_family_checkpoint(workdir, step, trainer="craft_bc", config_class=CraftPolicyConfig,
                                        reader="tgjax eval craft reads Craft policies (configs/ocn_craft.py)")
    abstract = nnx.eval_shape(lambda: build_policy(checkpoint.model_config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    target = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(state))
    params = restore_state_items(checkpoint, {"params": target})["params"]
    nnx.replace_by_pure_dict(state, params)
    return nnx.merge(graphdef, state), checkpoint


def episode_runner(policy: nnx.Module):
    """A jitted `rows -> (sum NLL, correct actions, steps, log done [B, T], option in use [B, T])` over padded
    demonstration rows (`tgjax.data.craft_episodes.score_episodes`'s `run`)."""
    graphdef, state = nnx.split(policy)

    @jax.jit
    def run(state, obs, actions, mask, task_ids):
        out = nnx.merge(graphdef, state)(obs.astype(jnp.float32), task_ids)
        log_pi = jnp.take_along_axis(out.log_pi, actions[..., None], axis=-1)[..., 0]
        correct = jnp.sum(mask * (jnp.argmax(out.log_pi, -1) == actions))
        return -jnp.sum(mask * log_pi), correct, jnp.sum(mask), out.log_done, jnp.argmax(out.log_p, -1)

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

    @jax.jit
    def run(state, key):
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

    returns, success, lengths = jax.device_get(run(state, key))
    return RolloutResult(np.asarray(returns), np.asarray(success), np.asarray(lengths))


def option_subtask_success(policy: OptionControllerPolicy, key: jax.Array, num_episodes: int,
                           subtasks: str = "ACD", max_steps: int = 64) -> np.ndarray:
    """[K, len(subtasks)]: success rate of option i run alone on the one-subtask task j (module docstring)."""
    from tgjax.envs.craft import Craft

    if not isinstance(policy, OptionControllerPolicy):
        raise ValueError("the option x subtask table needs an option policy (ocn or moe), not an LSTM")
    env = Craft(tuple(subtasks))
    num_options = policy.config.num_options
    graphdef, state = nnx.split(policy)

    @jax.jit
    def run(state, option, task_id, key):
        model = nnx.merge(graphdef, state)
        params = dataclasses.replace(env.default_params, task_id=task_id, max_steps_in_episode=max_steps)
        obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num_episodes), params)
        h = jnp.broadcast_to(model.h_o_init[...], (num_episodes,) + model.h_o_init.shape)

        def body(loop, t):
            obs, env_state, h, running, success = loop
            x = model.options.project_observation(
                jnp.take(obs, jnp.asarray(rules.live_observation_indices()), axis=-1)
                if model.config.live_inputs else obs)
            h_new, log_pi, done_logit = model.options(x, h)
            step_key = jax.random.fold_in(key, t + 1)
            stops = (t > 0) & jax.random.bernoulli(jax.random.fold_in(step_key, 1),
                                                   jax.nn.sigmoid(done_logit[:, option]))
            running = running & ~stops
            action = jax.random.categorical(step_key, log_pi[:, option])
            obs, env_state, _, done, _ = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
                key, env_state, action, params)
            success = success | (running & done)
            return (obs, env_state, h_new, running & ~done, success), None

        init = (obs, env_state, h, jnp.ones(num_episodes, bool), jnp.zeros(num_episodes, bool))
        final, _ = jax.lax.scan(body, init, jnp.arange(max_steps))
        return jnp.mean(final[4])

    table = np.zeros((num_options, len(subtasks)))
    for i in range(num_options):
        for j in range(len(subtasks)):
            table[i, j] = float(run(state, i, j, jax.random.fold_in(key, i * 100 + j)))
    return table
