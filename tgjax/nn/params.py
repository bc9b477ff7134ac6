"""Parameters with logical axis names, for sharding by rules (MaxText style).

Every parameter carries Flax NNX's own partition metadata, `out_sharding`,
holding logical axis names (e.g. `("embed", "mlp")`), so that
`nnx.get_partition_spec` reads them and transforms keep them right (`nnx.vmap`
/ `nnx.scan` with `transform_metadata={nnx.PARTITION_NAME: "layers"}` insert
and remove a stacked-layer axis). `tgjax.train.sharding` maps the names to mesh
axes ("data", "model") with the rules of the config, so one model definition
runs data-parallel, model-parallel or both.

Nothing here needs a mesh: parameters are not sharded when they are created
(`eager_sharding=False`); the trainer places them with `jit(out_shardings=...)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx


def dense_init(in_axis: int | Sequence[int] = 0) -> Callable:
    """Truncated normal with variance 1/fan_in, fan_in over `in_axis`."""
    return nnx.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=-1)


def logical(*axes: str | None) -> dict:
    """The metadata that gives a Flax layer's parameter (`nnx.Linear(kernel_metadata=...)`) logical axis names."""
    return {"out_sharding": tuple(axes), "eager_sharding": False}


def param(rngs: nnx.Rngs, init: Callable, shape: tuple[int, ...], logical_axes: tuple[str | None, ...],
          dtype=jnp.float32) -> nnx.Param:
    if len(shape) != len(logical_axes):
        raise ValueError(f"shape {shape} and logical axes {logical_axes} disagree")
    return nnx.Param(init(rngs.params(), shape, dtype), out_sharding=tuple(logical_axes), eager_sharding=False)


def count_parameters(model: nnx.Module | Callable[[], nnx.Module]) -> int:
    """How many numbers the `nnx.Param` variables of `model` hold (batch statistics, RNG state and caches not counted).

    `model` is a module, or a constructor such as `lambda: Model(config, rngs=nnx.Rngs(0))`, which is
    built abstractly (`nnx.eval_shape`: shapes only, nothing allocated).
    """
    if not isinstance(model, nnx.Module):
        model = nnx.eval_shape(model)
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))
