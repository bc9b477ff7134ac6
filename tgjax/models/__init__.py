"""Whole language models assembled from `tgjax.nn`, from one registry."""

from tgjax.models.parts import count_parameters
from tgjax.models.registry import MODEL_NAMES, ModelSpec, build_model, model_config, model_spec
from tgjax.models.transformer_lm import ModelConfig, TransformerLM, sequence_loss

__all__ = ["MODEL_NAMES", "ModelConfig", "ModelSpec", "TransformerLM", "build_model", "count_parameters",
           "model_config", "model_spec", "sequence_loss"]
