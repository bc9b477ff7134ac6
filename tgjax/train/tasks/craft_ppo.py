"""What the two Craft PPO trainers share: `ppo_options` (a fresh controller over frozen options) and
`ppo_actions` (a flat LSTM / OMPN policy, whole).

* `apply_config_argument`: the arguments both RL configs take (task letters, "dense", "cpu").
* `check_ppo_config`: the rl / training / evaluation keys both read (the task, counts >= 1, minibatches
  dividing the environments).
* `ppo_update`: the update of one PPO iteration, `rl.num_epochs` epochs of `rl.num_minibatches` minibatches of
  environments (each epoch a fresh permutation), a step of the optimiser per minibatch on the gradient of a
  loss of (params, env indices); `rollout_metrics`: what a rollout's records add to the train record.
* `evaluation_episodes`: the validation's fixed episodes run to `rl.max_steps` (return, success rate);
  `evaluation_keys`: the two fixed sets of them, one to select the best checkpoint on, one held out to report.
* `fold_truncation`: the rewards and discounts GAE reads, a time-limit truncation bootstrapped from the value
  of the episode's final observation rather than treated as terminal.
* `find_bc_checkpoint` and `restore_bc_policy`: the craft_bc run both reuse (`rl.options_workdir`'s options,
  `rl.policy_workdir`'s flat policy), its step chosen and checked and its parameters restored.
* `CraftPPOTask`: the trainer hooks that do not depend on the agent (the state's init / abstract / resume and its
  placement on the mesh, the empty batches, the metrics window, the constant learning rate, the validation); a
  subclass adds the agent, its rollout step and loss, the checkpoint meta and the opening lines.

The state is placed on the mesh as every family's is (`tgjax.train.params_state`): the agent's parameters by the
logical axes their metadata declares (the Craft cells' "hidden" width over "model" with the default rules), each
Adam moment as its parameter; the rollout's running state (environments, observations, recurrent carries) split
over "data" along its environments (`rl.num_envs` must divide over it); step and key replicated. The jitted
iteration takes and returns the state in those shardings, so `mesh.model > 1` splits the policy and
`mesh.data > 1` the environments, and one device computes what it always did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tgjax.data.batching import EpochBatches
from tgjax.envs import craft_rules as rules
from tgjax.models.ocn import CraftPolicyConfig, build_policy
from tgjax.train import sharding as shd
from tgjax.train.config import ConfigError
from tgjax.train.metrics import SummingWindow
from tgjax.train.params_state import ParamsLayout, params_layout, with_shardings
from tgjax.train.schedules import StepSchedule
from tgjax.train.step import gradient_update
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals


def apply_config_argument(config, word: str) -> bool:
    """One argument word of configs/ocn_craft_rl.py or lstm_craft_rl.py, if it is one they share: the task's
    letters (`rl.task`), "dense" (`rl.dense_reward`) or "cpu" (the README's scale: 60 iterations, evaluated and
    checkpointed every 10). Returns whether `word` was one of them."""
    if word == "dense":
        config.rl.dense_reward = True
    elif word == "cpu":
        config.training.num_steps = 60
        config.evaluation.interval_steps = config.checkpointing.interval_steps = 10
        config.logging.interval_steps = 2
    elif word and all(letter in rules.SUBTASK_LETTERS for letter in word):
        config.rl.task = word
    else:
        return False
    return True


def check_ppo_config(config) -> None:
    """The keys both PPO trainers read: rl.task a Craft task, the counts integers >= 1, minibatches dividing
    rl.num_envs (ConfigError naming the key)."""
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
    if not isinstance(r.ompn_done_action, bool):
        raise ConfigError(f"config key 'rl.ompn_done_action' must be True or False, got {r.ompn_done_action!r}")


def fold_truncation(reward: jax.Array, terminated: jax.Array, truncated: jax.Array, final_value: jax.Array,
                    gamma: float) -> tuple[jax.Array, jax.Array]:
    """(rewards, discounts) for GAE (rlax's delta_t = r_t + discount_t V_{t+1} - V_t), arrays [T, N].

    Every episode end cuts the recursion (discount 0), since V_{t+1} is then the next episode's. A truncation
    (the time limit; gymnax reports it apart from termination) is no end of the task: its delta is
    r_t + gamma V(final observation) - V_t, so gamma V(final observation) is folded into its reward. A step that
    both terminates and hits the limit is a termination.
    """
    cut_short = truncated & ~terminated
    rewards = reward + gamma * jnp.where(cut_short, final_value, 0.0)
    discounts = gamma * (1.0 - (terminated | truncated).astype(jnp.float32))
    return rewards, discounts


def final_value_if_truncated(value_of: Callable[[], jax.Array], truncated: jax.Array, terminated: jax.Array
                             ) -> jax.Array:
    """value_of() [N] (the value of each episode's final observation) when some episode was cut short by the
    time limit at this step, else zeros without running it (most steps truncate nothing)."""
    cut_short = truncated & ~terminated
    return jax.lax.cond(jnp.any(cut_short), value_of, lambda: jnp.zeros(truncated.shape, jnp.float32))


def find_bc_checkpoint(workdir: str | Path, step, key: str, reused: str) -> tuple[int, dict]:
    """(step, meta) of a craft_bc run's "best" (validation NLL), "latest" or numbered checkpoint.

    `key` (the config key that named the workdir) and `reused` (what the caller reuses) word the errors
    (ConfigError: no checkpoints, another trainer's run)."""
    from tgjax.train.checkpoint import CheckpointStore

    directory = Path(workdir)
    if not (directory / "checkpoints").is_dir():
        raise ConfigError(f"{key} {workdir}: no checkpoints (train configs/ocn_craft.py there first)")
    store = CheckpointStore(directory)
    try:
        latest = store.latest_step()
        if latest is None:
            raise ConfigError(f"{key} {workdir}: no checkpoints")
        meta = store.read_meta(latest)
        chosen = {"latest": latest, "best": meta.get("best_step") or latest}.get(str(step))
        chosen = int(step) if chosen is None else int(chosen)
        if chosen != latest:
            meta = store.read_meta(chosen)
    finally:
        store.close()
    trainer = (meta.get("config") or {}).get("trainer")
    if trainer != "craft_bc":
        raise ConfigError(f"{key} {workdir}: step {chosen} was written by trainer {trainer!r}, not "
                          f"'craft_bc': {reused}")
    return chosen, meta


def restore_bc_policy(workdir: str | Path, chosen: int, policy_config: CraftPolicyConfig) -> nnx.Module:
    """The policy of a craft_bc run's checkpoint `chosen`, built from `policy_config` (its recorded one):
    parameters only (an orbax partial restore; the optimizer state is not read)."""
    import orbax.checkpoint as ocp

    abstract = nnx.eval_shape(lambda: build_policy(policy_config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    target = {"params": jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(state))}
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    restored = ocp.PyTreeCheckpointer().restore(
        (Path(workdir) / "checkpoints" / str(chosen) / "state").resolve(),
        args=ocp.args.PyTreeRestore(item=target, partial_restore=True,
                                    restore_args=jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device),
                                                              target)))
    nnx.replace_by_pure_dict(state, restored["params"])
    return nnx.merge(graphdef, state)


def ppo_update(tx: optax.GradientTransformation, loss_fn: Callable, params, opt_state, key: jax.Array, rl):
    """`rl.num_epochs` epochs of `rl.num_minibatches` minibatches of the `rl.num_envs` environments (the order
    permuted by fold_in(key, 10000 + epoch)); per minibatch one `tx` step (`tgjax.train.step.gradient_update`, the
    trainer step's core) on the gradient of `loss_fn(params, envs) -> (loss, (policy loss, value loss, entropy))`,
    envs [num_envs / num_minibatches] int.

    Returns (params, opt_state, metrics): the last minibatch's loss, the other parts' means over all minibatches.
    """

    def epoch(carry, e):
        order = jax.random.permutation(jax.random.fold_in(key, 10_000 + e), rl.num_envs)

        def minibatch(carry, envs):
            params, opt_state = carry
            params, opt_state, loss, parts, _ = gradient_update(lambda p: loss_fn(p, envs), params, opt_state, tx)
            return (params, opt_state), (loss, *parts)

        return jax.lax.scan(minibatch, carry, order.reshape(rl.num_minibatches, -1))

    (params, opt_state), (loss, pg, v, entropy) = jax.lax.scan(epoch, (params, opt_state),
                                                               jnp.arange(rl.num_epochs))
    metrics = {"loss": loss[-1, -1], "policy_loss": pg.mean(), "value_loss": v.mean(), "entropy": entropy.mean()}
    return params, opt_state, metrics


def rollout_metrics(rec: dict, rl) -> dict[str, jax.Array]:
    """The train record's sums over a rollout's records ([T, N] "done", "success", "reward")."""
    return {"episodes": rec["done"].astype(jnp.float32).sum(), "successes": rec["success"].astype(jnp.float32).sum(),
            "sum_rewards": rec["reward"].sum(), "env_steps": jnp.float32(rl.rollout_steps * rl.num_envs)}


def evaluation_keys(seed: int) -> tuple[jax.Array, jax.Array]:
    """(selection key, held-out key): the two fixed episode sets of every validation, from `training.seed`. The
    best checkpoint is chosen on the first; the second, different maps never selected on, is the one to report
    (a set chosen on is an optimistic estimate of itself)."""
    base = jax.random.key(seed + 7)
    return jax.random.fold_in(base, 0), jax.random.fold_in(base, 1)


def evaluation_episodes(act: Callable, carry: tuple, key: jax.Array, n: int, max_steps: int):
    """(mean return, success rate) of n episodes stepped by `act(carry, key) -> (carry, record)` for max_steps
    steps (step t's key fold_in(key, t + 1)); `carry`'s last entry is `first` [n] bool, the records have
    "reward", "terminated" and "done" [n]. An episode counts until it ends and is not restarted: `first` is set
    False after every step (the agent is not re-asked)."""

    def body(loop, t):
        carry, alive, returns, success = loop
        carry, rec = act(carry, jax.random.fold_in(key, t + 1))
        returns = returns + alive * rec["reward"]
        success = success | (alive & rec["terminated"])
        alive = alive & ~rec["done"]
        return ((*carry[:-1], jnp.zeros_like(carry[-1])), alive, returns, success), None

    final, _ = jax.lax.scan(body, (carry, jnp.ones(n, bool), jnp.zeros(n), jnp.zeros(n, bool)), jnp.arange(max_steps))
    return final[2].mean(), final[3].astype(jnp.float32).mean()


class CraftPPOTask:
    """The trainer hooks both PPO tasks share (one trainer step = one PPO iteration).

    A subclass sets `name` (and `extra_ratios`, window ratios of its own metrics), and defines
    `validate_config`, `setup`, `describe_run`, `_fresh_state` (the state from training.seed: a dataclass with
    `params`, `opt_state`, `step`, `rng` and the rollout's running state), `checkpoint_meta`, `check_checkpoint`
    and `result_fields`. Its `setup` calls `setup_env`, sets `tx` (`optimizer()`), calls `setup_placement` (with
    its agent's constructor) and sets `_iteration` ((state, *frozen) -> (state, metrics), jitted by
    `jit_iteration`) and `_evaluate` ((params, *frozen, key) -> (mean return, success rate), jitted), where
    `frozen` holds the arrays they read besides the state (none here; ppo_options' frozen options, placed by
    their own logical axes).
    """

    selection = Selection("valid_return", "max")
    schedule = StepSchedule()
    extra_ratios: dict[str, tuple[str, str | None]] = {}
    frozen: tuple = ()

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)

    def check_mesh(self, mesh) -> None:
        # the rollout's running state is split over "data" along the environments
        shd.check_batch_divides(self.config.rl.num_envs, mesh, "rl.num_envs")

    def setup_env(self, run: RunContext, *, full_view: bool = False) -> None:
        """self.run, and the rl.task environment (`env`, `env_params`)."""
        from tgjax.envs.craft import Craft

        self.run = run
        r = self.config.rl
        self.env = Craft((r.task,), full_view=full_view)
        self.env_params = self.env.params(r.task, dense_reward=r.dense_reward, max_steps=r.max_steps)

    def learning_rate_schedule(self) -> optax.Schedule:
        """The learning rate by optimizer update: linearly from `training.learning_rate` to 0 over every update of
        the run (num_steps iterations x rl.num_epochs x rl.num_minibatches)."""
        r = self.config.rl
        updates = self.num_steps * r.num_epochs * r.num_minibatches
        return optax.linear_schedule(self.config.training.learning_rate, 0.0, updates)

    def optimizer(self) -> optax.GradientTransformation:
        """Adam with the gradient norm clipped, at `learning_rate_schedule`."""
        return optax.chain(optax.clip_by_global_norm(self.config.training.clip_grad_norm),
                           optax.adam(self.learning_rate_schedule()))

    def reset_envs(self, key: jax.Array, n: int):
        """(obs [n, ...], env state) of n fresh episodes."""
        return jax.vmap(self.env.reset_env, in_axes=(0, None))(jax.random.split(key, n), self.env_params)

    def step_envs(self, key: jax.Array, env_state, action: jax.Array):
        """One step of every environment (auto-resetting): (obs, env state, reward, terminated, truncated, info)."""
        return jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(jax.random.split(key, action.shape[0]), env_state,
                                                                 action, self.env_params)

    def iteration_line(self) -> str:
        """describe_run's line on the iteration's size."""
        r = self.config.rl
        return (f"{r.num_envs} environments x {r.rollout_steps} steps per iteration, {r.num_epochs} epochs of "
                f"{r.num_minibatches} minibatches")

    # -- state -----------------------------------------------------------------------------

    def _fresh_state(self) -> Any:
        raise NotImplementedError

    def setup_placement(self, build_model: Callable[[nnx.Rngs], nnx.Module]) -> None:
        """`layout` (the agent's parameters by their logical axes under the config's rules, `build_model(rngs)`
        its constructor) and `state_shardings` (the state's: parameters and moments by `layout`, the rollout's
        running state [num_envs, ...] split over "data", step and key replicated). After `tx` is set."""
        mesh = self.run.mesh
        self.layout: ParamsLayout = params_layout(build_model, mesh, shd.config_rules(self.config))
        placed = self.layout.state_shardings(self.tx)
        whole = shd.replicated(mesh)

        def running(leaf) -> jax.sharding.NamedSharding:  # split along the environments where they divide
            if not leaf.ndim:
                return whole
            return jax.sharding.NamedSharding(mesh, shd.fit_spec(jax.sharding.PartitionSpec("data"), leaf.shape,
                                                                 mesh, what="rollout state"))

        shapes = jax.eval_shape(self._fresh_state)
        for field in ("params", "opt_state"):
            mine, theirs = jax.tree.structure(getattr(shapes, field)), jax.tree.structure(getattr(placed, field))
            if mine != theirs:
                raise ValueError(f"{self.name}: the state's {field} {mine} are not laid out as the agent's "
                                 f"parameters {theirs}")
        self.state_shapes = shapes
        self.state_shardings = dataclasses.replace(jax.tree.map(running, shapes), params=placed.params,
                                                   opt_state=placed.opt_state, step=whole, rng=whole)

    def frozen_shardings(self) -> tuple:
        """The shardings of `frozen` (none here)."""
        return ()

    def jit_iteration(self, iteration: Callable) -> Callable:
        """`iteration` ((state, *frozen) -> (state, metrics)) jitted with the state in and out in
        `state_shardings` (its buffers donated), `frozen` in theirs, the metrics replicated."""
        return jax.jit(iteration, donate_argnums=(0,),
                       in_shardings=(self.state_shardings, *self.frozen_shardings()),
                       out_shardings=(self.state_shardings, shd.replicated(self.run.mesh)))

    def init_state(self):
        # computed as on one device, then placed: a 1-device run's numbers are those of any mesh's
        return jax.device_put(self._fresh_state(), self.state_shardings), None

    def abstract_state(self):
        return with_shardings(self.state_shapes, self.state_shardings)

    def restored_rest(self):
        return None

    def resume_from(self, meta: dict) -> None:
        pass

    # -- trainer hooks ------------------------------------------------------------------------

    def batches(self, position: dict | None) -> EpochBatches:
        """The rollout makes its own data: an endless epoch 0 of empty batches. Its position is the trainer's
        {"epoch" (always 0), "step"}, which the checkpoint store checks on restore (with {"step"} alone every
        PPO checkpoint was refused as corrupt and the run started again from step 0)."""
        return EpochBatches(lambda epoch: grain.MapDataset.range(1).repeat().map(lambda _: {}), position)

    def make_train_step(self):
        iteration, frozen = self._iteration, self.frozen
        schedule, r = self.learning_rate_schedule(), self.config.rl

        def train_step(state, rest, batch):
            # the rate of this iteration's first update (state.step iterations of epochs x minibatches before it)
            rate = schedule(state.step * r.num_epochs * r.num_minibatches)
            state, metrics = iteration(state, *frozen)
            return state, {**metrics, "learning_rate": rate}

        return train_step

    def new_window(self) -> SummingWindow:
        # losses are means per step (iteration); environment steps are the "tokens" of tokens/s
        return SummingWindow(ratios={"loss": ("loss", None), "policy_loss": ("policy_loss", None),
                                     "value_loss": ("value_loss", None), "entropy": ("entropy", None),
                                     "success_rate": ("successes", "episodes"),
                                     "reward_per_episode": ("sum_rewards", "episodes"), **self.extra_ratios},
                             tokens="env_steps", totals={"episodes": "episodes"})


    def has_validation(self) -> bool:
        return True

    def evaluate(self, state, rest) -> Evaluation:
        """The selection episodes rank the checkpoint; the held-out ones (other maps) are recorded to report."""
        select_key, heldout_key = evaluation_keys(self.config.training.seed)  # the same episodes each time
        mean_return, success = (float(v) for v in self._evaluate(state.params, *self.frozen, select_key))
        heldout_return, heldout_success = (float(v) for v in self._evaluate(state.params, *self.frozen,
                                                                            heldout_key))
        return Evaluation(values={"valid_return": mean_return},
                          record={"return": mean_return, "success_rate": success,
                                  "heldout_return": heldout_return, "heldout_success_rate": heldout_success,
                                  "episodes": self.config.evaluation.episodes},
                          message=f"return {mean_return:.3f}, success rate {success:.3f} (selection episodes); "
                                  f"held out: return {heldout_return:.3f}, success rate {heldout_success:.3f}")

    def summary(self, result) -> str | None:
        return None
