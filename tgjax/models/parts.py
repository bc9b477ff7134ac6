"""A model split for functional use, without allocating it: graph definition and abstract parameters.

The trainer closes its jitted steps over these parts (`tgjax.train.tasks.treebank_lm.state`),
and inference restores a checkpoint's parameters into their shapes
(`tgjax.infer.loading`); both split the model the same way,
`graphdef, params, rest = nnx.split(model, nnx.Param, ...)`.
"""

from __future__ import annotations

from typing import NamedTuple

from flax import nnx

from tgjax.models.transformer_lm import ModelConfig, TransformerLM
from tgjax.nn.params import count_parameters  # re-exported: where the models' users look for it


class ModelParts(NamedTuple):
    """The static and constant parts of a model that jitted functions close over or take."""

    config: ModelConfig
    graphdef: nnx.GraphDef
    abstract_params: nnx.State  # with NNX partition metadata (logical axis names), for shardings


def model_parts(config: ModelConfig) -> ModelParts:
    """Graph definition and abstract parameters of the `TransformerLM` of `config`, without allocating it."""
    abstract = nnx.eval_shape(lambda: TransformerLM(config, rngs=nnx.Rngs(params=0, dropout=0)))
    graphdef, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    return ModelParts(config, graphdef, abstract_params)


__all__ = ["ModelParts", "count_parameters", "model_parts"]
