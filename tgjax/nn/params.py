"""Parameters with logical axis names, for sharding by rules (MaxText style).

Every parameter carries `logical_axes` metadata (e.g. `("embed", "mlp")`);
`tgjax.train.sharding` maps those names to mesh axes ("data", "model") with
the rules of the config, so one model definition runs data-parallel,
model-parallel or both. Nothing here needs a mesh.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from flax import nnx


def dense_init(in_axis: int | Sequence[int] = 0) -> Callable:
    """Truncated normal with variance 1/fan_in, fan_in over `in_axis`."""
    return nnx.initializers.variance_scaling(1.0, "fan_in", "truncated_normal", in_axis=in_axis, out_axis=-1)


def param(rngs: nnx.Rngs, init: Callable, shape: tuple[int, ...], logical_axes: tuple[str | None, ...],
          dtype=jnp.float32) -> nnx.Param:
    if len(shape) != len(logical_axes):
        raise ValueError(f"shape {shape} and logical axes {logical_axes} disagree")
    return nnx.Param(init(rngs.params(), shape, dtype), logical_axes=tuple(logical_axes))


def logical_axes_tree(state: nnx.State):
    """The `logical_axes` of every parameter of a state, as a tree of tuples (None where absent)."""
    return jax.tree.map(lambda v: getattr(v, "logical_axes", None), state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
