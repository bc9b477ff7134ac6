"""The training state most tasks need: parameters, optimiser state, step, RNG key, placed on the mesh.

A task keeps one `ParamsState` and builds it here:

    layout = params_layout(build_model, mesh, rules)                # shapes and shardings, nothing allocated
    state = init_params_state(build_model, tx, seed, layout)        # a fresh run
    target = abstract_params_state(layout, tx)                      # what a checkpoint restores into
    rest = model_rest(build_model, seed, replicated)                # the model's other state (RNG streams)

or, after `params_layout`, inherits the last three as the trainer's state methods from `ParamsStateTask`.

`build_model(rngs)` makes the task's NNX model; the parameters are its
`nnx.Param`s as a pure dict (what the jitted step differentiates and orbax
saves). Each parameter is placed by its logical axis names (NNX partition
metadata, `tgjax.nn.params.param`) through the config's rules, and each Adam
moment like its parameter (`tgjax.train.sharding`): with `mesh.model > 1` the
marked dimensions are split over "model", the rest replicated.

The seed gives two keys: one initialises the parameters, the other
(`rng`, stored as raw uint32 key data so that orbax saves it) is the base key
the step folds the step number into for dropout and masking, so a resumed run
draws what an uninterrupted one draws.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from tgjax.train import sharding as shd


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class ParamsState:
    """The trainer's state of a family (checkpointed whole).

    params: pure dict of parameter arrays (`nnx.to_pure_dict` layout).
    opt_state: the optax state (moments shaped like `params`, counts, an injected learning rate).
    step: int32 [], updates done.
    rng: uint32 [2], raw key data of the base key of the step's draws.
    carry: the family's recurrent state across batches (the carry hook of `tgjax.train.step`: the treebank
      LM's Transformer-XL memory [K, B, M, d], ON-LSTM's hidden state), or None.
    average: averaged parameters (the averaging hook: ON-LSTM's ASGD iterate mean and its count), or None.
    """

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array
    carry: Any = None
    average: Any = None


@dataclasses.dataclass(frozen=True)
class ParamsLayout:
    """A model's parameters on a mesh, before any is allocated.

    `shapes` and `shardings` are pure dicts shaped like `nnx.to_pure_dict` of
    the parameters (`jax.ShapeDtypeStruct`s; `NamedSharding`s by the logical
    axes and the rules); `variables` is the abstract `nnx.Param` state, whose
    metadata the optimiser state's shardings are read from.
    """

    shapes: dict
    shardings: dict
    variables: nnx.State
    mesh: Mesh
    rules: Any

    @property
    def num_parameters(self) -> int:
        return int(sum(math.prod(s.shape) for s in jax.tree.leaves(self.shapes)))

    @property
    def replicated(self) -> NamedSharding:
        return shd.replicated(self.mesh)

    def opt_state_shardings(self, tx: optax.GradientTransformation) -> Any:
        """Each moment sharded as its parameter; counts and scalars replicated."""
        return shd.opt_state_shardings(tx, self.variables, self.mesh, self.rules)

    def partition_specs(self) -> dict[str, tuple[tuple[int, ...], Any]]:
        """"path/to/param" -> (shape, its `PartitionSpec` on the mesh), in the parameters' order."""
        flat = jax.tree_util.tree_flatten_with_path(self.shardings)[0]
        shapes = jax.tree.leaves(self.shapes)
        name = lambda path: "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        return {name(path): (tuple(shape.shape), sharding.spec) for (path, sharding), shape in zip(flat, shapes)}

    def state_shardings(self, tx: optax.GradientTransformation) -> ParamsState:
        """The `ParamsState` of shardings (the jitted steps' in and out shardings)."""
        return ParamsState(self.shardings, self.opt_state_shardings(tx), self.replicated, self.replicated)


def params_layout(build_model: Callable[[nnx.Rngs], nnx.Module], mesh: Mesh, rules) -> ParamsLayout:
    """The model's parameter shapes and shardings under `rules` on `mesh`, without allocating them."""
    abstract = nnx.eval_shape(lambda: build_model(nnx.Rngs(params=0, dropout=0)))
    variables = nnx.split(abstract, nnx.Param, ...)[1]
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(variables))
    return ParamsLayout(shapes, shd.param_shardings(variables, mesh, rules), variables, mesh, rules)


def init_params_state(build_model: Callable[[nnx.Rngs], nnx.Module], tx: optax.GradientTransformation,
                      seed: int, layout: ParamsLayout) -> ParamsState:
    """A fresh state: parameters from `seed`'s first key, the step's base key from its second, placed by `layout`.

    The parameters are initialised directly in their shardings (no full copy on one device first).
    """
    param_key, step_key = jax.random.split(jax.random.key(seed))
    shardings = layout.state_shardings(tx)

    def init():
        model = build_model(nnx.Rngs(params=param_key, dropout=0))
        return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])

    params = jax.jit(init, out_shardings=shardings.params)()
    opt_state = jax.jit(tx.init, out_shardings=shardings.opt_state)(params)
    return ParamsState(params, opt_state, jax.device_put(jnp.zeros((), jnp.int32), shardings.step),
                       jax.device_put(jax.random.key_data(step_key), shardings.rng))


def model_rest(build_model: Callable[[nnx.Rngs], nnx.Module], seed: int, sharding: NamedSharding) -> Any:
    """The model's state other than its parameters (dropout RNG streams from `seed`, constants), placed by
    `sharding`: the same for a fresh and a resumed run, since the step reseeds the streams every step."""
    model = build_model(nnx.Rngs(params=0, dropout=seed))
    return jax.device_put(nnx.split(model, nnx.Param, ...)[2], sharding)


def abstract_params_state(layout: ParamsLayout, tx: optax.GradientTransformation) -> ParamsState:
    """The restore target: every leaf of a `ParamsState` a ShapeDtypeStruct with its sharding."""
    shapes = ParamsState(layout.shapes, jax.eval_shape(tx.init, layout.shapes), jax.ShapeDtypeStruct((), jnp.int32),
                         jax.ShapeDtypeStruct((2,), jnp.uint32))
    return with_shardings(shapes, layout.state_shardings(tx))


class ParamsStateTask:
    """The trainer's state methods (`tgjax.train.task.Task`) for a task whose state is one `ParamsState`.

    The task defines `_build(rngs)` (its model) and sets `self.layout` (`params_layout`), `self.tx` and, when
    its model keeps state beside the parameters, `self.replicated` in its setup. `model_has_rest = False`: the
    step rebuilds nothing but the parameters (no dropout RNG streams to carry), so the rest is None.
    """

    model_has_rest = True

    def init_state(self):
        return init_params_state(self._build, self.tx, self.config.training.seed, self.layout), self.restored_rest()

    def abstract_state(self):
        return abstract_params_state(self.layout, self.tx)

    def restored_rest(self):
        if not self.model_has_rest:
            return None
        return model_rest(self._build, self.config.training.seed, self.replicated)


def with_shardings(shapes: Any, shardings: Any) -> Any:
    """`jax.ShapeDtypeStruct`s of `shapes` carrying the matching leaf of `shardings` (a same-shaped tree)."""
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)
