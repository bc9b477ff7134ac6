"""Transformer Grammars and Transformer-XL language models over segments with memory.

One model class for the whole family (Sartran et al., 2022): the masking rule
decides TG vs TXL, and the variants are switches. The model reads the
pipeline's compact segments (`tgjax.syntax.masks.CompactChunk` fields, a
leading batch axis) and rebuilds masks and relative positions on device with
the same broadcasting comparisons as the host (`masks.attention_from_vectors`
with `xp=jax.numpy`), inside whatever `jax.jit` calls it.

Device side: everything below runs under jit; the memory is a `[K, B, M, d]`
array carried from one segment to the next by the caller.

Accelerator knobs (none changes a value in float32): `dtype` (compute dtype;
parameters stay in `param_dtype`, the loss and softmaxes in float32),
`remat` (a `tgjax.nn.remat` policy name: what each layer keeps for the backward pass, `nnx.remat`)
and `scan_layers` (the K layers stacked `[K, ...]` and run under `nnx.scan`, so
compile time does not grow with depth). A scanned model's parameters are
`{"layers": {name: [K, ...]}}` instead of `{"layers": {0: ..., K-1: ...}}`;
`unstack_layer_params` / `stack_layer_params` convert between the layouts and
`unscanned(model)` gives the list form that inference code walks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.nn.params import param
from tgjax.nn.remat import remat_layer, remat_policy_name
from tgjax.nn.transformer_xl import TransformerXLLayer
from tgjax.ops.log_probs import token_log_probs
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

# The dtypes a model may compute in or store parameters in, by config name.
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches; names follow the authors' release where they have one."""

    vocab_size: int
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    ffw_hidden_size: int = 256
    sequence_length: int = 64  # T
    memory_length: int = 64  # M
    min_relative_position: int = -1
    max_relative_position: int = 62
    # TG rule switches (ignored by TXL models)
    tg: bool = True  # STACK/COMPOSE masks and depth relative positions; False: TXL (causal, i - j)
    smart_memory: bool = True
    distinct_compose: bool = False
    linear_relpos: bool = False
    num_unrestricted_layers: int = 0  # layer-hybrid: the top K layers are causal/linear
    num_unrestricted_heads: int = 0  # head-hybrid: the last heads of every layer are causal/linear
    embedding_dropout: float = 0.1
    core_dropout: float = 0.1
    final_dropout: float = 0.1
    # Accelerator knobs: the defaults are today's float32 model, layers in a list.
    dtype: str = "float32"  # compute dtype: float32, bfloat16 or float16
    param_dtype: str = "float32"  # parameter (and so optimiser state) dtype
    # What each layer keeps for the backward pass: a tgjax.nn.remat policy name ("none", "full", "dots_saveable",
    # ...); the old True / False are taken as "full" / "none".
    remat: str = "none"
    scan_layers: bool = False  # stack the layers and run them under nnx.scan

    def __post_init__(self):
        object.__setattr__(self, "remat", remat_policy_name(self.remat))  # frozen: normalised once here
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"model.{name}={getattr(self, name)!r}: expected one of {', '.join(DTYPES)}")
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "ffw_hidden_size",
                     "sequence_length", "memory_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.num_heads:
            raise ValueError(f"model.d_model={self.d_model} is not divisible by model.num_heads={self.num_heads}")
        if self.min_relative_position > self.max_relative_position:
            raise ValueError(f"model.min_relative_position={self.min_relative_position} is above "
                             f"model.max_relative_position={self.max_relative_position}: expected min <= max")
        max_position = int(jnp.iinfo(masks.RELPOS_DTYPE).max)  # the pipeline's relative positions are int16
        if self.sequence_length + self.memory_length > max_position:
            raise ValueError(f"model.sequence_length + model.memory_length = "
                             f"{self.sequence_length + self.memory_length}: expected at most {max_position}")
        if not 0 <= self.num_unrestricted_layers <= self.num_layers:
            raise ValueError(f"model.num_unrestricted_layers={self.num_unrestricted_layers} "
                             f"is not in [0, num_layers={self.num_layers}]")
        if not 0 <= self.num_unrestricted_heads <= self.num_heads:
            raise ValueError(f"model.num_unrestricted_heads={self.num_unrestricted_heads} "
                             f"is not in [0, num_heads={self.num_heads}]")

    @property
    def uses_linear_positions(self) -> bool:
        """Whether any attention uses i - j (TXL, linear TG, or an unrestricted part)."""
        unrestricted = self.num_unrestricted_layers > 0 or self.num_unrestricted_heads > 0
        return (not self.tg) or self.linear_relpos or unrestricted

    @property
    def relative_range(self) -> tuple[int, int]:
        """[min, max] of the position table: the TG range, widened to 0..M+T-1 for linear positions."""
        lo, hi = self.min_relative_position, self.max_relative_position
        if self.uses_linear_positions:
            lo, hi = min(lo, 0), max(hi, self.memory_length + self.sequence_length - 1)
        return lo, hi

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    @property
    def parameter_dtype(self):
        return DTYPES[self.param_dtype]


