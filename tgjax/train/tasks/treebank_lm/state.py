"""The treebank LM's state on the mesh and its jitted steps (functional Flax NNX).

The model is split once, `graphdef, params, rest = nnx.split(model, nnx.Param, ...)`:
`params` (a pure dict of arrays) is what the optimiser updates; `rest` holds
the model's constants (position tables) and its dropout RNG streams. The
state is the trainer's `ParamsState`, whose carry is each row's
Transformer-XL memory `[K, B, M, d]`; the train step is the trainer's one
step (`tgjax.train.step`) with this family's loss and hooks: the memory
carried across batches, no update on a batch without prediction events, the
dropout key folded from the updates done so far. Shardings are explicit on
every input and output.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from tgjax.models import TransformerLM, sequence_loss
from tgjax.models.parts import ModelParts
from tgjax.syntax import token_types as tt
from tgjax.train import sharding as shd
from tgjax.train import step as trainer_step
from tgjax.train.params_state import ParamsState

# The treebank LM's state: a `ParamsState` whose `carry` is the memory (the name the family's code reads).
TrainState = ParamsState


class StateShardings(NamedTuple):
    state: TrainState  # a TrainState of NamedShardings
    rest: NamedSharding
    batch: NamedSharding
    memory: NamedSharding


def _abstract_params(parts: ModelParts) -> dict:
    """`jax.ShapeDtypeStruct` of every parameter, as a pure dict."""
    return jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(parts.abstract_params))


def _initialisation_rng():
    """The RNG setting parameters are drawn under.

    Threefry in its non-partitionable form: the values are the same for any
    sharding either way, and XLA:CPU compiles the partitionable form about
    ten times slower (seconds per parameter shape), for a function that runs
    once. Dropout in the train step keeps JAX's default (partitionable).
    """
    return jax.threefry_partitionable(False)


def _initialiser(parts: ModelParts, seed: int):
    """`() -> (params as a pure dict, rest)` drawing from `seed`, and the base key of the step RNG."""
    param_key, dropout_key, step_key = jax.random.split(jax.random.key(seed), 3)

    def init():
        model = TransformerLM(parts.config, rngs=nnx.Rngs(params=param_key, dropout=dropout_key))
        _, params, rest = nnx.split(model, nnx.Param, ...)
        return nnx.to_pure_dict(params), rest

    return init, step_key


def init_rest(parts: ModelParts, shardings: StateShardings, seed: int) -> nnx.State:
    """The model's non-parameter state (position tables, dropout streams), replicated.

    The same for a fresh and a resumed run: dropout streams are reseeded every
    step from the TrainState's rng, and the rest is constant. (XLA drops the
    unused parameter draws.)
    """
    init, _ = _initialiser(parts, seed)
    with _initialisation_rng():
        return jax.jit(lambda: init()[1], out_shardings=shardings.rest)()


def init_train_state(parts: ModelParts, tx: optax.GradientTransformation, mesh: Mesh, rules, *,
                     seed: int, batch_size: int) -> tuple[TrainState, nnx.State, StateShardings]:
    """Initialises parameters (directly in their shardings), optimiser state and empty memory.

    Returns the state, the model's `rest` (constants and RNG streams,
    replicated) and the shardings the steps are compiled with.
    """
    shardings = state_shardings(parts, tx, mesh, rules)
    init, step_key = _initialiser(parts, seed)
    with _initialisation_rng():
        params, rest = jax.jit(init, out_shardings=(shardings.state.params, shardings.rest))()
    opt_state = jax.jit(tx.init, out_shardings=shardings.state.opt_state)(params)
    state = TrainState(
        params=params,
        opt_state=opt_state,
        step=jax.device_put(jnp.zeros((), jnp.int32), shardings.state.step),
        rng=jax.device_put(jax.random.key_data(step_key), shardings.state.rng),
        carry=empty_memory(parts, batch_size, shardings),
    )
    return state, rest, shardings


def state_shardings(parts: ModelParts, tx: optax.GradientTransformation, mesh: Mesh, rules) -> StateShardings:
    """Shardings of the train state (parameters by their NNX partition metadata, Adam moments alike), `rest`,
    batch, memory."""
    params = shd.param_shardings(parts.abstract_params, mesh, rules)
    opt_state = shd.opt_state_shardings(tx, parts.abstract_params, mesh, rules)
    replicated = shd.replicated(mesh)
    state = TrainState(params=params, opt_state=opt_state, step=replicated, rng=replicated,
                       carry=shd.memory_sharding(mesh))
    return StateShardings(state, replicated, shd.batch_sharding(mesh), shd.memory_sharding(mesh))


def abstract_train_state(parts: ModelParts, tx: optax.GradientTransformation, shardings: StateShardings,
                         batch_size: int) -> TrainState:
    """`jax.ShapeDtypeStruct`s (with shardings) of a TrainState: the target a checkpoint restores into."""
    c = parts.config
    pure = _abstract_params(parts)
    shapes = TrainState(
        params=pure,
        opt_state=jax.eval_shape(tx.init, pure),
        step=jax.ShapeDtypeStruct((), jnp.int32),
        rng=jax.ShapeDtypeStruct((2,), jnp.uint32),
        carry=jax.ShapeDtypeStruct((c.num_layers, batch_size, c.memory_length, c.d_model), jnp.float32),
    )
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings.state)


def sequence_nll(model: TransformerLM, batch, key, memory):
    """The family's loss for the trainer's step: (mean NLL per prediction event, metrics, the next memory).

    Metrics: `sum_nll`, `num_events`, `num_tokens` (non-padding inputs).
    """
    logits, next_memory = model(batch, memory, deterministic=False)
    total, events = sequence_loss(logits, batch)
    metrics = {"sum_nll": total, "num_events": events, "num_tokens": jnp.sum(batch["inputs_ttypes"] != tt.PAD)}
    return total / jnp.maximum(events, 1), metrics, next_memory


def make_train_step(parts: ModelParts, tx: optax.GradientTransformation, schedule, shardings: StateShardings):
    """`train_step(state, rest, batch) -> (state, metrics)`, jitted with explicit shardings; `state` is donated.

    The trainer's step (`tgjax.train.step`) with the loss `sequence_nll`, the memory as its carry, and the
    dropout key `fold_in(rng, updates done)`. Metrics (replicated scalars): `loss` (mean negative
    log-likelihood per prediction event over the global batch), `sum_nll`, `num_events`, `num_tokens`,
    `grad_norm` (before clipping), `learning_rate` (the one this update used), `rows`.

    A batch without prediction events (e.g. an epoch's last step holding only
    the segment of a sentence's final closing non-terminal, which predicts
    nothing) leaves parameters and optimiser state as they were: its gradient
    is zero, but Adam would still move the parameters along its momentum and
    count the step. Memory and the step counter advance as usual.
    """
    train_step = trainer_step.make_train_step(
        parts.graphdef, sequence_nll, tx, learning_rate_schedule=schedule, carry=True,
        skip_update_unless="num_events", draw_key_at="updates_done")
    return jax.jit(
        train_step,
        in_shardings=(shardings.state, shardings.rest, shardings.batch),
        out_shardings=(shardings.state, shardings.rest),
        donate_argnums=(0,),
    )


def make_eval_step(parts: ModelParts, shardings: StateShardings):
    """`eval_step(params, rest, batch, memory) -> (sum_nll, num_events, new_memory)`, deterministic."""

    def eval_step(params, rest, batch, memory):
        model = trainer_step.merged_model(parts.graphdef, params, rest)
        logits, new_memory = model(batch, memory, deterministic=True)
        total, events = sequence_loss(logits, batch)
        return total, events, new_memory

    return jax.jit(
        eval_step,
        in_shardings=(shardings.state.params, shardings.rest, shardings.batch, shardings.memory),
        out_shardings=(shardings.rest, shardings.rest, shardings.memory),
        donate_argnums=(3,),
    )


def empty_memory(parts: ModelParts, batch_size: int, shardings: StateShardings) -> jax.Array:
    c = parts.config
    return jax.jit(lambda: jnp.zeros((c.num_layers, batch_size, c.memory_length, c.d_model), jnp.float32),
                   out_shardings=shardings.memory)()
