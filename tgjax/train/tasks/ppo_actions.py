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
checkpoint, parameters restored as `ppo_options._load_one` does) is
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
  as `ppo_options`' controller shares its cell with its head.

One trainer step is one PPO iteration, as in `ppo_options`: a rollout of
`rl.num_envs` auto-resetting environments for `rl.rollout_steps` steps (the
policy's carry restarted from its initial state at each episode's first
step; a truncated episode is treated as terminal); advantages by
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
(`evaluation.episodes` fixed episodes, sampled actions; the selection is
the mean return).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.models.ocn import CraftPolicyConfig, LSTMPolicy, OrderedMemoryPolicy, build_policy
from tgjax.models.parts import count_parameters
from tgjax.train import sharding as shd
from tgjax.train.config import ConfigError, to_json_dict
from tgjax.train.metrics import SummingWindow
from tgjax.train.schedules import StepSchedule
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals
from tgjax.train.tasks import ppo_options
from tgjax.train.tasks.ppo_options import (
    _NoBatches,
    _options_checkpoint,
    _restore_policy,
    masked_clipped_loss,
    smdp_advantages,
)

#: the flat policies this trainer fine-tunes, and each one's per-task initial-state table
FLAT_KINDS = {"lstm": "carry_init", "ompn": "task_embedding"}
_REUSED = "PPO in action space fine-tunes a behaviour-cloned LSTM or OMPN policy"


def default_config() -> ml_collections.ConfigDict:
    """Every key this task and the trainer read (configs/lstm_craft_rl.py sets the run's): `ppo_options`' with
    rl.policy_workdir / rl.policy_step in place of the options' keys, and a `model` section for a fresh policy."""
    config = ppo_options.default_config().to_dict()
    config["trainer"] = "ppo_actions"
    rl = {k: v for k, v in config["rl"].items() if k not in ("options_workdir", "options_step")}
    config["rl"] = {"policy_workdir": "", "policy_step": "best", **rl}
    # read only when rl.policy_workdir is "" (a fresh policy); a fine-tuned one keeps its BC run's settings
    config["model"] = dict(kind="lstm", hidden_size=128, num_slots=3)
    return ml_collections.ConfigDict(config)


def check_config(config) -> None:
    r = config.rl
    try:
        rules.parse_task(r.task)
    except rules.CraftTaskError as error:
        raise ConfigError(f"config key 'rl.task': {error}") from None
    for path in ("rl.num_envs", "rl.rollout_steps", "rl.num_epochs", "rl.num_minibatches", "rl.max_steps",
                 "training.num_steps", "evaluation.interval_steps", "evaluation.episodes",
                 "checkpointing.interval_steps", "logging.interval_steps"):
        section, key = path.split(".")
        value = config[section][key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"config key {path!r} must be an integer >= 1, got {value!r}")
    if r.num_envs % r.num_minibatches:
        raise ConfigError(f"config key 'rl.num_minibatches' ({r.num_minibatches}) must divide rl.num_envs "
                          f"({r.num_envs})")
    if not r.policy_workdir and config.model.kind not in FLAT_KINDS:
        raise ConfigError(f"config key 'model.kind': a fresh policy for PPO in action space is one of "
                          f"{', '.join(FLAT_KINDS)}, got {config.model.kind!r} (OCN / MoE: trainer ppo_options)")


# -----------------------------------------------------------------------------
# The policy with its value head, and the loss.