def attention_inputs(config: ModelConfig, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Masks and relative positions of a batch of compact segments, rebuilt on device.

    Returns `mask`, `relpos` `[B, T, M + T]` (memory columns first) of the
    model's rule, and `causal_mask`, `causal_relpos` (TXL's) when some part of
    the model is unrestricted. TG relative positions are clipped to
    [min, max] here; linear ones to [0, M + T - 1].
    """
    q = (batch["position"], batch["inputs_ttypes"], batch["depth"])
    keys_seq = (batch["position"], batch["depth"], batch["push_time"], batch["pop_time"])
    keys_mem = (batch["memory_pos"], batch["memory_depth"], batch["memory_push_time"], batch["memory_pop_time"])

    def build(causal: bool, linear: bool):
        mem_mask, mem_rel = masks.attention_from_vectors(*q, *keys_mem, causal=causal, linear_relpos=linear, xp=jnp)
        seq_mask, seq_rel = masks.attention_from_vectors(*q, *keys_seq, causal=causal, linear_relpos=linear, xp=jnp)
        return jnp.concatenate([mem_mask, seq_mask], -1), jnp.concatenate([mem_rel, seq_rel], -1)

    mask, relpos = build(causal=not config.tg, linear=(not config.tg) or config.linear_relpos)
    out = {"mask": mask, "relpos": relpos}
    if config.tg and (config.num_unrestricted_layers or config.num_unrestricted_heads):
        out["causal_mask"], out["causal_relpos"] = build(causal=True, linear=True)
    return out


def update_memory(layer_input: jax.Array, memory: jax.Array, src_seq: jax.Array, src_mem: jax.Array) -> jax.Array:
    """The next memory `[B, M, d]`: slot s takes `layer_input[src_seq[s]]` or `memory[src_mem[s]]`, else 0.

    This is `mem_from_seq.T @ h + mem_from_mem.T @ mem` of the paper's
    Appendix A, as gathers; no gradient flows through the memory. It is kept
    in `memory.dtype` (float32) whatever the compute dtype.
    """
    layer_input = layer_input.astype(memory.dtype)
    from_seq = jnp.take_along_axis(layer_input, jnp.maximum(src_seq, 0)[..., None], axis=1)
    from_mem = jnp.take_along_axis(memory, jnp.maximum(src_mem, 0)[..., None], axis=1)
    new = jnp.where((src_seq >= 0)[..., None], from_seq, jnp.where((src_mem >= 0)[..., None], from_mem, 0.0))
    return jax.lax.stop_gradient(new)


def _make_layer(config: ModelConfig, rngs: nnx.Rngs) -> TransformerXLLayer:
    lo, hi = config.relative_range
    return TransformerXLLayer(config.d_model, config.num_heads, config.ffw_hidden_size, rel_min=lo, rel_max=hi,
                              dropout=config.core_dropout, distinct_compose=config.distinct_compose, rngs=rngs,
                              dtype=config.compute_dtype, param_dtype=config.parameter_dtype)


# The logical name of the stacked-layer axis of a scanned model (replicated by every sharding rule set).
LAYER_AXIS = "layers"
_LAYER_AXIS_METADATA = {nnx.PARTITION_NAME: LAYER_AXIS}


def _stacked_layers(config: ModelConfig, rngs: nnx.Rngs) -> TransformerXLLayer:
    """One `TransformerXLLayer` whose every array has a leading `[K]` axis, each layer drawn from its own keys."""

    @nnx.split_rngs(splits=config.num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata=_LAYER_AXIS_METADATA)
    def create(rngs):
        return _make_layer(config, rngs)

    return create(rngs)


class TransformerLM(nnx.Module):
    """Embeddings, K Transformer-XL layers, tied output embeddings with a bias.

    `layers` is an `nnx.List` of K layers, or (`scan_layers`) one stacked layer.
    """

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        d = config.d_model
        param_dtype = config.parameter_dtype
        self.embedding = param(rngs, nnx.initializers.normal(d ** -0.5), (config.vocab_size, d), ("vocab", "embed"),
                               param_dtype)
        self.output_bias = param(rngs, nnx.initializers.zeros, (config.vocab_size,), ("vocab",), param_dtype)
        if config.scan_layers:
            self.layers = _stacked_layers(config, rngs)
        else:
            self.layers = nnx.List([_make_layer(config, rngs) for _ in range(config.num_layers)])
        self.embedding_dropout = nnx.Dropout(config.embedding_dropout, rngs=rngs)
        self.final_dropout = nnx.Dropout(config.final_dropout, rngs=rngs)

    def init_memory(self, batch_size: int, dtype=jnp.float32) -> jax.Array:
        """Empty memory `[K, B, M, d]` (nothing in it is ever attended: every slot is marked empty)."""
        c = self.config
        return jnp.zeros((c.num_layers, batch_size, c.memory_length, c.d_model), dtype)

    def __call__(self, batch: dict[str, jax.Array], memory: jax.Array, *, deterministic: bool = True
                 ) -> tuple[jax.Array, jax.Array]:
        """Logits `[B, T, V]` (compute dtype) and the next memory `[K, B, M, d]` for one segment per row."""
        x, new_memory = self.hidden_states(batch, memory, deterministic=deterministic)
        return self.logits(x), new_memory

    def logits(self, x: jax.Array) -> jax.Array:
        """Output logits `[..., V]` (compute dtype) of hidden states `[..., d]`: tied embeddings plus bias.

        Apart from `hidden_states` so that inference projects only the rows it reads.
        """
        c = self.config
        embedding = self.embedding[...].astype(c.compute_dtype)
        return x @ embedding.T + self.output_bias[...].astype(c.compute_dtype)

    def embed(self, inputs: jax.Array) -> jax.Array:
        """`[B, T] -> [B, T, d]`: the scaled token embeddings, in the compute dtype."""
        c = self.config
        return (self.embedding[...][inputs] * jnp.sqrt(float(c.d_model))).astype(c.compute_dtype)

    def attention_rule(self, batch: dict[str, jax.Array]):
        """(`attention_inputs`, mask, relpos): the rows the restricted layers read, per head for head hybrids.

        mask, relpos `[B, (H,) T, M + T]`: the model's rule (TG's STACK/COMPOSE
        or the causal one); with `num_unrestricted_heads`, the TG rule for the
        first heads and the causal one for the rest. The unrestricted layers
        of a layer hybrid read `attention_inputs`' causal_mask / causal_relpos.
        """
        c = self.config
        attn = attention_inputs(c, batch)
        mask, relpos = attn["mask"], attn["relpos"]
        if c.tg and c.num_unrestricted_heads:
            heads_tg = c.num_heads - c.num_unrestricted_heads
            per_head = lambda tg_part, causal_part: jnp.concatenate(
                [jnp.repeat(tg_part[:, None], heads_tg, 1),
                 jnp.repeat(causal_part[:, None], c.num_unrestricted_heads, 1)], 1)
            mask = per_head(attn["mask"], attn["causal_mask"])
            relpos = per_head(attn["relpos"], attn["causal_relpos"])
        return attn, mask, relpos

    def hidden_states(self, batch: dict[str, jax.Array], memory: jax.Array, *, deterministic: bool = True,
                      with_layer_inputs: bool = False):
        """The final hidden states `[B, T, d]` (before `logits`) and the next memory `[K, B, M, d]`.

        The next memory is None for a batch without its selections (`mem_src_seq`, `mem_src_mem`), as in
        incremental scoring. With `with_layer_inputs` (list layout only, what inference walks): also the input
        of every layer `[K, B, T, d]`, which Transformer-XL memory is made of and incremental scoring caches.
        """
        c = self.config
        attn, mask, relpos = self.attention_rule(batch)
        compose = batch["inputs_ttypes"] == tt.CNT1
        x = self.embedding_dropout(self.embed(batch["inputs"]), deterministic=deterministic)

        def run_layer(layer, x, layer_memory, mask, relpos):
            return layer(x, layer_memory, mask, relpos, compose, deterministic=deterministic)

        run_layer = remat_layer(run_layer, c.remat)
        first_unrestricted = c.num_layers - c.num_unrestricted_layers
        if c.scan_layers:
            x, new_memory = self._scanned(run_layer, x, memory, batch, mask, relpos, attn, first_unrestricted)
        else:
            new_memory, layer_inputs = [], []
            for index, layer in enumerate(self.layers):
                layer_inputs.append(x)
                if "mem_src_seq" in batch:
                    new_memory.append(update_memory(x, memory[index], batch["mem_src_seq"], batch["mem_src_mem"]))
                if c.tg and index >= first_unrestricted:
                    x = run_layer(layer, x, memory[index], attn["causal_mask"], attn["causal_relpos"])
                else:
                    x = run_layer(layer, x, memory[index], mask, relpos)
            new_memory = jnp.stack(new_memory) if new_memory else None
        x = self.final_dropout(x, deterministic=deterministic)
        if with_layer_inputs:
            if c.scan_layers:
                raise ValueError("with_layer_inputs needs the list layout: tgjax.models.transformer_lm.unscanned")
            return x, new_memory, jnp.stack(layer_inputs)
        return x, new_memory

    def _scanned(self, run_layer, x, memory, batch, mask, relpos, attn, first_unrestricted):
        """The stacked layers under `nnx.scan`: `x [B, T, d]` carried, memory `[K, B, M, d]` in and out."""
        c = self.config
        hybrid_layers = c.tg and c.num_unrestricted_layers > 0
        if hybrid_layers:  # the top layers attend by the causal rule: both rules go in, each layer picks
            causal_mask, causal_relpos = attn["causal_mask"], attn["causal_relpos"]
            if mask.ndim == 4:  # head-hybrid too: broadcast the causal rule over heads
                causal_mask, causal_relpos = causal_mask[:, None], causal_relpos[:, None]
        unrestricted = jnp.arange(c.num_layers) >= first_unrestricted  # [K]

        @nnx.scan(in_axes=(0, nnx.Carry, 0, 0), out_axes=(nnx.Carry, 0), transform_metadata=_LAYER_AXIS_METADATA)
        def body(layer, x, layer_memory, is_unrestricted):
            new_layer_memory = update_memory(x, layer_memory, batch["mem_src_seq"], batch["mem_src_mem"])
            layer_mask, layer_relpos = mask, relpos
            if hybrid_layers:
                layer_mask = jnp.where(is_unrestricted, causal_mask, mask)
                layer_relpos = jnp.where(is_unrestricted, causal_relpos, relpos)
            return run_layer(layer, x, layer_memory, layer_mask, layer_relpos), new_layer_memory

        return body(self.layers, x, memory, unrestricted)


def unstack_layer_params(params: dict, num_layers: int) -> dict:
    """A scanned model's pure parameter dict -> the list layout (`layers[i]` = slice i of every stacked array)."""
    stacked = params["layers"]
    layers = {i: jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(num_layers)}
    return {**params, "layers": layers}


