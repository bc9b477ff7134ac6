"""The train step the trainer compiles for a plug-in family: merge, reseed, `value_and_grad`, clip, optax update.

    step = make_train_step(graphdef, family.loss, tx)
    state, metrics = step(state, rest, batch)          # jitted by the caller, `state` donated

`state` is a `tgjax.train.params_state.ParamsState` (parameters as a pure
dict, optimiser state, step, the base RNG key); `rest` is the model's other
NNX state (RNG streams, constants). Step s (1-based, as the trainer counts)
draws from `fold_in(rng, s)`, so a resumed run draws what an uninterrupted
one draws. Clipping is part of `tx` (`optax.clip_by_global_norm`); the
learning rate lives in the optimiser state (`optax.inject_hyperparams`), so a
checkpoint holds it with the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
from flax import nnx

from tgjax.train.params_state import ParamsState

# loss(model, batch, key) -> (scalar loss, {name: scalar}); the model is in training mode, its RNG streams reseeded
# from `key` (the step's key: fold_in(rng, step)), which the loss may also split for draws of its own (masking).
LossFn = Callable[[nnx.Module, dict[str, jax.Array], jax.Array], tuple[jax.Array, dict[str, jax.Array]]]


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


def make_train_step(graphdef: nnx.GraphDef, loss_fn: LossFn, tx: optax.GradientTransformation, *,
                    host_learning_rate: bool = False, learning_rate_schedule: Callable | None = None) -> Callable:
    """`(state, rest, batch) -> (state, metrics)`, not jitted; with `host_learning_rate`,
    `(state, rest, batch, learning_rate) -> ...`: `tx` gives the update's direction and the step applies
    `params - learning_rate * direction` (a plateau schedule decides the rate on the host between steps).
    `learning_rate_schedule(step count before the update)`: the rate to report, for a `tx` that schedules its
    own rate without `optax.inject_hyperparams`.

    metrics: the family's own, and `loss`, `grad_norm` (before clipping), `learning_rate` (the rate this
    step applied, when the optimiser state or the host holds one), `rows` (the batch's global rows).
    """

    def train_step(state: ParamsState, rest: Any, batch: dict[str, jax.Array], learning_rate=None):
        step = state.step + 1
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng), step)

        def objective(params):
            return loss_fn(merged_model(graphdef, params, rest, key), batch, key)

        (loss, metrics), grads = jax.value_and_grad(objective, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        if host_learning_rate:
            params = jax.tree.map(lambda p, u: p - learning_rate * u, state.params, updates)
        else:
            params = optax.apply_updates(state.params, updates)
            learning_rate = (learning_rate_schedule(state.step) if learning_rate_schedule is not None
                             else learning_rate_of(opt_state))  # inject_hyperparams: the rate of the update just made
        rows = jax.tree.leaves(batch)[0].shape[0]  # global rows of this step (for rows/s)
        metrics = {**metrics, "loss": loss, "grad_norm": optax.tree.norm(grads), "rows": rows}
        if learning_rate is not None:
            metrics["learning_rate"] = learning_rate
        return ParamsState(params, opt_state, step, state.rng), metrics

    if host_learning_rate:
        return train_step

    def train_step_at_scheduled_rate(state: ParamsState, rest: Any, batch: dict[str, jax.Array]):
        return train_step(state, rest, batch)

    # Compilation logs and profiles name the jitted function: the same name either way.
    train_step_at_scheduled_rate.__name__ = train_step_at_scheduled_rate.__qualname__ = "train_step"
    return train_step_at_scheduled_rate
