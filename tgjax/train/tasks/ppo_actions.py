"""RL fine-tuning in action space: a flat Craft policy (LSTM or OMPN) trained whole with PPO (`trainer="ppo_actions"`).

    tgjax train --config configs/lstm_craft_rl.py:ACD --workdir runs/lstm_rl_ACD     # after configs/ocn_craft.py:lstm

The baselines' side of thesis §5.3 / Fig. 5.4 (released-code.md §5.3, §5.6):
OCN and MoE explore in option space (`tgjax.train.tasks.ppo_options`); the
flat LSTM and OMPN policies have no options, so PPO acts on the primitive
actions and every step is a decision. The thesis does not say how its flat
baselines were started for RL. The likeliest reading (the same recipe as
OCN: imitation on the short tasks, then RL on the unseen longer one) is
the default of configs/lstm_craft_rl.py: the behaviour-cloned policy of
`rl.policy_workdir` (a craft_bc run of kind lstm or ompn, its best
checkpoint, parameters restored by `craft_ppo.restore_bc_policy`) is
fine-tuned, every parameter trained. With `rl.policy_workdir=""` a fresh
policy of `model.kind` (`model.hidden_size`, `model.num_slots`) is trained
from scratch instead [choice: both are offered because the thesis is silent].

* The task's initial state: the BC policy has one learned initial state per
  training task (the LSTM's (c, h), OMPN's task embedding) and the RL task
  is unseen; the fine-tuned policy gets one row, started at the mean of the
  BC rows and trained [choice]. A fresh policy's row is initialised as in BC.
* The value head: linear (w_v [H], b_v, zeros at the start) on the policy's
  recurrent state after the step: the LSTM's h, OMPN's output slot M'_{n-1}
  (the lowest slot, the one its actions are read from) [choice]. The policy
  and the head share the recurrent network (the value loss trains it too),
  as `ppo_options`' controller shares its cell with its head. The network is
  `tgjax.models.actor_critic.ActorCritic`.

One trainer step is one PPO iteration, as in `ppo_options` (the update loop
and the trainer hooks are the same code: `craft_ppo`): a rollout of
`rl.num_envs` auto-resetting environments for `rl.rollout_steps` steps (the
policy's carry restarted from its initial state at each episode's first
step; an episode cut short by the time limit is bootstrapped from the value
of its final observation, `craft_ppo.fold_truncation`); advantages by
`ppo_options.smdp_advantages` with every step a decision (plain GAE,
`rlax.truncated_generalized_advantage_estimation` with lambda everywhere);
the loss `ppo_options.masked_clipped_loss` with mask 1 (the plain mean of
`rlax.clipped_surrogate_pg_loss`), the squared value error and an entropy
bonus of `distrax.Categorical` over the actions; `rl.num_epochs` epochs of
`rl.num_minibatches` minibatches of environments, the policy re-run over
each environment's rollout from its saved carry (BPTT). Adam with the
gradient clipped, lr linearly to 0 (thesis: 3e-4, batch 1024 = 16 x 64).
The rollout's environments and the policy's carry are in the checkpointed
state: a stopped run resumes bit-identically. Validation: as `ppo_options`
(two fixed sets of `evaluation.episodes` episodes, sampled actions: the
mean return on the first selects, the second is held out and recorded).
The policy acts in the thesis' action set: DONE is masked out of its
choices (`tgjax.models.actor_critic.without_done`, in the rollout and the loss)
unless `rl.ompn_done_action=True` (OMPN's release; OMPN's DONE is its p_end).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from tgjax.extras import rl_library
from tgjax.models.actor_critic import FLAT_KINDS, ActorCritic
from tgjax.models.ocn import CraftPolicyConfig
from tgjax.models.parts import count_parameters
from tgjax.train.config import ConfigError, to_json_dict
from tgjax.train.model_info import ModelInfo
from tgjax.train.task import RunContext
from tgjax.train.tasks import ppo_options
from tgjax.train.tasks.craft_ppo import (
    CraftPPOTask,
    check_ppo_config,
    evaluation_episodes,
    final_value_if_truncated,
    find_bc_checkpoint,
    fold_truncation,
    ppo_update,
    restore_bc_policy,
    rollout_metrics,
)
from tgjax.train.tasks.ppo_options import masked_clipped_loss, smdp_advantages

_REUSED = "PPO in action space fine-tunes a behaviour-cloned LSTM or OMPN policy"


def default_config() -> ml_collections.ConfigDict:
    """Every key this task and the trainer read (configs/lstm_craft_rl.py sets the run's): `ppo_options`' with
    rl.policy_workdir / rl.policy_step in place of the options' keys, and a `model` section for a fresh policy."""
    config = ppo_options.default_config().to_dict()
    config["trainer"] = "ppo_actions"
    rl = {k: v for k, v in config["rl"].items()
          if k not in ("options_workdir", "options_step", "controller_temperature")}  # no controller here
    config["rl"] = {"policy_workdir": "", "policy_step": "best", **rl}
    # read only when rl.policy_workdir is "" (a fresh policy); a fine-tuned one keeps its BC run's settings
    config["model"] = dict(kind="lstm", hidden_size=128, num_slots=3, ompn_pointer="stickbreaking")
    return ml_collections.ConfigDict(config)


def check_config(config) -> None:
    check_ppo_config(config)
    if not config.rl.policy_workdir and config.model.kind not in FLAT_KINDS:
        raise ConfigError(f"config key 'model.kind': a fresh policy for PPO in action space is one of "
                          f"{', '.join(FLAT_KINDS)}, got {config.model.kind!r} (OCN / MoE: trainer ppo_options)")


# -----------------------------------------------------------------------------
# The loss of the policy with its value head (`tgjax.models.actor_critic.ActorCritic`).


def rerun(module: ActorCritic, carry, obs: jax.Array, first: jax.Array):
    """The policy over a stored rollout from its saved carry: obs [T, B, ...], first [T, B] ->
    (log_pi [T, B, A], value [T, B]); the carry restarts where `first` (as in the rollout)."""

    def body(carry, xs):
        obs_t, first_t = xs
        carry, log_pi, value = module.step(module.reset(carry, first_t), obs_t)
        return carry, (log_pi, value)

    _, (log_pi, value) = jax.lax.scan(body, carry, (obs, first))
    return log_pi, value


def ppo_loss(module: ActorCritic, carry, rec: dict, advantages: jax.Array, targets: jax.Array, *,
             clip_epsilon: float, value_coef: float, entropy_coef: float):
    """The PPO loss of one minibatch of environments (rec's arrays [T, B, ...], advantages / targets [T, B]):
    (loss, (policy loss, value loss, entropy)); every step is a decision (mask 1)."""
    distrax = rl_library("distrax")

    log_pi, value = rerun(module, carry, rec["obs"], rec["first"])
    dist = distrax.Categorical(logits=log_pi)
    log_ratio = (dist.log_prob(rec["action"]) - rec["log_pi_old"]).reshape(-1)
    adv = advantages.reshape(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg = masked_clipped_loss(log_ratio, adv, jnp.ones_like(adv), clip_epsilon)
    v = jnp.mean((value - targets) ** 2)
    entropy = jnp.mean(dist.entropy())
    return pg + value_coef * v - entropy_coef * entropy, (pg, v, entropy)


def plain_gae(rewards, discounts, values, gae_lambda):
    """`smdp_advantages` with every step a decision: plain GAE. rewards, discounts [T], values [T + 1] -> [T]."""
    return smdp_advantages(rewards, discounts, jnp.ones(rewards.shape, bool), values, gae_lambda)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class ActionPPOState:
    """params (ActorCritic, pure dict), opt_state, step [], rng uint32 [2], and the rollout's running state:
    env (CraftState of [N] arrays), obs [N, 1075], carry (the policy's, [N, ...] leaves), first [N] bool (next
    step starts an episode)."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array
    env: Any
    obs: jax.Array
    carry: Any
    first: jax.Array


# -----------------------------------------------------------------------------
# The task.


class PPOActionsTask(CraftPPOTask):
    """PPO in action space; see the module docstring (the shared hooks: `craft_ppo.CraftPPOTask`)."""

    name = "ppo_actions"
    default_config = staticmethod(default_config)

    def validate_config(self, config) -> None:
        check_config(config)

    def setup(self, run: RunContext) -> None:
        self.policy_config, self.start_params, self.policy_step = _starting_policy(self.config)
        self.setup_env(run, full_view=self.policy_config.full_view)
        abstract = nnx.eval_shape(lambda: self._actor_critic(nnx.Rngs(0)))
        self.graphdef = nnx.graphdef(abstract)
        self.num_parameters = count_parameters(abstract)
        self.tx = self.optimizer()
        self.setup_placement(self._actor_critic)  # the policy and its value head by their logical axes
        self._rollout = jax.jit(self._make_rollout())
        self._iteration = self.jit_iteration(self._make_iteration())
        self._evaluate = jax.jit(self._make_evaluation())

    def describe_run(self) -> list[str]:
        r = self.config.rl
        start = (f"fine-tuning the behaviour-cloned policy of {r.policy_workdir} (step {self.policy_step})"
                 if r.policy_workdir else "a fresh policy")
        return [f"PPO in action space on task {r.task} ({'dense' if r.dense_reward else 'sparse'} reward): "
                f"{self.policy_config.kind}, {self.num_parameters:,} parameters with the value head, {start}",
                self.iteration_line()]

    def _actor_critic(self, rngs: nnx.Rngs) -> ActorCritic:
        return ActorCritic(self.policy_config, done_action=self.config.rl.ompn_done_action, rngs=rngs)

    # -- state -----------------------------------------------------------------------------

    def _fresh_state(self) -> ActionPPOState:
        r = self.config.rl
        key = jax.random.key(self.config.training.seed)
        param_key, env_key, step_key = jax.random.split(key, 3)
        module = self._actor_critic(nnx.Rngs(params=param_key))
        params = nnx.to_pure_dict(nnx.state(module))
        if self.start_params is not None:
            params["policy"] = self.start_params
        obs, env_state = self.reset_envs(env_key, r.num_envs)
        # the carry's values are never read before the first step resets it (first = True)
        carry = jax.tree.map(jnp.zeros_like, module.init_carry(r.num_envs))
        return ActionPPOState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                              rng=jax.random.key_data(step_key), env=env_state, obs=obs, carry=carry,
                              first=jnp.ones(r.num_envs, bool))

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"policy_workdir": str(self.config.rl.policy_workdir), "policy_step": self.policy_step,
                "kind": self.policy_config.kind, "task": self.config.rl.task, "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        mine = (self.policy_step, self.policy_config.kind, self.config.rl.task)
        theirs = (meta.get("policy_step"), meta.get("kind"), meta.get("task"))
        if theirs != mine:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run (policy step, kind, task "
                              f"{theirs}; now {mine}): use a new --workdir")

    # -- the iteration ---------------------------------------------------------------------

    def _act(self, module: ActorCritic, carry, key):
        """One environment step of every environment; returns the new carry and the record."""
        env_state, obs, policy_carry, first = carry
        policy_carry, log_pi, value = module.step(module.reset(policy_carry, first), obs)
        k_action, k_env = jax.random.split(key)
        action = jax.random.categorical(k_action, log_pi)
        rows = jnp.arange(obs.shape[0])
        obs_next, env_state, reward, terminated, truncated, info = self.step_envs(k_env, env_state, action)
        done = terminated | truncated
        # V of a truncated episode's last observation: the policy stepped on it from the carry it reached
        final_value = final_value_if_truncated(lambda: module.step(policy_carry, info["final_observation"])[2],
                                               truncated, terminated)
        record = {"obs": obs, "first": first, "action": action, "log_pi_old": log_pi[rows, action], "value": value,
                  "reward": reward, "done": done, "success": info["success"] & done, "terminated": terminated,
                  "truncated": truncated, "final_value": final_value}
        return (env_state, obs_next, policy_carry, done), record

    def _make_rollout(self):
        r = self.config.rl
        graphdef = self.graphdef

        def rollout(state: ActionPPOState):
            """(the running state after rl.rollout_steps steps, the records [T, N, ...])."""
            module = nnx.merge(graphdef, state.params)
            key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)

            def body(carry, t):
                return self._act(module, carry, jax.random.fold_in(key, t))

            return jax.lax.scan(body, (state.env, state.obs, state.carry, state.first), jnp.arange(r.rollout_steps))

        return rollout

    def _make_iteration(self):
        r = self.config.rl
        graphdef = self.graphdef
        tx = self.tx
        rollout = self._make_rollout()

        def iteration(state: ActionPPOState):
            key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
            (env_state, obs, policy_carry, first), rec = rollout(state)                # rec: [T, N, ...]
            module = nnx.merge(graphdef, state.params)
            _, _, last_value = module.step(module.reset(policy_carry, first), obs)    # bootstrap V(s_T)
            values = jnp.concatenate([rec["value"], last_value[None]])                # [T + 1, N]
            rewards, discounts = fold_truncation(rec["reward"], rec["terminated"], rec["truncated"],
                                                 rec["final_value"], r.gamma)
            advantages = jax.vmap(plain_gae, in_axes=(1, 1, 1, None), out_axes=1)(
                rewards, discounts, values, r.gae_lambda)
            targets = advantages + rec["value"]
            train_rec = {k: rec[k] for k in ("obs", "first", "action", "log_pi_old")}

            def loss_fn(params, envs):
                pick = lambda a: a[:, envs]  # noqa: E731
                return ppo_loss(nnx.merge(graphdef, params), jax.tree.map(lambda a: a[envs], state.carry),
                                jax.tree.map(pick, train_rec), pick(advantages), pick(targets),
                                clip_epsilon=r.clip_epsilon, value_coef=r.value_coef, entropy_coef=r.entropy_coef)

            params, opt_state, metrics = ppo_update(tx, loss_fn, state.params, state.opt_state, key, r)
            metrics = {**metrics, **rollout_metrics(rec, r)}
            new_state = ActionPPOState(params=params, opt_state=opt_state, step=state.step + 1, rng=state.rng,
                                       env=env_state, obs=obs, carry=policy_carry, first=first)
            return new_state, metrics

        return iteration

    def _make_evaluation(self):
        r = self.config.rl
        n = self.config.evaluation.episodes
        graphdef = self.graphdef

        def evaluate(params, key):
            module = nnx.merge(graphdef, params)
            obs, env_state = self.reset_envs(key, n)
            carry = (env_state, obs, module.init_carry(n), jnp.ones(n, bool))
            # an ended episode is not restarted (its steps no longer count)
            return evaluation_episodes(lambda carry, k: self._act(module, carry, k), carry, key, n, r.max_steps)

        return evaluate

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.policy_config.num_actions}


def _policy_config(config) -> tuple[CraftPolicyConfig, int | None, dict | None]:
    """(the RL policy's config (num_tasks 1), the BC checkpoint's step, its meta), the last two None when fresh."""
    r = config.rl
    if not r.policy_workdir:
        m = config.model
        fresh = CraftPolicyConfig(kind=m.kind, num_tasks=1, hidden_size=m.hidden_size, num_slots=m.num_slots,
                                  ompn_pointer=m.ompn_pointer)
        return fresh, None, None
    chosen, meta = find_bc_checkpoint(r.policy_workdir, r.policy_step, key="rl.policy_workdir", reused=_REUSED)
    bc_config = CraftPolicyConfig.from_record(meta["model"])
    if bc_config.kind not in FLAT_KINDS:
        raise ConfigError(f"rl.policy_workdir {r.policy_workdir}: a {bc_config.kind!r} policy; PPO in action space "
                          f"fine-tunes {' or '.join(FLAT_KINDS)} (OCN / MoE: trainer ppo_options)")
    return dataclasses.replace(bc_config, num_tasks=1), chosen, meta


def _starting_policy(config) -> tuple[CraftPolicyConfig, dict | None, int | None]:
    """(policy config, the policy's starting parameters as a pure dict or None for a fresh one, BC step)."""
    policy_config, chosen, meta = _policy_config(config)
    if chosen is None:
        return policy_config, None, None
    assert meta is not None
    bc = restore_bc_policy(config.rl.policy_workdir, chosen, CraftPolicyConfig.from_record(meta["model"]))
    params = nnx.to_pure_dict(nnx.state(bc, nnx.Param))
    table = FLAT_KINDS[policy_config.kind]
    params[table] = jnp.mean(params[table], axis=0, keepdims=True)  # the unseen task's row: the BC rows' mean
    return policy_config, params, chosen


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: the policy with its value head (the BC run's recorded config, or `model`)."""
    check_config(config)
    pc, chosen, _ = _policy_config(config)
    done_action = config.rl.ompn_done_action
    start = f"fine-tuned from step {chosen}" if chosen is not None else "fresh"
    return ModelInfo(f"ppo_actions {pc.kind} policy with a value head ({start})", pc.num_actions,
                     "tgjax.envs.craft_rules.ACTIONS", dataclasses.asdict(pc),
                     lambda rngs: ActorCritic(pc, done_action=done_action, rngs=rngs))
