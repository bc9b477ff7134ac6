"""The training state most tasks need, replicated over the mesh: parameters, optimiser state, step, RNG key.

A task whose model is data-parallel only (the CFL, classification, MLM and
Pushdown tasks) keeps one `ParamsState` and builds it here:

    state = init_params_state(build_model, tx, seed, replicated)   # a fresh run
    target = abstract_params_state(abstract_params, tx, replicated) # what a checkpoint restores into

`build_model(rngs)` makes the task's NNX model; the parameters are its
`nnx.Param`s as a pure dict (what the jitted step differentiates and orbax
saves). The seed gives two keys: one initialises the parameters, the other
(`rng`, stored as raw uint32 key data so that orbax saves it) is the base key
the step folds the step number into for dropout and masking, so a resumed run
draws what an uninterrupted one draws.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Sharding


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class ParamsState:
    """params (pure dict), optimiser state, step (int32 []), rng (uint32 [2]: the base key of the step's draws)."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array


def abstract_params(build_model: Callable[[nnx.Rngs], nnx.Module]) -> dict:
    """The model's parameters as `jax.ShapeDtypeStruct`s (a pure dict), without allocating them."""
    abstract = nnx.eval_shape(lambda: build_model(nnx.Rngs(params=0, dropout=0)))
    params = nnx.split(abstract, nnx.Param, ...)[1]
    return jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(params))


def init_params_state(build_model: Callable[[nnx.Rngs], nnx.Module], tx: optax.GradientTransformation,
                      seed: int, sharding: Sharding) -> ParamsState:
    """A fresh state: parameters from `seed`'s first key, the step's base key from its second, all on `sharding`."""
    param_key, step_key = jax.random.split(jax.random.key(seed))

    def init():
        model = build_model(nnx.Rngs(params=param_key, dropout=0))
        return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])

    params = jax.jit(init, out_shardings=sharding)()
    opt_state = jax.jit(tx.init, out_shardings=sharding)(params)
    return ParamsState(params, opt_state, jax.device_put(jnp.zeros((), jnp.int32), sharding),
                       jax.device_put(jax.random.key_data(step_key), sharding))


def abstract_params_state(params: dict, tx: optax.GradientTransformation, sharding: Sharding) -> ParamsState:
    """The restore target for `params`' shapes (`abstract_params`): every leaf a ShapeDtypeStruct on `sharding`."""
    shapes = ParamsState(params, jax.eval_shape(tx.init, params), jax.ShapeDtypeStruct((), jnp.int32),
                         jax.ShapeDtypeStruct((2,), jnp.uint32))
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes)