class ActorCritic(nnx.Module):
    """policy (LSTMPolicy or OrderedMemoryPolicy, num_tasks 1: the RL task's row); value head w_v [H], b_v."""

    def __init__(self, config: CraftPolicyConfig, *, rngs: nnx.Rngs):
        if config.kind not in FLAT_KINDS:
            raise ValueError(f"ActorCritic is for the flat policies {tuple(FLAT_KINDS)}, got kind {config.kind!r}")
        self.policy = build_policy(config, rngs)
        self.w_v = nnx.Param(jnp.zeros((config.hidden_size,)))
        self.b_v = nnx.Param(jnp.zeros(()))

    def init_carry(self, batch: int):
        return self.policy.init_carry(jnp.zeros((batch,), jnp.int32))

    def reset(self, carry, first: jax.Array):
        """The carry, restarted from the initial state in the rows where `first` [B] (an episode starts)."""
        init = self.init_carry(first.shape[0])
        return jax.tree.map(lambda i, c: jnp.where(first.reshape(first.shape + (1,) * (c.ndim - 1)), i, c),
                            init, carry)

    def hidden(self, carry) -> jax.Array:
        """[B, H]: the LSTM's h, OMPN's output slot (the lowest memory slot after the step)."""
        if isinstance(self.policy, LSTMPolicy):
            return carry[1]
        assert isinstance(self.policy, OrderedMemoryPolicy)
        return carry.memory[:, -1]

    def step(self, carry, obs: jax.Array):
        """obs [B, 1075] (or its live features) -> (carry, log_pi [B, A], value [B])."""
        carry, out = self.policy.step(carry, obs)
        return carry, out.log_pi, self.hidden(carry) @ self.w_v[...] + self.b_v[...]


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
    import distrax

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


