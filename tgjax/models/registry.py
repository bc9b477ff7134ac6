"""One registry for the Transformer Grammar family: model name -> model switches and data rule.

Each entry says how the model is built (`ModelConfig` switches) and how its
data are made (`PipelineConfig` fields: which masking rule, which memory), so
the two sides always agree.

A switch means one model: the switches an entry fixes are its own, and the
ones it `admits` may be set by the user (how many unrestricted layers a
layer-hybrid has). Any other switch set away from its default is refused with
the name of the registered model that has it, so that `tg` with unrestricted
layers cannot silently become a hybrid that is not `tg_layer_hybrid`.
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
    model: dict[str, Any]  # ModelConfig switches, fixed
    pipeline: dict[str, Any]  # PipelineConfig fields
    admits: tuple[str, ...] = ()  # ModelConfig switches the user may set (sizes are always free)

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
                  {"smart_memory": False}, _TG, admits=("num_unrestricted_layers",)),
        ModelSpec("tg_head_hybrid", "TG whose last model.num_unrestricted_heads heads are unrestricted (TXL)",
                  {"smart_memory": False}, _TG, admits=("num_unrestricted_heads",)),
        ModelSpec("txl_cc", "Transformer-XL on Choe-Charniak actions", {"tg": False}, {"rule": "txl_cc"}),
        ModelSpec("txl_terminals", "Transformer-XL on words only", {"tg": False}, {"rule": "txl_terminals"}),
    ]
}
MODEL_NAMES = tuple(SPECS)

# The `ModelConfig` fields that choose a variant (the rest are sizes and dropout rates).
SWITCHES = ("tg", "smart_memory", "distinct_compose", "linear_relpos", "num_unrestricted_layers",
            "num_unrestricted_heads")
_SWITCH_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name in SWITCHES}


def _models_with_switch(switch: str, value: Any) -> list[ModelSpec]:
    """Registered models that fix `switch` to `value`, or let the user set it."""
    return [spec for spec in SPECS.values()
            if spec.model.get(switch, _SWITCH_DEFAULTS[switch]) == value or switch in spec.admits]


def check_switches(spec: ModelSpec, switches: dict[str, Any]) -> None:
    """Refuses a switch that `spec` neither admits nor fixes to that value, naming the models that have it.

    A switch the entry leaves alone may only be at its `ModelConfig` default.
    """
    for switch, value in switches.items():
        if switch in spec.admits or value == spec.model.get(switch, _SWITCH_DEFAULTS[switch]):
            continue
        owners = [other for other in _models_with_switch(switch, value) if other.name != spec.name]
        described = ", ".join(f"{other.name!r} ({other.description})" for other in owners)
        named = {0: "no registered model has it", 1: f"the registered model with it is {described}"}.get(
            len(owners), f"the registered models with it are {described}")
        raise ValueError(f"model.{switch}={value!r} is not a switch of model {spec.name!r}; {named}")


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
    check_switches(spec, {k: v for k, v in sizes.items() if k in SWITCHES})
    if spec.name == "tg_layer_hybrid" and not sizes.get("num_unrestricted_layers"):
        sizes["num_unrestricted_layers"] = 1
    if spec.name == "tg_head_hybrid" and not sizes.get("num_unrestricted_heads"):
        sizes["num_unrestricted_heads"] = 1
    return ModelConfig(vocab_size=vocab_size, **{**sizes, **spec.model})


def build_model(name: str, vocab_size: int, *, rngs: nnx.Rngs, **sizes) -> TransformerLM:
    return TransformerLM(model_config(name, vocab_size, **sizes), rngs=rngs)
