"""Redraw every parameter of an NNX module, for oracle tests that need biases and norms away from their init.

    from tests.nn.randomise import randomise_params
"""

from __future__ import annotations

import jax
from flax import nnx


def randomise_params(module: nnx.Module, seed: int, scale: float) -> None:
    """Every `nnx.Param` of `module` redrawn as `scale` * N(0, 1), in place (initial values often leave biases at
    0 and LayerNorm scales at 1, which would hide a wrong sign or a missing term)."""
    state = nnx.state(module, nnx.Param)
    leaves, treedef = jax.tree.flatten(state)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    nnx.update(module, jax.tree.unflatten(treedef, [scale * jax.random.normal(k, leaf.shape)
                                                    for k, leaf in zip(keys, leaves, strict=True)]))
