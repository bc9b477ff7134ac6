"""Craft policies: the Option-Controller Network and the thesis' baselines MoE, LSTM and OMPN (thesis ch. 5).

All four share one interface, over a batch of episodes of one task each:

    carry = policy.init_carry(task_ids)                  # task_ids [B] int32
    carry, out = policy.step(carry, obs)                 # obs [B, 1075] -> out.log_pi [B, A], ...
    out = policy(obs, task_ids)                          # obs [B, T, 1075] -> log_pi [B, T, A], ...

* "ocn": K option cells (tau = 1) and one controller cell (tau = 10) over the
  options, the controller's initial state learned per task; the step is
  `tgjax.nn.ocn.ocn_step` (equations and choices there). The options'
  initial states h^{o_i}_0 are learned too (one vector per option, zeros at
  initialisation) [choice: the thesis says only "initial states"].
* "moe": the same network with e_t = 1 at every step: the controller re-mixes
  the options at each step and every option restarts from its initial
  state (thesis §5.3: "options run for only one step, with no termination").
* "lstm": one LSTM layer (hidden H) whose initial (c, h) is learned per
  task, and a linear map to the actions.
* "ompn": the Ordered-Memory policy network (Lu et al., ICLR 2021;
  released-code.md §5.7) with `num_slots` slots of size H: the step is
  `tgjax.nn.ompn.OMPNCell` (equations and choices there). The observation
  is encoded by one linear map (o_t = x W + b, no activation, as in the
  release) and the task by a learned embedding per task id (N(0, 1) at
  initialisation, PyTorch's nn.Embedding) [choice: the release has several
  task encoders]. The pointer is `ompn_pointer`: "stickbreaking" (default,
  what the release's OMStackBot runs) or "softmax" (over sqrt(H)-scaled
  scores). DONE gets p_end, the "end" class of the pointer's distribution;
  log_done is log s_t, s_t = 1 - E_t / n with E_t the expected expansion
  position (OMPN's boundary score, same top-k); log_p is the pointer p_t.

With `task_input=False` every task starts from the first row of that
per-task table, so the policy is not told the task and must infer it from
what it sees (a diagnostic: benchmarks/craft_subtask_value.py).

The observation (1075 features, or already reduced to its live ones: the
BC batches are) enters as `live_inputs` (default): only the features that
can be non-zero in this environment (the window's one-hot kinds that maps
hold, the inventory, the direction; `live_observation_indices`). The
dropped ones are always 0, so the network is the same function as one with
weights on them, and a third of the size.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.envs.craft_rules import live_observation_indices
from tgjax.nn.ocn import CellBank, OCNState, ocn_step
from tgjax.nn.ompn import POINTERS, OMPNCell, OMPNState
from tgjax.nn.params import dense_init, param

POLICIES = ("ocn", "moe", "lstm", "ompn")
__all__ = ["POLICIES", "CraftPolicyConfig", "LSTMPolicy", "OptionControllerPolicy", "OrderedMemoryPolicy",
           "PolicyOutput", "build_policy", "demonstration_scores", "live_observation_indices", "pool_options",
           "teacher_forced"]


@dataclasses.dataclass(frozen=True)
class CraftPolicyConfig:
    kind: str = "ocn"              # one of POLICIES
    num_tasks: int = 1             # rows of the learned initial-state table
    num_options: int = 3           # K (ocn, moe)
    hidden_size: int = 128         # H
    depth: int = 2                 # MLP layers of a cell (ocn, moe)
    num_slots: int = 3             # n, memory slots (ompn)
    ompn_pointer: str = "stickbreaking"  # ompn: the release's OMStackBot pointer; "softmax" the alternative
    controller_temperature: float = 10.0
    option_temperature: float = 1.0
    task_state_init_std: float = 0.1   # OCN: std of the per-task h^c_0 rows at initialisation
    option_done_bias_init: float = 0.0  # OCN: b_e of every option's done head at initialisation (e = σ(b_e) at 0)
    num_actions: int = rules.NUM_ACTIONS
    live_inputs: bool = True
    full_view: bool = False
    task_input: bool = True            # False: every task starts from row 0 (a diagnostic: the task is hidden)

    def __post_init__(self):
        if self.kind not in POLICIES:
            raise ValueError(f"policy kind {self.kind!r}: expected one of {', '.join(POLICIES)}")
        for name in ("num_tasks", "num_options", "hidden_size", "depth", "num_actions", "num_slots"):
            if getattr(self, name) < 1:
                raise ValueError(f"policy {name} must be >= 1, got {getattr(self, name)}")
        if self.controller_temperature <= 0 or self.option_temperature <= 0:
            raise ValueError("policy temperatures must be > 0")
        if self.task_state_init_std < 0:
            raise ValueError(f"policy task_state_init_std must be >= 0, got {self.task_state_init_std}")
        if self.ompn_pointer not in POINTERS:
            raise ValueError(f"policy ompn_pointer {self.ompn_pointer!r}: expected one of {', '.join(POINTERS)}")

    @classmethod
    def from_record(cls, saved: dict) -> CraftPolicyConfig:
        """The config a checkpoint's meta recorded. OMPN runs recorded before `ompn_pointer` existed used the
        softmax pointer (then the only one), not today's default."""
        saved = dict(saved)
        if saved.get("kind") == "ompn":
            saved.setdefault("ompn_pointer", "softmax")
        return cls(**saved)

    def task_rows(self, task_ids: jax.Array) -> jax.Array:
        """[B] rows of the per-task initial-state table: the task ids, or all 0 when the task is hidden."""
        return task_ids if self.task_input else jnp.zeros_like(task_ids)

    @property
    def input_size(self) -> int:
        return len(live_observation_indices(self.full_view)) if self.live_inputs else rules.OBS_SIZE


