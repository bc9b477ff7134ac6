"""Pushdown-LM (Murty et al., EMNLP 2023): a Transformer LM whose layers are Pushdown layers, plus the attachment head.

Reads the batches of `tgjax.data.pushdown` (`inputs`, `targets`, `attach`,
`attach_targets`, `weights`, `attach_weights`, `node_start`, `node_end`, or a
dense `tape`; `roots`, the ROOT tokens, when a row may hold several
sentences) and returns the next-token logits `[B, T, V]` and the
attachment-slot logits `[B, T, T + 1]`; `pushdown_loss` adds the LM
cross-entropy and the attachment cross-entropy (weight 1, as the release).

Wiring, as the release (released-code.md §1.5): token embedding scaled by
sqrt(d), no absolute positions (relative positions inside attention), post-LN
blocks, output layer tied to the input embedding with its own bias. The
attachment head reads the final states and the *raw* (unscaled) embedding of
the gold next token. `pushdown_layers` chooses which layers carry the depth
term: all (Dyck, BLLIP), or e.g. the last 6 of 12 (the WikiTrees model);
the others are the same block without it. The release's head-count slip
(quirk A: FFN width = n_heads × d, 8 heads always) is not reproduced: sizes
here are what the config says.

The stack tape is rebuilt on device from the node spans
(`stack_tape_from_nodes`); entries beyond the depth table are clipped and
counted (`outputs["clipped_depths"]`), and the Dyck model reads the binary tape.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.attachment_head import AttachmentHead, attachment_log_probs, attachment_loss, slot_legality
from tgjax.nn.params import param
from tgjax.nn.pushdown_attention import PushdownLayer, count_clipped_depths, stack_tape_from_nodes
from tgjax.nn.remat import checkpoint_body, remat_layer, remat_policy_name
from tgjax.ops.log_probs import token_log_probs


@dataclasses.dataclass(frozen=True)
class PushdownLMConfig:
    vocab_size: int
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    ffw_hidden_size: int = 256
    sequence_length: int = 64  # T: positions per row
    pushdown_layers: tuple[int, ...] | None = None  # None: every layer
    num_depths: int = 50  # depth table (the release: 50 for text; 2 with binary_tape)
    binary_tape: bool = False  # Dyck: 1 where a token has been reduced
    depth_space: Literal["head", "model"] = "head"  # β per head (Fig. 7, release) or in model space (eq. 6)
    max_relative_position: int = 512
    embedding_dropout: float = 0.1
    dropout: float = 0.1
    # The attachment head (`tgjax.nn.attachment_head`). Defaults: the paper's Fig. 8 for the scores and its
    # text (eq. 5, Fig. 2) for the softmax. The release: head_scaled=False, head_self_key_input="query",
    # head_relative_positions=True, attachment_normalise="causal" (also Fig. 8's softmax).
    head_key_dim: int | None = None  # None: 2 d
    head_depth_dim: int | None = None  # None: d / num_heads
    head_scaled: bool = True  # Fig. 8; False: the release
    head_self_key_input: Literal["projection", "query"] = "projection"  # Fig. 8; "query": the release
    head_relative_positions: bool = False  # True: the release
    attachment_normalise: Literal["legal", "causal"] = "legal"  # paper text; "causal": Fig. 8 and the release
    head_query_chunk: int | None = None  # table head only: score its [B, C, T, D] table C rows at a time
    # The head's scores C depth values per rematerialised scan step ([B, T, C, key_dim] live, the backward pass
    # keeping [B, T, key_dim] tensors); None: the table of MLP_c for every (token, depth) [B, T, D, key_dim],
    # about 0.4 GiB per row at BLLIP size (benchmarks/pushdown_memory.py). The same numbers either way.
    head_depth_chunk: int | None = 1
    # How the layers run (not what they compute; checkpoints are the same either way):
    # What each layer keeps for the backward pass: a tgjax.nn.remat policy name; "full" (or the old True) recomputes
    # each layer's activations, for ~1.17x the FLOPs
    remat: str = "none"
    scan_layers: bool = False  # one lax.scan over the layers (identical layers only): one layer body to compile,
    # and with remat one layer's [B, heads, T, T] tensors live in the backward pass (unrolled, XLA:CPU keeps all)

    def __post_init__(self):
        object.__setattr__(self, "remat", remat_policy_name(self.remat))  # frozen: normalised once here
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "ffw_hidden_size", "sequence_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}")
        if self.binary_tape and self.num_depths != 2:
            raise ValueError(f"model.binary_tape needs num_depths=2 (a 0/1 tape), got {self.num_depths}")
        bad = [i for i in (self.pushdown_layers or ()) if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"model.pushdown_layers {bad} outside 0..{self.num_layers - 1}")
        if self.scan_layers and len({self.is_pushdown(i) for i in range(self.num_layers)}) > 1:
            raise ValueError(f"model.scan_layers needs identical layers: every layer pushdown or none, got "
                             f"pushdown_layers={list(self.pushdown_layers or ())} of {self.num_layers}")

    def is_pushdown(self, layer: int) -> bool:
        return self.pushdown_layers is None or layer in self.pushdown_layers


class PushdownLM(nnx.Module):
    def __init__(self, config: PushdownLMConfig, *, rngs: nnx.Rngs):
        self.config = config
        d = config.d_model
        self.embedding = param(rngs, nnx.initializers.xavier_uniform(), (config.vocab_size, d), ("vocab", "embed"))
        self.output_bias = param(rngs, nnx.initializers.zeros, (config.vocab_size,), ("vocab",))
        self.layers = nnx.List([
            PushdownLayer(d, config.num_heads, config.ffw_hidden_size,
                          num_depths=config.num_depths if config.is_pushdown(i) else 0,
                          max_relative_position=config.max_relative_position, dropout=config.dropout,
                          depth_space=config.depth_space, rngs=rngs)
            for i in range(config.num_layers)])
        self.head = AttachmentHead(
            d, d, num_depths=config.num_depths, depth_dim=config.head_depth_dim or d // config.num_heads,
            key_dim=config.head_key_dim, dropout=config.dropout, scaled=config.head_scaled,
            self_key_input=config.head_self_key_input, relative_positions=config.head_relative_positions,
            max_relative_position=config.max_relative_position, query_chunk=config.head_query_chunk,
            depth_chunk=config.head_depth_chunk, rngs=rngs)
        self.embedding_dropout = nnx.Dropout(config.embedding_dropout, rngs=rngs)

    def _scanned_layers(self, x: jax.Array, tape: jax.Array, valid: jax.Array, deterministic: bool) -> jax.Array:
        """The layers as one `lax.scan`: `x [B, T, d]` carried, each layer's state stacked on the fly.

        The parameters stay one module per layer, as the loop has them, so checkpoints
        and inference do not change; they are stacked here (every leaf `[L, ...]`) for
        the scan. Each layer keeps its own dropout stream, advanced as the loop advances
        it, so the numbers are the loop's, dropout masks included.
        """
        splits = [nnx.split(layer, nnx.Param, ...) for layer in self.layers]
        graphdef = splits[0][0]
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[(params, rest) for _, params, rest in splits])

        def body(x, layer_state):
            layer = nnx.merge(graphdef, *layer_state)
            x = layer(x, tape, valid, deterministic=deterministic)
            return x, nnx.split(layer, nnx.Param, ...)[2]  # the dropout stream, advanced

        body = checkpoint_body(body, self.config.remat, prevent_cse=False)  # inside a scan CSE cannot undo it
        x, rests = jax.lax.scan(body, x, stacked)
        for index, layer in enumerate(self.layers):
            nnx.update(layer, jax.tree.map(lambda leaf: leaf[index], rests))
        return x

    def tape(self, batch: dict[str, jax.Array]) -> jax.Array:
        """`[B, T, T]` integer tape: the batch's dense `tape`, or rebuilt from its node spans."""
        length = batch["inputs"].shape[1]
        if "tape" in batch:
            tape = batch["tape"].astype(jnp.int32)
            return jnp.minimum(tape, 1) if self.config.binary_tape else tape
        return stack_tape_from_nodes(batch["node_start"], batch["node_end"], length, binary=self.config.binary_tape)

    def __call__(self, batch: dict[str, jax.Array], *, deterministic: bool = True) -> dict[str, jax.Array]:
        """`lm_logits [B, T, V]`, `attach_logits [B, T, T + 1]`, `clipped_depths []` (entries beyond the table)."""
        valid = batch["weights"] > 0
        tape = self.tape(batch)
        read = valid[:, :, None] & valid[:, None, :] & jnp.tril(jnp.ones(tape.shape[1:], bool))
        table = self.embedding[...]
        x = table[batch["inputs"]] * np.sqrt(self.config.d_model)
        x = self.embedding_dropout(x, deterministic=deterministic)
        if self.config.scan_layers:
            x = self._scanned_layers(x, tape, valid, deterministic)
        else:
            def run_layer(layer, x):
                return layer(x, tape, valid, deterministic=deterministic)

            run_layer = remat_layer(run_layer, self.config.remat)
            for layer in self.layers:
                x = run_layer(layer, x)
        lm_logits = x @ table.T + self.output_bias[...]
        attach_logits = self.head(x, table[batch["targets"]], tape, deterministic=deterministic)
        return dict(lm_logits=lm_logits, attach_logits=attach_logits,
                    clipped_depths=count_clipped_depths(tape, self.config.num_depths, read))


def pushdown_loss(outputs: dict[str, jax.Array], batch: dict[str, jax.Array],
                  config: PushdownLMConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
    """LM cross-entropy + attachment cross-entropy (means over their valid positions); and metrics."""
    weights = batch["weights"]
    target_log_probs = token_log_probs(outputs["lm_logits"], batch["targets"])
    lm_loss = -(target_log_probs * weights).sum() / jnp.maximum(weights.sum(), 1.0)
    legal = slot_legality(batch["attach"], batch.get("roots"))  # the sets the search and the sampler use
    attach_log_probs = attachment_log_probs(outputs["attach_logits"], legal,
                                            normalise_over=config.attachment_normalise, mask_illegal=False)
    attach_weights = batch["attach_weights"]
    attach_loss = attachment_loss(attach_log_probs, batch["attach_targets"], attach_weights)
    correct = (jnp.argmax(attach_log_probs, axis=-1) == batch["attach_targets"]) * attach_weights
    metrics = dict(lm_loss=lm_loss, attach_loss=attach_loss,
                   attach_accuracy=correct.sum() / jnp.maximum(attach_weights.sum(), 1.0),
                   clipped_depths=outputs["clipped_depths"])
    return lm_loss + attach_loss, metrics
