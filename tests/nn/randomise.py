"""Redraw every parameter of an NNX module, for oracle tests that need biases and norms away from their init.

    from tests.nn.randomise import randomise_params, randomised_module
"""

from __future__ import annotations

import functools
from collections.abc import Callable

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


def randomised_module(constructor: Callable, config, seed: int, randomise_seed: int, scale: float) -> nnx.Module:
    """`constructor(config, nnx.Rngs(seed))` with `randomise_params(module, randomise_seed, scale)`, built in one
    compiled program per (constructor, config), the seeds and the scale traced (in eager mode every parameter shape
    compiles its own small programs)."""
    return _compiled_builder(constructor, config)(jax.random.key(seed), randomise_seed, scale)


@functools.cache
def _compiled_builder(constructor: Callable, config):
    def build(key, randomise_seed, scale):
        module = constructor(config, nnx.Rngs(key))
        randomise_params(module, randomise_seed, scale)
        return module

    return nnx.jit(build)
