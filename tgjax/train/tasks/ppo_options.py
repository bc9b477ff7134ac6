"""RL fine-tuning in option space: frozen options, a fresh controller trained with PPO (`trainer="ppo_options"`).

    tgjax train --config configs/ocn_craft_rl.py --workdir runs/ocn_rl_ACD       # after configs/ocn_craft.py

Thesis §5.3 and Algorithm 4 (released-code.md §5.3): every option of a
behaviour-cloned OCN (or MoE) run (`rl.options_workdir`, its best
checkpoint) is frozen; a new controller (a re-initialised cell over the K
options with its own learned initial state, temperature
`rl.controller_temperature`: the thesis' tau = 10 of imitation by default,
tau = 1 selectable, and a linear value head on its hidden state;
`tgjax.models.actor_critic.Controller`) is trained
with PPO on one unseen, longer task (`rl.task`), with the sparse or the
dense reward. The options act in the thesis' action set (up, down, left,
right, use; the environment ends the task): their DONE is masked out
(`tgjax.models.actor_critic.without_done`), unless `rl.ompn_done_action=True` (OMPN's
release, whose bot ends with DONE).

One trainer step is one PPO iteration:

* rollout: `rl.num_envs` environments for `rl.rollout_steps` steps (gymnax's
  auto-resetting `step`; an episode cut short by the time limit is
  bootstrapped from the controller's value of its final observation,
  gymnax's `final_observation`, `craft_ppo.fold_truncation`). At
  each step the running option, continued from its state, says done with
  probability e (sampled, as Algorithm 4 rolls an option out "until its
  done-signal fires"); at the first step of an episode, or when it fires,
  the controller steps, an option is sampled from its p~, and that option
  restarts from its initial state. The action is sampled from the running
  option. MoE options decide every step ("options run one step").
* advantages: generalised advantage estimation at the environment-step
  level (`rlax.truncated_generalized_advantage_estimation`) with lambda_t =
  1 into steps that are not decisions, so that the advantage at a decision
  is exactly the semi-MDP one: sum_k gamma^k r_{d+k} + gamma^tau V(s_{d+tau})
  - V(s_d), lambda-mixed across decisions; intermediate values cancel.
* loss: `rlax.clipped_surrogate_pg_loss` on the decisions only (ratio 1 and
  advantage 0 elsewhere, rescaled by steps / decisions, which is the mean
  over decisions), squared value error at the decisions, an entropy bonus
  of the controller's `distrax.Categorical`; `rl.num_epochs` epochs of
  `rl.num_minibatches` minibatches of environments, the controller re-run
  over each environment's rollout from its saved state (BPTT through the
  controller's recurrence). Adam, lr linearly to 0 (thesis: lr 3e-4,
  batch 1024 = num_envs x rollout_steps here).
* setting S2 (thesis §5.3: two models' options reused together):
  `rl.options_workdir` names several BC runs separated by commas; their
  options are pooled in that order (`pool_options`) and the controller
  chooses among all of them.
* validation: two fixed sets of `evaluation.episodes` fresh episodes
  (sampled actions and options; `craft_ppo.evaluation_keys`): the return on
  the first selects the best checkpoint, the second (other maps) is held
  out and recorded ("heldout_return", "heldout_success_rate") to report.

The epochs x minibatches update, the validation's episode loop and the trainer
hooks are shared with `ppo_actions` (`tgjax.train.tasks.craft_ppo`). rlax and
distrax (the `rl` extra) are imported inside the functions that use them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.extras import rl_library
from tgjax.models.actor_critic import Controller, without_done
from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy, pool_options
from tgjax.models.parts import count_parameters
from tgjax.nn.ocn import follow_option, option_branches
from tgjax.train import sharding as shd
from tgjax.train.config import ConfigError, family_config, to_json_dict
from tgjax.train.model_info import ModelInfo
from tgjax.train.task import RunContext
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
from tgjax.workdir import split_workdirs


def default_config() -> ml_collections.ConfigDict:
    """Every key this task and the trainer read (configs/ocn_craft_rl.py sets the run's)."""
    return family_config(dict(
        trainer="ppo_options",
        rl=dict(options_workdir="", options_step="best", task="ACD", dense_reward=False, max_steps=64,
                num_envs=16, rollout_steps=64, num_epochs=4, num_minibatches=4, gamma=0.99, gae_lambda=0.95,
                clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01,
                controller_temperature=10.0,  # the fresh controller's tau: the thesis' 10 (imitation's); 1 selectable
                ompn_done_action=False),      # True: DONE stays a choice (OMPN's release); False: the thesis' actions
        training=dict(num_steps=200, learning_rate=3e-4, clip_grad_norm=0.5, seed=1),
        evaluation=dict(interval_steps=20, episodes=64),
    ), checkpointing=dict(interval_steps=20), logging=dict(interval_steps=5), mesh=dict(data=1))


def check_config(config) -> None:
    r = config.rl
    if not r.options_workdir:
        raise ConfigError("config key 'rl.options_workdir': the workdir of a behaviour-cloning run "
                          "(configs/ocn_craft.py) whose options are reused")
    check_ppo_config(config)
    if not r.controller_temperature > 0:
        raise ConfigError(f"config key 'rl.controller_temperature' must be > 0, got {r.controller_temperature!r}")


# -----------------------------------------------------------------------------
# The loss pieces (the controller: `tgjax.models.actor_critic.Controller`).


def smdp_advantages(rewards, discounts, decisions_next, values, gae_lambda):
    """GAE over environment steps, lambda_t = 1 into non-decision steps (module docstring).

    rewards, discounts [T] (reward and discount of the transition out of step t), decisions_next [T] (whether
    step t + 1 is a decision), values [T + 1] -> advantages [T].
    """
    rlax = rl_library("rlax")

    lambdas = jnp.where(decisions_next, gae_lambda, 1.0)
    return rlax.truncated_generalized_advantage_estimation(rewards, discounts, lambdas, values)


def masked_clipped_loss(log_ratio, advantages, mask, epsilon):
    """The clipped surrogate loss averaged over the steps where `mask` is 1 (the decisions). [N] arrays."""
    rlax = rl_library("rlax")

    count = jnp.maximum(jnp.sum(mask), 1.0)
    ratio = jnp.where(mask > 0, jnp.exp(log_ratio), 1.0)
    loss = rlax.clipped_surrogate_pg_loss(ratio, advantages * mask, epsilon)
    return loss * mask.shape[0] / count


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class PPOState:
    """params (controller, pure dict), opt_state, step [], rng uint32 [2], and the rollout's running state:
    env (CraftState of [N] arrays), obs [N, 1075], h_c [N, H], h_o [N, K, H], option [N] int32,
    first [N] bool (next step starts an episode)."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array
    env: Any
    obs: jax.Array
    h_c: jax.Array
    h_o: jax.Array
    option: jax.Array
    first: jax.Array


# -----------------------------------------------------------------------------
# The task.


class PPOOptionsTask(CraftPPOTask):
    """PPO in option space; see the module docstring (the shared hooks: `craft_ppo.CraftPPOTask`)."""

    name = "ppo_options"
    extra_ratios = {"decisions_per_step": ("decisions", "env_steps")}
    default_config = staticmethod(default_config)

    def validate_config(self, config) -> None:
        check_config(config)

    def setup(self, run: RunContext) -> None:
        self.setup_env(run)
        r = self.config.rl
        self.options_policy, self.options_meta = _load_options(r.options_workdir, r.options_step)
        pc = self.options_policy.config
        self.always_decide = pc.kind == "moe"
        self.live = jnp.asarray(rules.live_observation_indices())
        self.controller_args = (pc.input_size, pc.hidden_size, pc.num_options, pc.depth, r.controller_temperature)
        abstract = nnx.eval_shape(lambda: Controller(*self.controller_args, rngs=nnx.Rngs(0)))
        self.graphdef, abstract_state = nnx.split(abstract)
        self.abstract_params = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype),
                                            nnx.to_pure_dict(abstract_state))
        self.num_parameters = count_parameters(abstract)
        self.tx = self.optimizer()
        self.setup_placement(lambda rngs: Controller(*self.controller_args, rngs=rngs))
        # the frozen options placed by their own logical axes too (under this config's rules)
        options_state = nnx.state(self.options_policy, nnx.Param)
        self.options_shardings = shd.variable_shardings(options_state, run.mesh, shd.config_rules(self.config))
        self.options_state = jax.device_put(options_state, self.options_shardings)
        self.frozen = (self.options_state,)  # the jitted iteration's and evaluation's argument after the state
        self._iteration = self.jit_iteration(self._make_iteration())
        self._evaluate = jax.jit(self._make_evaluation())

    def describe_run(self) -> list[str]:
        r = self.config.rl
        return [f"PPO in option space on task {r.task} ({'dense' if r.dense_reward else 'sparse'} reward): "
                f"a fresh controller, {self.num_parameters:,} parameters, over the "
                f"{self.options_policy.config.num_options} frozen {self.options_policy.config.kind} options of "
                f"{r.options_workdir} (step {self.options_meta['step']})", self.iteration_line()]

    def frozen_shardings(self) -> tuple:
        return (self.options_shardings,)

    # -- state -----------------------------------------------------------------------------

    def _fresh_state(self) -> PPOState:
        r = self.config.rl
        key = jax.random.key(self.config.training.seed)
        param_key, env_key, step_key = jax.random.split(key, 3)
        controller = Controller(*self.controller_args, rngs=nnx.Rngs(params=param_key))
        params = nnx.to_pure_dict(nnx.state(controller))
        obs, env_state = self.reset_envs(env_key, r.num_envs)
        H, K = self.options_policy.config.hidden_size, self.options_policy.config.num_options
        state = PPOState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                         rng=jax.random.key_data(step_key), env=env_state, obs=obs,
                         h_c=jnp.zeros((r.num_envs, H)), h_o=jnp.zeros((r.num_envs, K, H)),
                         option=jnp.zeros(r.num_envs, jnp.int32), first=jnp.ones(r.num_envs, bool))
        return state

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"options_workdir": str(self.config.rl.options_workdir), "options_step": self.options_meta["step"],
                "task": self.config.rl.task, "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        if meta.get("options_step") != self.options_meta["step"] or meta.get("task") != self.config.rl.task:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run (options step "
                              f"{meta.get('options_step')}, task {meta.get('task')!r}; now "
                              f"{self.options_meta['step']}, {self.config.rl.task!r}): use a new --workdir")

    # -- the iteration ---------------------------------------------------------------------

    def _act(self, policy, controller, carry, key):
        """One environment step of every environment (module docstring); returns the new carry and the record."""
        env_state, obs, h_c, h_o, option, first = carry
        x = jnp.take(obs, self.live, axis=-1)
        branches = option_branches(policy.options, policy.options.project_observation(x), h_o, policy.h_o_init[...])
        rows = jnp.arange(x.shape[0])
        k_done, k_option, k_action, k_env = jax.random.split(key, 4)
        fires = jax.random.bernoulli(k_done, jax.nn.sigmoid(branches.done_logit[rows, option]))
        decision = first | fires | self.always_decide
        h_from = jnp.where(first[:, None], controller.h_init[...][None], h_c)
        h_c_new, log_p, value = controller(x, h_from)
        new_option = jnp.where(decision, jax.random.categorical(k_option, log_p), option)
        h_c = jnp.where(decision[:, None], h_c_new, h_from)
        h_o, log_pi = follow_option(branches, new_option, decision)
        action = jax.random.categorical(k_action, log_pi if self.config.rl.ompn_done_action else without_done(log_pi))
        obs_next, env_state, reward, terminated, truncated, info = self.step_envs(k_env, env_state, action)
        done = terminated | truncated
        # V of a truncated episode's last observation, as if the controller were asked there (rollout end alike)
        final_value = final_value_if_truncated(
            lambda: controller(jnp.take(info["final_observation"], self.live, axis=-1), h_c)[2], truncated, terminated)
        record = {"obs": x, "decision": decision, "option": new_option, "log_p_old": log_p[rows, new_option],
                  "value": value, "reward": reward, "done": done, "first": first, "success": info["success"] & done,
                  "terminated": terminated, "truncated": truncated, "final_value": final_value, "action": action}
        return (env_state, obs_next, h_c, h_o, new_option, done), record

    def _make_iteration(self):
        distrax = rl_library("distrax")

        r = self.config.rl
        options_graphdef = nnx.graphdef(self.options_policy)
        graphdef = self.graphdef
        tx = self.tx

        def iteration(state: PPOState, options_state):
            policy = nnx.merge(options_graphdef, options_state)
            key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
            controller = _merge(graphdef, state.params)
            carry0 = (state.env, state.obs, state.h_c, state.h_o, state.option, state.first)

            def body(carry, t):
                return self._act(policy, controller, carry, jax.random.fold_in(key, t))

            carry, rec = jax.lax.scan(body, carry0, jnp.arange(r.rollout_steps))      # rec: [T, N, ...]
            # the bootstrap value of the state after the rollout (as if the next step were a decision)
            env_state, obs, h_c, h_o, option, first = carry
            x_last = jnp.take(obs, self.live, axis=-1)
            h_last = jnp.where(first[:, None], controller.h_init[...][None], h_c)
            _, _, last_value = controller(x_last, h_last)
            values = jnp.concatenate([rec["value"], last_value[None]])                 # [T + 1, N]
            rewards, discounts = fold_truncation(rec["reward"], rec["terminated"], rec["truncated"],
                                                 rec["final_value"], r.gamma)
            decisions_next = jnp.concatenate([rec["decision"][1:], jnp.ones((1, r.num_envs), bool)])
            decisions_next = decisions_next | rec["done"]
            advantages = jax.vmap(smdp_advantages, in_axes=(1, 1, 1, 1, None), out_axes=1)(
                rewards, discounts, decisions_next, values, r.gae_lambda)
            targets = advantages + rec["value"]

            def loss_fn(params, envs):
                controller = _merge(graphdef, params)

                def rerun(h, xs):
                    x, decision, first = xs
                    h_from = jnp.where(first[:, None], controller.h_init[...][None], h)
                    h_new, log_p, value = controller(x, h_from)
                    return jnp.where(decision[:, None], h_new, h_from), (log_p, value)

                pick = lambda a: a[:, envs]  # noqa: E731
                _, (log_p, value) = jax.lax.scan(rerun, state.h_c[envs], (pick(rec["obs"]), pick(rec["decision"]),
                                                                         pick(rec["first"])))
                option = pick(rec["option"])
                dist = distrax.Categorical(logits=log_p)
                log_prob = dist.log_prob(option)
                mask = pick(rec["decision"]).astype(jnp.float32).reshape(-1)
                adv = pick(advantages).reshape(-1)
                count = jnp.maximum(jnp.sum(mask), 1.0)
                adv_mean = jnp.sum(adv * mask) / count
                adv_std = jnp.sqrt(jnp.sum(mask * (adv - adv_mean) ** 2) / count) + 1e-8
                adv = (adv - adv_mean) / adv_std
                log_ratio = (log_prob - pick(rec["log_p_old"])).reshape(-1)
                pg = masked_clipped_loss(log_ratio, adv, mask, r.clip_epsilon)
                v = jnp.sum(mask * (value.reshape(-1) - pick(targets).reshape(-1)) ** 2) / count
                entropy = jnp.sum(mask * dist.entropy().reshape(-1)) / count
                return pg + r.value_coef * v - r.entropy_coef * entropy, (pg, v, entropy)

            params, opt_state, metrics = ppo_update(tx, loss_fn, state.params, state.opt_state, key, r)
            metrics = {**metrics, **rollout_metrics(rec, r), "decisions": rec["decision"].astype(jnp.float32).sum()}
            new_state = PPOState(params=params, opt_state=opt_state, step=state.step + 1, rng=state.rng,
                                 env=env_state, obs=obs, h_c=h_c, h_o=h_o, option=option, first=first)
            return new_state, metrics

        return iteration

    def _make_evaluation(self):
        r = self.config.rl
        n = self.config.evaluation.episodes
        options_graphdef = nnx.graphdef(self.options_policy)
        graphdef = self.graphdef

        def evaluate(params, options_state, key):
            policy = nnx.merge(options_graphdef, options_state)
            controller = _merge(graphdef, params)
            obs, env_state = self.reset_envs(key, n)
            H, K = policy.config.hidden_size, policy.config.num_options
            carry = (env_state, obs, jnp.zeros((n, H)), jnp.zeros((n, K, H)), jnp.zeros(n, jnp.int32),
                     jnp.ones(n, bool))
            # an ended episode is not restarted: `first` stays False so the controller is not re-asked
            return evaluation_episodes(lambda carry, k: self._act(policy, controller, carry, k), carry, key, n,
                                       r.max_steps)

        return evaluate

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.options_policy.config.num_options}


def _merge(graphdef, params):
    """The controller module from its pure-dict parameters."""
    return nnx.merge(graphdef, params)


_REUSED = "PPO in option space reuses a behaviour-cloned OCN or MoE"


def _load_one(workdir: str, step) -> tuple[OptionControllerPolicy, int]:
    """The frozen policy of one craft_bc checkpoint: parameters only (an orbax partial restore)."""
    chosen, meta = find_bc_checkpoint(workdir, step, key="rl.options_workdir", reused=_REUSED)
    policy_config = CraftPolicyConfig.from_record(meta["model"])
    if policy_config.kind not in ("ocn", "moe"):
        raise ConfigError(f"rl.options_workdir {workdir}: a {policy_config.kind!r} policy has no options")
    policy = restore_bc_policy(workdir, chosen, policy_config)
    assert isinstance(policy, OptionControllerPolicy)
    return policy, chosen


def _load_options(workdir: str, step) -> tuple[OptionControllerPolicy, dict]:
    """The frozen options of one craft_bc run, or of several pooled (`tgjax.workdir.split_workdirs`);
    meta {"step", "kind"}: step an int for one run, a list of ints for several."""
    workdirs = split_workdirs(workdir)
    loaded = [_load_one(w, step) for w in workdirs]
    try:
        policy = pool_options([p for p, _ in loaded], workdirs)
    except ValueError as error:
        raise ConfigError(f"rl.options_workdir: {error}") from None
    steps = [chosen for _, chosen in loaded]
    return policy, {"step": steps[0] if len(steps) == 1 else steps, "kind": policy.config.kind}


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: the fresh controller's size, from the options runs' recorded policy configs."""
    check_config(config)
    found = [find_bc_checkpoint(w, config.rl.options_step, key="rl.options_workdir", reused=_REUSED)
             for w in split_workdirs(config.rl.options_workdir)]
    configs = [CraftPolicyConfig.from_record(meta["model"]) for _, meta in found]
    pc = dataclasses.replace(configs[0], num_options=sum(c.num_options for c in configs))
    tau = config.rl.controller_temperature
    steps = ", ".join(str(chosen) for chosen, _ in found)
    return ModelInfo(f"ppo_options controller over {pc.kind} options (step {steps})", pc.num_options,
                     "the frozen options", dataclasses.asdict(pc),
                     lambda rngs: Controller(pc.input_size, pc.hidden_size, pc.num_options, pc.depth, tau, rngs=rngs))

