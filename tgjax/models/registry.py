"""One registry for the Transformer Grammar family: model name -> model switches and data rule.

Each entry says how the model is built (`ModelConfig` switches) and how its
data are made (`PipelineConfig` fields: which masking rule, which memory), so
the two sides always agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

from tgjax.models.transformer_lm import ModelConfig, TransformerLM


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    model: dict[str, Any]  # ModelConfig switches
    pipeline: dict[str, Any]  # PipelineConfig fields

    def pipeline_fields(self, model_config: ModelConfig) -> dict[str, Any]:
        """Pipeline settings that match a model config (rule, segment and memory lengths, memory kind)."""
        fields = dict(self.pipeline, seq_len=model_config.sequence_length, mem_len=model_config.memory_length)
        if fields["rule"] == "tg":
            fields.update(smart_memory=model_config.smart_memory, distinct_compose=model_config.distinct_compose,
                          linear_relpos=model_config.linear_relpos)
        return fields


_TG = {"rule": "tg"}
SPECS = {
    spec.name: spec
    for spec in [
        ModelSpec("tg", "Transformer Grammar: STACK/COMPOSE, depth positions, smart memory", {}, _TG),
        ModelSpec("tg_distinct_mha", "TG with separate STACK and COMPOSE attention weights",
                  {"distinct_compose": True}, _TG),
        ModelSpec("tg_txl_memory", "TG with TXL (shifted) memory", {"smart_memory": False}, _TG),
        ModelSpec("tg_txl_memory_linear_pos", "TG with TXL memory and linear relative positions",
                  {"smart_memory": False, "linear_relpos": True}, _TG),
        ModelSpec("tg_layer_hybrid", "TG whose top model.num_unrestricted_layers layers are unrestricted (TXL)",
                  {"smart_memory": False}, _TG),
        ModelSpec("tg_head_hybrid", "TG whose last model.num_unrestricted_heads heads are unrestricted (TXL)",
                  {"smart_memory": False}, _TG),
        ModelSpec("txl_cc", "Transformer-XL on Choe-Charniak actions", {"tg": False}, {"rule": "txl_cc"}),
        ModelSpec("txl_terminals", "Transformer-XL on words only", {"tg": False}, {"rule": "txl_terminals"}),
    ]
}
MODEL_NAMES = tuple(SPECS)


def model_spec(name: str) -> ModelSpec:
    if name not in SPECS:
        raise ValueError(f"unknown model {name!r}; expected one of {MODEL_NAMES}")
    return SPECS[name]


def model_config(name: str, vocab_size: int, **sizes) -> ModelConfig:
    """The `ModelConfig` of a registered model with the given sizes (and overrides)."""
    spec = model_spec(name)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(sizes) - fields)
    if unknown:
        raise ValueError(f"unknown model config key(s) {unknown}; expected some of {sorted(fields)}")
    if spec.name == "tg_layer_hybrid" and not sizes.get("num_unrestricted_layers"):
        sizes["num_unrestricted_layers"] = 1
    if spec.name == "tg_head_hybrid" and not sizes.get("num_unrestricted_heads"):
        sizes["num_unrestricted_heads"] = 1
    return ModelConfig(vocab_size=vocab_size, **{**sizes, **spec.model})


def build_model(name: str, vocab_size: int, *, rngs: nnx.Rngs, **sizes) -> TransformerLM:
    return TransformerLM(model_config(name, vocab_size, **sizes), rngs=rngs)
