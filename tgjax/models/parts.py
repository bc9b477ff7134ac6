"""A model split for functional use, without allocating it: graph definition and abstract parameters.

The trainer closes its jitted steps over these parts (`tgjax.train.state`),
and inference restores a checkpoint's parameters into their shapes
(`tgjax.infer.loading`); both split the model the same way,
`graphdef, params, rest = nnx.split(model, nnx.Param, ...)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
from flax import nnx

from tgjax.models.transformer_lm import ModelConfig, TransformerLM


class ModelParts(NamedTuple):
    """The static and constant parts of a model that jitted functions close over or take."""

    config: ModelConfig
    graphdef: nnx.GraphDef
    abstract_params: nnx.State  # with NNX partition metadata (logical axis names), for shardings
    rng_tags: tuple[str, ...]  # names of the RNG streams to reseed every step (dropout)


def model_parts(config: ModelConfig) -> ModelParts:
    """Graph definition and abstract parameters of the `TransformerLM` of `config`, without allocating it."""
    abstract = nnx.eval_shape(lambda: TransformerLM(config, rngs=nnx.Rngs(params=0, dropout=0)))
    graphdef, abstract_params, abstract_rest = nnx.split(abstract, nnx.Param, ...)
    keys = jax.tree.leaves(abstract_rest, is_leaf=lambda x: isinstance(x, nnx.RngKey))
    tags = sorted({key.tag for key in keys if isinstance(key, nnx.RngKey)})
    return ModelParts(config, graphdef, abstract_params, tuple(tags))


def count_parameters(model: nnx.Module | Callable[[], nnx.Module]) -> int:
    """How many numbers the `nnx.Param` variables of `model` hold (batch statistics, RNG state and caches not counted).

    `model` is a module, or a constructor such as `lambda: Model(config, rngs=nnx.Rngs(0))`, which is
    built abstractly (`nnx.eval_shape`: shapes only, nothing allocated).
    """
    if not isinstance(model, nnx.Module):
        model = nnx.eval_shape(model)
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


__all__ = ["ModelParts", "count_parameters", "model_parts"]
