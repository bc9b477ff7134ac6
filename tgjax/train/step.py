"""The one place gradients are computed: the trainer's train step, and the gradient update it is made of.

    step = make_train_step(graphdef, family.loss, tx)
    state, metrics = step(state, rest, batch)          # jitted by the caller, `state` donated

`state` is a `tgjax.train.params_state.ParamsState` (parameters as a pure
dict, optimiser state, step, the base RNG key, and the family's extras);
`rest` is the model's other NNX state (RNG streams, constants). Each step
merges the model, reseeds its RNG streams from the step's key, takes
`value_and_grad` of the family's loss, and applies the optax update
(clipping is part of `tx`, `optax.clip_by_global_norm`; the learning rate
lives in the optimiser state, `optax.inject_hyperparams`, so a checkpoint
holds it with the rest).

Where a family truly differs, it says so through a named hook of
`make_train_step`, not a step of its own:

    carry=True          recurrent state across batches (the treebank LM's Transformer-XL memory, ON-LSTM's
                        hidden state across BPTT windows): the loss takes `state.carry` and returns the next,
                        which the step stores (no gradient flows across batches)
    average=fn          averaged parameters (ON-LSTM's NT-ASGD): `fn(state.average, params before, params after,
                        batch, host)` gives the next `state.average`
    applied_rate=fn     a learning rate decided outside the optimiser (ON-LSTM's, scaled per batch by its BPTT
                        length): `tx` gives the update's direction and the step applies
                        `params - fn(state, batch, host) * direction` (a plateau schedule needs no hook: its
                        rate lives in the optimiser state, `tgjax.train.schedules.plateau_optimizer`)
    skip_update_unless  a metric's name: a batch where it is 0 (nothing to predict) leaves the parameters and
                        optimiser state as they were (Adam would still move them along its momentum)
    draw_key_at         which count the step's key folds in: "step" (this step, 1-based; a resumed run draws
                        what an uninterrupted one draws) or "updates_done" (the count before this update; the
                        treebank LM, ON-LSTM and Ordered Memory draw so, which keeps their recorded numbers)

A loop of updates inside one trainer step (PPO's epochs of minibatches over a
rollout) calls `gradient_update`, the step's core, in its scan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tgjax.train.params_state import ParamsState

# loss(model, batch, key) -> (scalar loss, {name: scalar}); the model is in training mode, its RNG streams reseeded
# from `key` (the step's key), which the loss may also split for draws of its own (masking, explicit dropout).
# With the carry hook: loss(model, batch, key, carry) -> (scalar loss, {name: scalar}, next carry).
LossFn = Callable[..., tuple]

DRAW_KEY_AT = ("step", "updates_done")


def merged_model(graphdef: nnx.GraphDef, params: Any, rest: Any, key: jax.Array | None = None) -> nnx.Module:
    """The model of `params` and `rest`; with `key`, every RNG stream of the model reseeded from it.

    `rest` is copied leaf by leaf (fresh Variables), so that a stream may advance its counter inside
    whatever transform (grad, jit) this runs under without touching the caller's `rest`.
    """
    states = (params,) if rest is None else (params, jax.tree.map(lambda x: x, rest))
    model = nnx.merge(graphdef, *states)
    if key is not None:
        tags = sorted({variable.tag for _, variable in nnx.to_flat_state(nnx.state(model, nnx.RngKey))})
        if tags:  # one key per stream tag ("dropout", ...); a scanned model's stacked streams get one each
            nnx.reseed(model, policy="match_shape", **{tag: jax.random.fold_in(key, i) for i, tag in enumerate(tags)})
    return model


def learning_rate_of(opt_state: Any) -> jax.Array | None:
    """The learning rate an `optax.inject_hyperparams` optimiser state holds (searched through chains)."""
    found = []

    def visit(node):
        hyperparams = getattr(node, "hyperparams", None)
        if isinstance(hyperparams, dict) and "learning_rate" in hyperparams:
            found.append(hyperparams["learning_rate"])
        elif isinstance(node, (tuple, list)):
            for child in node:
                visit(child)

    visit(opt_state)
    return found[0] if found else None


def gradient_update(objective: Callable, params: Any, opt_state: Any, tx: optax.GradientTransformation,
                    learning_rate: jax.Array | None = None) -> tuple[Any, Any, jax.Array, Any, jax.Array]:
    """One optimiser update on the gradient of `objective(params) -> (scalar loss, aux)`.

    Without `learning_rate` the optax update is applied as it is; with one, `tx` gives the update's direction and
    the parameters move by `-learning_rate * direction`. Returns (params, opt_state, loss, aux, gradient norm
    before clipping).
    """
    (loss, aux), grads = jax.value_and_grad(objective, has_aux=True)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    if learning_rate is None:
        new_params = optax.apply_updates(params, updates)
    else:
        new_params = jax.tree.map(lambda p, u: p - learning_rate * u, params, updates)
    return new_params, opt_state, loss, aux, optax.tree.norm(grads)


def make_train_step(graphdef: nnx.GraphDef, loss_fn: LossFn, tx: optax.GradientTransformation, *,
                    applied_rate: Callable | None = None,
                    learning_rate_schedule: Callable | None = None, carry: bool = False,
                    average: Callable | None = None, skip_update_unless: str | None = None,
                    draw_key_at: str = "step") -> Callable:
    """`(state, rest, batch, host=None) -> (state, metrics)`, not jitted; the hooks are in the module docstring.

    `host`: whatever the task hands each step from the host (ON-LSTM's "is ASGD on" flag), read by
    `applied_rate` and `average`. `learning_rate_schedule(step count before the
    update)`: the rate to report, for a `tx` that schedules its own rate without `optax.inject_hyperparams`.

    metrics: the family's own, and `loss` (the objective, unless the family reports its own `loss`),
    `grad_norm` (before clipping), `learning_rate` (the rate this
    step applied, when the optimiser state, the host or the schedule says), `rows` (the batch's global rows).
    """
    if draw_key_at not in DRAW_KEY_AT:
        raise ValueError(f"draw_key_at must be one of {DRAW_KEY_AT}, got {draw_key_at!r}")

    def train_step(state: ParamsState, rest: Any, batch: dict[str, jax.Array], host=None):
        step = state.step + 1
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), step if draw_key_at == "step" else state.step)

        def objective(params):
            model = merged_model(graphdef, params, rest, key)
            if carry:
                loss, metrics, next_carry = loss_fn(model, batch, key, state.carry)
                return loss, (metrics, next_carry)
            loss, metrics = loss_fn(model, batch, key)
            return loss, (metrics, None)

        learning_rate = None if applied_rate is None else applied_rate(state, batch, host)
        params, opt_state, loss, (metrics, next_carry), grad_norm = gradient_update(
            objective, state.params, state.opt_state, tx, learning_rate)
        if skip_update_unless is not None:
            updating = metrics[skip_update_unless] > 0
            params, opt_state = jax.tree.map(lambda new, old: jnp.where(updating, new, old),
                                             (params, opt_state), (state.params, state.opt_state))
        if learning_rate is None:
            learning_rate = (learning_rate_schedule(state.step) if learning_rate_schedule is not None
                             else learning_rate_of(opt_state))  # inject_hyperparams: the rate of the update just made
        next_average = (state.average if average is None
                        else average(state.average, state.params, params, batch, host))
        rows = jax.tree.leaves(batch)[0].shape[0]  # global rows of this step (for rows/s)
        # A family may report as "loss" something other than its objective (ON-LSTM: the cross-entropy,
        # without the activation penalties); otherwise "loss" is the objective.
        metrics = {"loss": loss, **metrics, "grad_norm": grad_norm, "rows": rows}
        if learning_rate is not None:
            metrics["learning_rate"] = learning_rate
        next_carry = jax.lax.stop_gradient(next_carry) if carry else state.carry
        return ParamsState(params, opt_state, step, state.rng, next_carry, next_average), metrics

    if applied_rate is not None:
        return train_step

    def train_step_at_scheduled_rate(state: ParamsState, rest: Any, batch: dict[str, jax.Array]):
        return train_step(state, rest, batch)

    # Compilation logs and profiles name the jitted function: the same name either way.
    train_step_at_scheduled_rate.__name__ = train_step_at_scheduled_rate.__qualname__ = "train_step"
    return train_step_at_scheduled_rate
