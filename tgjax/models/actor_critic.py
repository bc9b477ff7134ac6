"""The Craft PPO agents' networks: a policy with a linear value head (thesis §5.3, Fig. 5.4).

B is the batch of environments, H the hidden size, A the actions (`craft_rules.NUM_ACTIONS`), K the options,
X the observation's live features (1075, or fewer: `CraftPolicyConfig.live_inputs`).

* `ActorCritic` (trainer `ppo_actions`): a flat policy of `tgjax.models.ocn` (LSTM or OMPN, `FLAT_KINDS`), with
  one initial-state row (the RL task's), and a value head w_v [H], b_v (zeros at the start) on its recurrent
  state after the step: the LSTM's h, OMPN's output slot (the lowest memory slot, the one its actions are read
  from) [choice]. The policy and the head share the recurrent network.

      carry = ac.init_carry(B)                         # the policy's carry, [B, ...] leaves
      carry = ac.reset(carry, first)                   # first [B] bool: rows restarted from the initial state
      carry, log_pi, value = ac.step(carry, obs)       # obs [B, X] -> log_pi [B, A], value [B]

* `Controller` (trainer `ppo_options`): a fresh OCN controller over K frozen options, one cell of
  `tgjax.nn.ocn.CellBank` (temperature tau), its learned initial state h_init [H] and a value head w_v [H], b_v
  on its hidden state.

      h_new, log_p, value = controller(x, h)           # x [B, X], h [B, H] -> [B, H], log p~ [B, K], [B]

* `without_done`: the thesis' action set (up, down, left, right, use; the environment ends the task): a
  policy's log pi [..., A] with DONE made impossible. `ActorCritic(done_action=True)` leaves DONE a choice, as
  OMPN's release does.

The value heads' and hidden states' parameters carry the logical axis "hidden" (`tgjax.nn.params`), so the
trainer places them on the mesh as every family's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.envs import craft_rules as rules
from tgjax.models.ocn import CraftPolicyConfig, LSTMPolicy, OrderedMemoryPolicy, build_policy
from tgjax.nn.ocn import CellBank
from tgjax.nn.ompn import NEVER

__all__ = ["FLAT_KINDS", "ActorCritic", "Controller", "without_done"]

#: the flat policies `ActorCritic` takes, and each one's per-task initial-state table (its parameter's name)
FLAT_KINDS = {"lstm": "carry_init", "ompn": "task_embedding"}


def without_done(log_pi: jax.Array) -> jax.Array:
    """log pi [..., A] over the thesis' actions: DONE (a no-op the environment never asks for) gets log NEVER, the
    others renormalised. A finite NEVER keeps the entropy and the log-ratios finite, and a sample never picks it."""
    return jax.nn.log_softmax(log_pi.at[..., rules.DONE].set(NEVER), axis=-1)


class ActorCritic(nnx.Module):
    """policy (LSTMPolicy or OrderedMemoryPolicy, num_tasks 1: the RL task's row); value head w_v [H], b_v;
    done_action: whether DONE stays among the actions (OMPN's release) or is masked out (the thesis')."""

    def __init__(self, config: CraftPolicyConfig, *, done_action: bool = False, rngs: nnx.Rngs):
        if config.kind not in FLAT_KINDS:
            raise ValueError(f"ActorCritic is for the flat policies {tuple(FLAT_KINDS)}, got kind {config.kind!r}")
        self.done_action = done_action
        self.policy = build_policy(config, rngs)
        self.w_v = nnx.Param(jnp.zeros((config.hidden_size,)), out_sharding=("hidden",), eager_sharding=False)
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
        log_pi = out.log_pi if self.done_action else without_done(out.log_pi)
        return carry, log_pi, self.hidden(carry) @ self.w_v[...] + self.b_v[...]


class Controller(nnx.Module):
    """A fresh controller: cell [1 cell over K options] (tau = `temperature`), h_init [H], value head w_v [H], b_v."""

    def __init__(self, input_size: int, hidden_size: int, num_options: int, depth: int, temperature: float, *,
                 rngs: nnx.Rngs):
        self.cell = CellBank(1, input_size, hidden_size, num_options, depth=depth, temperature=temperature,
                             rngs=rngs)
        hidden = {"out_sharding": ("hidden",), "eager_sharding": False}  # logical axes (tgjax.nn.params.logical)
        self.h_init = nnx.Param(jax.random.normal(rngs.params(), (hidden_size,)) * 0.1, **hidden)
        self.w_v = nnx.Param(jnp.zeros((hidden_size,)), **hidden)
        self.b_v = nnx.Param(jnp.zeros(()))

    def __call__(self, x: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """x [B, X] (live features), h [B, H] -> (h_new [B, H], log p~ [B, K], value [B])."""
        h_new, log_p, _ = self.cell(self.cell.project_observation(x), h[:, None])
        h_new = h_new[:, 0]
        return h_new, log_p[:, 0], h_new @ self.w_v[...] + self.b_v[...]
