"""The Option-Controller Network's cells and its step mixture (thesis ch. 5; released-code.md §5.2).

No OCN code is public and the thesis text lost its equations; this is the
reconstruction of released-code.md §5.2, with the choices below (each tested
against the slow NumPy oracle in tests/nn/test_ocn.py):

* A cell (an option, or the controller) maps (x_t, h_{t-1}) to
  (h_t, pi_t, e_t):  hbar = MLP_L([x_t ; h_{t-1}]) with L = `depth` layers of
  width H and **tanh** activations (the activation was lost; tanh keeps the
  recurrent state bounded), **h_t = hbar**, pi_t = softmax(W_pi hbar / tau)
  (no bias: the thesis names only a matrix), e_t = sigmoid(w_e . hbar + b_e).
* `CellBank` holds K such cells with their own parameters, stacked on a
  leading axis and evaluated together; the first layer's observation part is
  applied separately (`project_observation`) so that a whole sequence's
  projections are one matrix product outside the time loop.
* `ocn_step` is one step of the two-level OCN (eqs. 5.2.8-5.2.17):

    e_t      = sum_i p_{t-1,i} e^i_t                    (options continue from h^{o_i}_{t-1})
    pibar_t  = sum_i p_{t-1,i} pibar^i_t
    (h~^c_t, p~_t) = Controller(x_t, h^c_{t-1})           ("done": the controller steps,
    pihat_t  = sum_i p~_{t,i} pihat^i_t                    the options restart from h^{o_i}_0)
    pi_t     = e_t pihat_t + (1 - e_t) pibar_t
    h^c_t = e_t h~^c_t + (1 - e_t) h^c_{t-1};  p_t = e_t p~_t + (1 - e_t) p_{t-1};
    h^{o_i}_t = e_t hhat^{o_i}_t + (1 - e_t) hbar^{o_i}_t

  The first step is the "done" branch alone (e_1 = 1, eq. 5.2.8-5.2.10), from
  the controller's initial state h^c_0(task). `always_done=True` forces
  e_t = 1 at every step: the MoE baseline (options that run one step).
  Mixtures are computed in log space (logsumexp) so that a confident option
  does not underflow.
* `option_branches` evaluates every option on one observation from both
  states (the two branches above); `follow_option` is Algorithm 4's sampled
  version of the step, used by every rollout (PPO in option space, the
  option x subtask table, the scripted controller): one option is picked,
  and the options restart where it was just chosen and continue elsewhere.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.nn.params import dense_init, param

__all__ = ["CellBank", "OCNState", "OCNStepOutput", "OptionBranches", "follow_option", "ocn_step",
           "option_branches"]

#: log of a probability that is exactly 0 (finite, so that gradients through the mixtures stay finite)
NEVER = -1e9


class CellBank(nnx.Module):
    """K independent cells: MLP of `depth` tanh layers over [x ; h], policy head W_pi / tau, done head.

    Parameters (K = num_cells, X = input_size, H = hidden_size, N = num_outputs):
    w_x [K, X, H], w_h [K, H, H], b_in [K, H]; w_deep [K, depth-1, H, H], b_deep [K, depth-1, H];
    w_pi [K, H, N]; w_e [K, H], b_e [K].
    """

    def __init__(self, num_cells: int, input_size: int, hidden_size: int, num_outputs: int, *, depth: int = 2,
                 temperature: float = 1.0, rngs: nnx.Rngs):
        if depth < 1 or num_cells < 1 or temperature <= 0:
            raise ValueError(f"CellBank needs depth >= 1, num_cells >= 1 and temperature > 0, got depth={depth}, "
                             f"num_cells={num_cells}, temperature={temperature}")
        K, X, H, N = num_cells, input_size, hidden_size, num_outputs
        self.num_cells, self.hidden_size, self.depth, self.temperature = K, H, depth, float(temperature)
        # fan-in of the first layer is X + H (it reads [x ; h]); both parts share that scale
        first = nnx.initializers.variance_scaling(1.0 * X / (X + H), "fan_in", "truncated_normal",
                                                  in_axis=-2, out_axis=-1)
        first_h = nnx.initializers.variance_scaling(1.0 * H / (X + H), "fan_in", "truncated_normal",
                                                    in_axis=-2, out_axis=-1)
        zeros = nnx.initializers.zeros
        self.w_x = param(rngs, first, (K, X, H), ("cells", "obs", "hidden"))
        self.w_h = param(rngs, first_h, (K, H, H), ("cells", "hidden_in", "hidden"))
        self.b_in = param(rngs, zeros, (K, H), ("cells", "hidden"))
        deep_init = dense_init(-2) if depth > 1 else zeros  # depth 1: an empty [K, 0, H, H]
        self.w_deep = param(rngs, deep_init, (K, depth - 1, H, H), ("cells", "layers", "hidden_in", "hidden"))
        self.b_deep = param(rngs, zeros, (K, depth - 1, H), ("cells", "layers", "hidden"))
        self.w_pi = param(rngs, dense_init(-2), (K, H, N), ("cells", "hidden", "outputs"))
        self.w_e = param(rngs, dense_init(-1), (K, H), ("cells", "hidden"))
        self.b_e = param(rngs, zeros, (K,), ("cells",))

    def project_observation(self, x: jax.Array) -> jax.Array:
        """The first layer's observation part: x [..., X] -> [..., K, H] (hoisted out of the time loop)."""
        return jnp.einsum("...x,kxh->...kh", x, self.w_x[...])

    def __call__(self, x_projection: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One step of every cell.

        x_projection [B, K, H] (`project_observation`), h [B, K, H] ->
        (h_new [B, K, H], log_pi [B, K, N] (log-softmax of W_pi h_new / tau), done_logit [B, K]).
        """
        hidden = jnp.tanh(x_projection + jnp.einsum("bkh,khg->bkg", h, self.w_h[...]) + self.b_in[...])
        for layer in range(self.depth - 1):
            hidden = jnp.tanh(jnp.einsum("bkh,khg->bkg", hidden, self.w_deep[:, layer])
                              + self.b_deep[:, layer])
        logits = jnp.einsum("bkh,khn->bkn", hidden, self.w_pi[...]) / self.temperature
        done_logit = jnp.einsum("bkh,kh->bk", hidden, self.w_e[...]) + self.b_e[...]
        return hidden, jax.nn.log_softmax(logits, axis=-1), done_logit


class OCNState(NamedTuple):
    """The OCN's recurrent state: h_c [B, H] (controller), log_p [B, K] (log option probabilities p_{t-1}),
    h_o [B, K, H] (options), first [B] bool (no step taken yet: the next step is the "done" branch alone)."""

    h_c: jax.Array
    log_p: jax.Array
    h_o: jax.Array
    first: jax.Array


class OCNStepOutput(NamedTuple):
    """log_pi [B, A] (the action mixture), log_done [B] (log e_t; 0 at a first step or with always_done),
    log_p [B, K] (p_t after the mixture), log_p_new [B, K] (p~_t, the controller's fresh choice)."""

    log_pi: jax.Array
    log_done: jax.Array
    log_p: jax.Array
    log_p_new: jax.Array


class OptionBranches(NamedTuple):
    """Every option's step on one observation from two states: its running state ("not done": h_cont [B, K, H],
    log_pi_cont [B, K, A], done_logit [B, K], the done read on this observation) and its initial state
    ("done", the option chosen afresh: h_restart [B, K, H], log_pi_restart [B, K, A])."""

    h_cont: jax.Array
    log_pi_cont: jax.Array
    done_logit: jax.Array
    h_restart: jax.Array
    log_pi_restart: jax.Array


def option_branches(options: CellBank, options_x: jax.Array, h_o: jax.Array, h_o_init: jax.Array
                    ) -> OptionBranches:
    """Both branches of every option (one call of the bank over a doubled batch).

    options_x [B, K, H] (`project_observation` of x_t), h_o [B, K, H] (running states), h_o_init [K, H].
    """
    batch = h_o.shape[0]
    h_from = jnp.concatenate([h_o, jnp.broadcast_to(h_o_init, h_o.shape)], axis=0)
    h_all, log_pi_all, done_logit_all = options(jnp.concatenate([options_x, options_x], axis=0), h_from)
    return OptionBranches(h_cont=h_all[:batch], log_pi_cont=log_pi_all[:batch], done_logit=done_logit_all[:batch],
                          h_restart=h_all[batch:], log_pi_restart=log_pi_all[batch:])


def follow_option(branches: OptionBranches, option: jax.Array, chosen: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Algorithm 4's step of the options once an option is picked: where the controller has just `chosen`
    `option` (at a done, or at the start) every option restarts from its initial state, elsewhere every option
    continues; the action comes from `option`'s branch.

    option [B] int, chosen [B] bool -> (h_o [B, K, H], log_pi [B, A]). The sampling around it (the done's
    Bernoulli, the controller's choice) is the caller's: each caller keeps its own random streams.
    """
    rows = jnp.arange(option.shape[0])
    h_o = jnp.where(chosen[:, None, None], branches.h_restart, branches.h_cont)
    log_pi = jnp.where(chosen[:, None], branches.log_pi_restart[rows, option], branches.log_pi_cont[rows, option])
    return h_o, log_pi


def _log_mix(log_weights: jax.Array, log_values: jax.Array) -> jax.Array:
    """log sum_i w_i v_i: log_weights [B, K], log_values [B, K, ...] -> [B, ...]."""
    extra = log_values.ndim - log_weights.ndim
    return jax.nn.logsumexp(log_weights.reshape(log_weights.shape + (1,) * extra) + log_values, axis=1)


def ocn_step(options: CellBank, controller: CellBank, options_x: jax.Array, controller_x: jax.Array,
             state: OCNState, h_o_init: jax.Array, *, always_done: bool = False
             ) -> tuple[OCNState, OCNStepOutput]:
    """One OCN step (module docstring).

    options_x [B, K, H] and controller_x [B, 1, H]: the cells' `project_observation` of x_t;
    h_o_init [K, H]: the options' initial states h^{o_i}_0.
    """
    # the options once from their running states ("not done") and once from their initial states ("done")
    branches = option_branches(options, options_x, state.h_o, h_o_init)
    done_logit = branches.done_logit                                                 # [B, K]

    h_c_new, log_p_new, _ = controller(controller_x, state.h_c[:, None, :])
    h_c_new, log_p_new = h_c_new[:, 0], log_p_new[:, 0]                              # [B, H], [B, K]

    log_e = _log_mix(state.log_p, jax.nn.log_sigmoid(done_logit))                   # [B]
    log_not_e = _log_mix(state.log_p, jax.nn.log_sigmoid(-done_logit))              # [B]
    forced = state.first if not always_done else jnp.ones_like(state.first)
    log_e = jnp.where(forced, 0.0, log_e)
    log_not_e = jnp.where(forced, NEVER, log_not_e)

    log_pi_done = _log_mix(log_p_new, branches.log_pi_restart)                      # [B, A]
    log_pi_cont = _log_mix(state.log_p, branches.log_pi_cont)                       # [B, A]
    log_pi = jnp.logaddexp(log_e[:, None] + log_pi_done, log_not_e[:, None] + log_pi_cont)
    log_p = jnp.logaddexp(log_e[:, None] + log_p_new, log_not_e[:, None] + state.log_p)
    # p_t sums to 1 in exact arithmetic, but s_t = sum p_t follows s_t ~ e + (1 - e) s_{t-1}^2 around 1: an
    # unstable fixed point that turns float rounding into overflow within ~50 steps. Renormalising is the
    # identity on the exact values and pins s_t = 1.
    log_p = log_p - jax.nn.logsumexp(log_p, axis=-1, keepdims=True)

    e = jnp.exp(log_e)
    h_c = e[:, None] * h_c_new + (1 - e[:, None]) * state.h_c
    h_o = e[:, None, None] * branches.h_restart + (1 - e[:, None, None]) * branches.h_cont
    new_state = OCNState(h_c=h_c, log_p=log_p, h_o=h_o, first=jnp.zeros_like(state.first))
    return new_state, OCNStepOutput(log_pi=log_pi, log_done=log_e, log_p=log_p, log_p_new=log_p_new)