class PolicyOutput(NamedTuple):
    """log_pi [..., A]; log_done [...] (log e_t: the running option's done probability; 0 for MoE and at the
    first step, and 0 for the LSTM, which has none; for OMPN log s_t, the boundary score of `tgjax.nn.ompn`);
    log_p [..., K] (the option mixture p_t; [..., 1] of zeros for the LSTM; for OMPN the pointer [..., n])."""

    log_pi: jax.Array
    log_done: jax.Array
    log_p: jax.Array


def _inputs(config: CraftPolicyConfig, obs: jax.Array) -> jax.Array:
    """[..., 1075] observations, or [..., input_size] ones already reduced to the live features -> [..., input_size]."""
    if obs.shape[-1] == config.input_size:
        return obs
    if obs.shape[-1] != rules.OBS_SIZE:
        raise ValueError(f"observations of {obs.shape[-1]} features: expected {rules.OBS_SIZE} (the Craft "
                         f"observation) or {config.input_size} (its live features)")
    return jnp.take(obs, jnp.asarray(live_observation_indices(config.full_view)), axis=-1)


class OptionControllerPolicy(nnx.Module):
    """OCN (kind "ocn") or MoE (kind "moe"); see the module docstring.

    options: CellBank of K cells over the actions; controller: CellBank of one cell over the K options;
    h_c_init [num_tasks, H] (h^c_0 per task); h_o_init [K, H] (h^{o_i}_0).
    """

    def __init__(self, config: CraftPolicyConfig, *, rngs: nnx.Rngs):
        if config.kind not in ("ocn", "moe"):
            raise ValueError(f"OptionControllerPolicy is the ocn / moe policy, got kind {config.kind!r}")
        self.config = config
        X, H, K = config.input_size, config.hidden_size, config.num_options
        self.options = CellBank(K, X, H, config.num_actions, depth=config.depth,
                                temperature=config.option_temperature, rngs=rngs)
        self.controller = CellBank(1, X, H, K, depth=config.depth, temperature=config.controller_temperature,
                                   rngs=rngs)
        self.h_c_init = param(rngs, nnx.initializers.normal(config.task_state_init_std), (config.num_tasks, H),
                              ("tasks", "hidden"))
        self.h_o_init = param(rngs, nnx.initializers.zeros, (K, H), ("cells", "hidden"))
        # the thesis does not say how the done head starts; 0 (e ≈ 1/2: options hand back about every other step
        # at first) unless `option_done_bias_init` says otherwise (negative: options that run longer at first)
        self.options.b_e[...] = jnp.full((K,), config.option_done_bias_init, self.options.b_e[...].dtype)

    def init_carry(self, task_ids: jax.Array) -> OCNState:
        batch = task_ids.shape[0]
        K, H = self.config.num_options, self.config.hidden_size
        h_c = self.h_c_init[...][self.config.task_rows(task_ids)]
        return OCNState(h_c=h_c, log_p=jnp.full((batch, K), -jnp.log(K)),
                        h_o=jnp.broadcast_to(self.h_o_init[...], (batch, K, H)),
                        first=jnp.ones((batch,), bool))

    def _step_projected(self, carry: OCNState, options_x, controller_x) -> tuple[OCNState, PolicyOutput]:
        carry, out = ocn_step(self.options, self.controller, options_x, controller_x, carry, self.h_o_init[...],
                              always_done=self.config.kind == "moe")
        return carry, PolicyOutput(out.log_pi, out.log_done, out.log_p)

    def step(self, carry: OCNState, obs: jax.Array) -> tuple[OCNState, PolicyOutput]:
        """obs [B, 1075] -> the next carry and this step's output."""
        x = _inputs(self.config, obs)
        return self._step_projected(carry, self.options.project_observation(x),
                                    self.controller.project_observation(x))

    def __call__(self, obs: jax.Array, task_ids: jax.Array) -> PolicyOutput:
        """obs [B, T, 1075], task_ids [B] -> PolicyOutput with a time axis [B, T, ...]."""
        x = _inputs(self.config, obs)
        # the observation parts of the first layers, for every step at once: [T, B, K, H], [T, B, 1, H]
        options_x = jnp.moveaxis(self.options.project_observation(x), 1, 0)
        controller_x = jnp.moveaxis(self.controller.project_observation(x), 1, 0)

        def body(carry, xs):
            return self._step_projected(carry, *xs)

        _, out = jax.lax.scan(body, self.init_carry(task_ids), (options_x, controller_x))
        return jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1), out)