def stack_layer_params(params: dict) -> dict:
    """A list-layout pure parameter dict -> the scanned layout (every layer array stacked on a leading axis)."""
    layers = params["layers"]
    ordered = [layers[i] for i in sorted(layers)]
    return {**params, "layers": jax.tree.map(lambda *a: jnp.stack(a), *ordered)}


def unscanned(model: TransformerLM) -> TransformerLM:
    """The same model with its layers in a list (what inference walks); `model` itself if it is not scanned.

    Parameters are copied; constants and dropout streams are made fresh (inference is deterministic).
    """
    c = model.config
    if not c.scan_layers:
        return model
    flat = TransformerLM(dataclasses.replace(c, scan_layers=False), rngs=nnx.Rngs(params=0, dropout=0))
    params = nnx.state(flat, nnx.Param)
    nnx.replace_by_pure_dict(params, unstack_layer_params(nnx.to_pure_dict(nnx.state(model, nnx.Param)),
                                                          c.num_layers))
    nnx.update(flat, params)
    return flat


def prediction_mask(batch: dict[str, Any]) -> jax.Array:
    """`[B, T]` True at prediction events: a real label (none at CNT1, none at padding)."""
    return batch["labels_ttypes"] != tt.PAD


def sequence_loss(logits: jax.Array, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Summed negative log-likelihood over prediction events, and their count."""
    nll = -token_log_probs(logits, batch["labels"])
    events = prediction_mask(batch)
    return jnp.sum(jnp.where(events, nll, 0.0)), jnp.sum(events)