class PPOActionsTask:
    """PPO in action space; see the module docstring."""

    name = "ppo_actions"
    selection = Selection("valid_return", "max")
    schedule = StepSchedule()

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)

    def validate_config(self, config) -> None:
        check_config(config)

    def check_mesh(self, mesh) -> None:
        pass  # one device: the rollout is small and sequential

    def setup(self, run: RunContext) -> None:
        from tgjax.envs.craft import Craft

        self.run = run
        r = self.config.rl
        self.policy_config, self.start_params, self.policy_step = _starting_policy(self.config)
        self.env = Craft((r.task,), full_view=self.policy_config.full_view)
        self.env_params = self.env.params(r.task, dense_reward=r.dense_reward, max_steps=r.max_steps)
        abstract = nnx.eval_shape(lambda: ActorCritic(self.policy_config, rngs=nnx.Rngs(0)))
        self.graphdef = nnx.graphdef(abstract)
        self.num_parameters = count_parameters(abstract)
        t = self.config.training
        updates = self.num_steps * r.num_epochs * r.num_minibatches
        self.tx = optax.chain(optax.clip_by_global_norm(t.clip_grad_norm),
                              optax.adam(optax.linear_schedule(t.learning_rate, 0.0, updates)))
        self._rollout = jax.jit(self._make_rollout())
        self._iteration = jax.jit(self._make_iteration(), donate_argnums=(0,))
        self._evaluate = jax.jit(self._make_evaluation())

    def describe_run(self) -> list[str]:
        r = self.config.rl
        start = (f"fine-tuning the behaviour-cloned policy of {r.policy_workdir} (step {self.policy_step})"
                 if r.policy_workdir else "a fresh policy")
        return [f"PPO in action space on task {r.task} ({'dense' if r.dense_reward else 'sparse'} reward): "
                f"{self.policy_config.kind}, {self.num_parameters:,} parameters with the value head, {start}",
                f"{r.num_envs} environments x {r.rollout_steps} steps per iteration, {r.num_epochs} epochs of "
                f"{r.num_minibatches} minibatches"]

    # -- state -----------------------------------------------------------------------------

    def init_state(self):
        return jax.device_put(self._fresh_state(), shd.replicated(self.run.mesh)), None

    def _fresh_state(self) -> ActionPPOState:
        r = self.config.rl
        key = jax.random.key(self.config.training.seed)
        param_key, env_key, step_key = jax.random.split(key, 3)
        module = ActorCritic(self.policy_config, rngs=nnx.Rngs(params=param_key))
        params = nnx.to_pure_dict(nnx.state(module))
        if self.start_params is not None:
            params["policy"] = self.start_params
        obs, env_state = jax.vmap(self.env.reset_env, in_axes=(0, None))(jax.random.split(env_key, r.num_envs),
                                                                         self.env_params)
        # the carry's values are never read before the first step resets it (first = True)
        carry = jax.tree.map(jnp.zeros_like, module.init_carry(r.num_envs))
        return ActionPPOState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                              rng=jax.random.key_data(step_key), env=env_state, obs=obs, carry=carry,
                              first=jnp.ones(r.num_envs, bool))

    def abstract_state(self):
        state = jax.eval_shape(self._fresh_state)
        sharding = shd.replicated(self.run.mesh)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), state)

    def restored_rest(self):
        return None

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"policy_workdir": str(self.config.rl.policy_workdir), "policy_step": self.policy_step,
                "kind": self.policy_config.kind, "task": self.config.rl.task, "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        mine = (self.policy_step, self.policy_config.kind, self.config.rl.task)
        theirs = (meta.get("policy_step"), meta.get("kind"), meta.get("task"))
        if theirs != mine:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run (policy step, kind, task "
                              f"{theirs}; now {mine}): use a new --workdir")

    def resume_from(self, meta: dict) -> None:
        pass

    # -- the iteration ---------------------------------------------------------------------

    def _act(self, module: ActorCritic, carry, key):
        """One environment step of every environment; returns the new carry and the record."""
        env_state, obs, policy_carry, first = carry
        policy_carry, log_pi, value = module.step(module.reset(policy_carry, first), obs)
        k_action, k_env = jax.random.split(key)
        action = jax.random.categorical(k_action, log_pi)
        rows = jnp.arange(obs.shape[0])
        obs_next, env_state, reward, terminated, truncated, info = jax.vmap(
            self.env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_env, obs.shape[0]), env_state, action,
                                                    self.env_params)
        done = terminated | truncated
        record = {"obs": obs, "first": first, "action": action, "log_pi_old": log_pi[rows, action], "value": value,
                  "reward": reward, "done": done, "success": info["success"] & done, "terminated": terminated}
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
            discounts = r.gamma * (1.0 - rec["done"].astype(jnp.float32))
            advantages = jax.vmap(plain_gae, in_axes=(1, 1, 1, None), out_axes=1)(
                rec["reward"], discounts, values, r.gae_lambda)
            targets = advantages + rec["value"]
            train_rec = {k: rec[k] for k in ("obs", "first", "action", "log_pi_old")}

            def loss_fn(params, envs):
                pick = lambda a: a[:, envs]  # noqa: E731
                return ppo_loss(nnx.merge(graphdef, params), jax.tree.map(lambda a: a[envs], state.carry),
                                jax.tree.map(pick, train_rec), pick(advantages), pick(targets),
                                clip_epsilon=r.clip_epsilon, value_coef=r.value_coef, entropy_coef=r.entropy_coef)

            def epoch(carry, e):
                order = jax.random.permutation(jax.random.fold_in(key, 10_000 + e), r.num_envs)

                def minibatch(carry, envs):
                    params, opt_state = carry
                    (loss, parts), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, envs)
                    updates, opt_state = tx.update(grads, opt_state, params)
                    return (optax.apply_updates(params, updates), opt_state), (loss, *parts)

                return jax.lax.scan(minibatch, carry, order.reshape(r.num_minibatches, -1))

            (params, opt_state), (loss, pg, v, entropy) = jax.lax.scan(
                epoch, (state.params, state.opt_state), jnp.arange(r.num_epochs))
            metrics = {"loss": loss[-1, -1], "policy_loss": pg.mean(), "value_loss": v.mean(),
                       "entropy": entropy.mean(), "episodes": rec["done"].astype(jnp.float32).sum(),
                       "successes": rec["success"].astype(jnp.float32).sum(), "sum_rewards": rec["reward"].sum(),
                       "env_steps": jnp.float32(r.rollout_steps * r.num_envs)}
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
            obs, env_state = jax.vmap(self.env.reset_env, in_axes=(0, None))(jax.random.split(key, n), self.env_params)
            carry = (env_state, obs, module.init_carry(n), jnp.ones(n, bool))

            def body(loop, t):
                carry, alive, returns, success = loop
                (env_state, obs, policy_carry, first), rec = self._act(module, carry, jax.random.fold_in(key, t + 1))
                returns = returns + alive * rec["reward"]
                success = success | (alive & rec["terminated"])
                alive = alive & ~rec["done"]
                # an ended episode is not restarted (its steps no longer count)
                return ((env_state, obs, policy_carry, jnp.zeros_like(first)), alive, returns, success), None

            final, _ = jax.lax.scan(body, (carry, jnp.ones(n, bool), jnp.zeros(n), jnp.zeros(n, bool)),
                                    jnp.arange(r.max_steps))
            return final[2].mean(), final[3].astype(jnp.float32).mean()

        return evaluate

    # -- trainer hooks ------------------------------------------------------------------------

    def batches(self, position: dict | None):
        return _NoBatches(position)

    def make_train_step(self):
        iteration = self._iteration
        rate = jnp.float32(self.config.training.learning_rate)

        def train_step(state, rest, batch):
            state, metrics = iteration(state)
            return state, {**metrics, "learning_rate": rate}

        return train_step

    def new_window(self) -> SummingWindow:
        # losses are means per step (iteration); environment steps are the "tokens" of tokens/s
        return SummingWindow(ratios={"loss": ("loss", None), "policy_loss": ("policy_loss", None),
                                     "value_loss": ("value_loss", None), "entropy": ("entropy", None),
                                     "success_rate": ("successes", "episodes"),
                                     "reward_per_episode": ("sum_rewards", "episodes")},
                             tokens="env_steps", totals={"episodes": "episodes"})

    def decay_learning_rate(self) -> float:
        return float(self.config.training.learning_rate)

    def has_validation(self) -> bool:
        return True

    def evaluate(self, state, rest) -> Evaluation:
        key = jax.random.fold_in(jax.random.key(self.config.training.seed + 7), 0)  # the same episodes each time
        mean_return, success = (float(v) for v in self._evaluate(state.params, key))
        return Evaluation(values={"valid_return": mean_return},
                          record={"return": mean_return, "success_rate": success,
                                  "episodes": self.config.evaluation.episodes},
                          message=f"return {mean_return:.3f}, success rate {success:.3f}")

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.policy_config.num_actions}

    def summary(self, result) -> str | None:
        return None