class LSTMPolicy(nnx.Module):
    """The flat LSTM baseline. lstm: nnx.LSTMCell(X -> H); carry_init [num_tasks, 2, H] ((c, h) per task);
    w_out [H, A], b_out [A]."""

    def __init__(self, config: CraftPolicyConfig, *, rngs: nnx.Rngs):
        if config.kind != "lstm":
            raise ValueError(f"LSTMPolicy is the lstm policy, got kind {config.kind!r}")
        self.config = config
        H = config.hidden_size
        # Logical axes on the gates (input or hidden -> hidden), as `param` gives the rest: split over "model" by
        # the "hidden" rule, the values drawn as before.
        gate = {"out_sharding": (None, "hidden"), "eager_sharding": False}
        self.lstm = nnx.LSTMCell(config.input_size, H, kernel_metadata=gate, recurrent_kernel_metadata=gate,
                                 bias_metadata={"out_sharding": ("hidden",), "eager_sharding": False}, rngs=rngs)
        self.carry_init = param(rngs, nnx.initializers.normal(0.1), (config.num_tasks, 2, H),
                                ("tasks", None, "hidden"))
        self.w_out = param(rngs, dense_init(0), (H, config.num_actions), ("hidden", "outputs"))
        self.b_out = param(rngs, nnx.initializers.zeros, (config.num_actions,), ("outputs",))

    def init_carry(self, task_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
        rows = self.carry_init[...][self.config.task_rows(task_ids)]
        return rows[:, 0], rows[:, 1]

    def step(self, carry, obs: jax.Array) -> tuple[tuple[jax.Array, jax.Array], PolicyOutput]:
        carry, h = self.lstm(carry, _inputs(self.config, obs))
        log_pi = jax.nn.log_softmax(h @ self.w_out[...] + self.b_out[...], axis=-1)
        batch = obs.shape[0]
        return carry, PolicyOutput(log_pi, jnp.zeros((batch,)), jnp.zeros((batch, 1)))

    def __call__(self, obs: jax.Array, task_ids: jax.Array) -> PolicyOutput:
        def body(carry, obs_t):
            return self.step(carry, obs_t)

        _, out = jax.lax.scan(body, self.init_carry(task_ids), jnp.moveaxis(obs, 1, 0))
        return jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1), out)


class OrderedMemoryPolicy(nnx.Module):
    """The OMPN baseline (kind "ompn"). w_obs [X, H], b_obs [H] (the observation encoder);
    task_embedding [num_tasks, H]; cell: `tgjax.nn.ompn.OMPNCell` (n = num_slots)."""

    def __init__(self, config: CraftPolicyConfig, *, rngs: nnx.Rngs):
        if config.kind != "ompn":
            raise ValueError(f"OrderedMemoryPolicy is the ompn policy, got kind {config.kind!r}")
        self.config = config
        X, H = config.input_size, config.hidden_size
        self.w_obs = param(rngs, dense_init(0), (X, H), ("obs", "hidden"))
        self.b_obs = param(rngs, nnx.initializers.zeros, (H,), ("hidden",))
        self.task_embedding = param(rngs, nnx.initializers.normal(1.0), (config.num_tasks, H), ("tasks", "hidden"))
        self.cell = OMPNCell(config.num_slots, H, config.num_actions, pointer=config.ompn_pointer, rngs=rngs)

    def init_carry(self, task_ids: jax.Array) -> OMPNState:
        return self.cell.initial_state(self.task_embedding[...][self.config.task_rows(task_ids)])

    def _encode(self, obs: jax.Array) -> jax.Array:
        return _inputs(self.config, obs) @ self.w_obs[...] + self.b_obs[...]

    def _step_encoded(self, carry: OMPNState, obs_enc: jax.Array) -> tuple[OMPNState, PolicyOutput]:
        carry, out = self.cell(carry, obs_enc)
        return carry, PolicyOutput(out.log_pi, out.log_done, out.log_p)

    def step(self, carry: OMPNState, obs: jax.Array) -> tuple[OMPNState, PolicyOutput]:
        """obs [B, 1075] -> the next carry and this step's output."""
        return self._step_encoded(carry, self._encode(obs))

    def __call__(self, obs: jax.Array, task_ids: jax.Array) -> PolicyOutput:
        """obs [B, T, 1075], task_ids [B] -> PolicyOutput with a time axis [B, T, ...]."""
        encoded = jnp.moveaxis(self._encode(obs), 1, 0)            # [T, B, H], every step at once

        def body(carry, obs_enc):
            return self._step_encoded(carry, obs_enc)

        _, out = jax.lax.scan(body, self.init_carry(task_ids), encoded)
        return jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1), out)