def _policy_config(config) -> tuple[CraftPolicyConfig, int | None, dict | None]:
    """(the RL policy's config (num_tasks 1), the BC checkpoint's step, its meta), the last two None when fresh."""
    r = config.rl
    if not r.policy_workdir:
        m = config.model
        return CraftPolicyConfig(kind=m.kind, num_tasks=1, hidden_size=m.hidden_size, num_slots=m.num_slots), None, None
    chosen, meta = _options_checkpoint(r.policy_workdir, r.policy_step, key="rl.policy_workdir", reused=_REUSED)
    bc_config = CraftPolicyConfig(**meta["model"])
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
    bc = _restore_policy(config.rl.policy_workdir, chosen, CraftPolicyConfig(**meta["model"]))
    params = nnx.to_pure_dict(nnx.state(bc, nnx.Param))
    table = FLAT_KINDS[policy_config.kind]
    params[table] = jnp.mean(params[table], axis=0, keepdims=True)  # the unseen task's row: the BC rows' mean
    return policy_config, params, chosen


def describe(config) -> dict[str, Any]:
    """What `tgjax info` prints: the policy with its value head (the BC run's recorded config, or `model`)."""
    check_config(config)
    pc, chosen, _ = _policy_config(config)
    abstract = nnx.eval_shape(lambda: ActorCritic(pc, rngs=nnx.Rngs(0)))
    start = f"fine-tuned from step {chosen}" if chosen is not None else "fresh"
    return {"model_name": f"ppo_actions {pc.kind} policy with a value head ({start})",
            "num_parameters": count_parameters(abstract), "vocab_size": pc.num_actions,
            "vocab_source": "tgjax.envs.craft_rules.ACTIONS", "model": dataclasses.asdict(pc)}