def build_policy(config: CraftPolicyConfig, rngs: nnx.Rngs
                 ) -> OptionControllerPolicy | LSTMPolicy | OrderedMemoryPolicy:
    """The policy `config.kind` names."""
    if config.kind == "lstm":
        return LSTMPolicy(config, rngs=rngs)
    if config.kind == "ompn":
        return OrderedMemoryPolicy(config, rngs=rngs)
    return OptionControllerPolicy(config, rngs=rngs)


def teacher_forced(policy, obs: jax.Array, actions: jax.Array, task_ids: jax.Array
                   ) -> tuple[jax.Array, jax.Array, PolicyOutput]:
    """A policy run over padded demonstration rows obs [B, T, F], actions [B, T], task_ids [B] ->
    (-log pi of each row's action [B, T], whether the argmax action is the row's [B, T] bool, the output).
    The training loss, validation and `tgjax eval craft` all score demonstrations through it."""
    out = policy(obs.astype(jnp.float32), task_ids)
    step_nll = -jnp.take_along_axis(out.log_pi, actions[..., None], axis=-1)[..., 0]
    return step_nll, jnp.argmax(out.log_pi, -1) == actions, out


def demonstration_scores(policy, obs: jax.Array, actions: jax.Array, mask: jax.Array, task_ids: jax.Array
                         ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """What `tgjax.data.craft_episodes.score_episodes` reads of one batch of padded rows (obs [B, T, F],
    actions [B, T], mask [B, T], task_ids [B]): (-log pi of each row's action [B, T], correct argmax actions
    over the mask (a scalar), log done [B, T], the option in use, argmax p_t [B, T]). Validation and
    `tgjax eval craft` both score through it."""
    step_nll, hit, out = teacher_forced(policy, obs, actions, task_ids)
    return step_nll, jnp.sum(mask * hit), out.log_done, jnp.argmax(out.log_p, -1)


# What pooled option sets must share: the options' inputs, widths, depth and temperature, and the controller's
# temperature (a controller over the pool takes it from the runs).
POOLED_MUST_AGREE = ("kind", "input_size", "hidden_size", "depth", "option_temperature", "controller_temperature")


def pool_options(policies: list[OptionControllerPolicy], names: list[str] | None = None) -> OptionControllerPolicy:
    """One policy whose K = sum K_i options are the given policies' options, in order (thesis §5.3, setting S2:
    two models trained on their own task sets, their options reused together under a new controller).

    Only the options (`options`, a CellBank with every parameter on a leading cell axis, and their initial
    states `h_o_init` [K, H]) are pooled; the pooled policy's controller and per-task states are left at
    initialisation, for the caller to replace (PPO trains a fresh controller; the scripted controller of
    `tgjax.infer.craft` reads none). Raises ValueError, naming the two runs (`names`, e.g. their workdirs)
    and the field, when the option sets differ in what they must share (`POOLED_MUST_AGREE`).
    """
    if len(policies) == 1:
        return policies[0]
    names = names or [f"options run {i}" for i in range(len(policies))]
    first = policies[0].config
    for name, policy in zip(names[1:], policies[1:]):
        for field in POOLED_MUST_AGREE:
            mine, theirs = getattr(first, field), getattr(policy.config, field)
            if mine != theirs:
                raise ValueError(f"{names[0]} and {name} cannot be pooled: {field} {mine!r} against {theirs!r}")
    pooled_config = dataclasses.replace(first, num_options=sum(p.config.num_options for p in policies),
                                        num_tasks=1)
    pooled = OptionControllerPolicy(pooled_config, rngs=nnx.Rngs(0))
    banks = [nnx.to_pure_dict(nnx.state(p.options, nnx.Param)) for p in policies]
    options_state = nnx.state(pooled.options, nnx.Param)
    nnx.replace_by_pure_dict(options_state, jax.tree.map(lambda *cells: jnp.concatenate(cells, axis=0), *banks))
    nnx.update(pooled.options, options_state)
    pooled.h_o_init[...] = jnp.concatenate([p.h_o_init[...] for p in policies], axis=0)
    return pooled
