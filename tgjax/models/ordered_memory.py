"""Ordered Memory classifiers as released (Shen et al., NeurIPS 2019; thesis §3.6; released-code.md §3.3-3.4).

Two heads over one encoder (`tgjax.nn.ordered_memory.OrderedMemory`):

* ListOps (`kind="sequence"`): Embedding -> Dropout(embedding_dropout) -> OM
  -> the root-slot output at the last real token -> Dropout(output_dropout)
  -> Linear(D -> classes). The release: Embedding(20, 128), OM(128, 128,
  nslot 21), Linear(128 -> 10).
* Logical inference (`kind="pair"`): premise and hypothesis go through the
  same encoder (one batch of 2B rows, as the release does) to u, v [B, D];
  features [u; v; u*v; |u - v|] [B, 4D] (`pair_features`) -> Dropout(output_dropout)
  -> Linear(4D -> H) -> ELU -> Dropout(output_dropout) -> Linear(H -> classes).
  The release: Embedding(12, 200, init U(+-0.1)), OM(200, 200, nslot 12), H = 200, 7 classes.

The embedding and both heads are `SentenceClassifier`'s, so that the
same-size baselines of `tgjax.models.sequence_encoders` (an LSTM, a
Transformer) share them and differ from this classifier in the encoder alone.

Dropout is explicit: `__call__(..., dropout_key=key)` applies it (the
release's dropouti on embeddings, dropoutm in the pointer scorer, dropout in
the cell, dropouto on the output / features), `dropout_key=None` is
deterministic. So the model holds parameters only (no RNG state): a train
step passes `fold_in(base_key, step)` and a resumed run draws the same masks.

Initialisation as PyTorch's defaults in the release: `nn.Linear` uniform in
+-1/sqrt(fan_in) (weights and biases), `nn.Embedding` N(0, 1) unless
`embedding_init_range` (the logic model's U(+-0.1)); the padding row is zero
(`padding_idx`; padded positions are masked out of the recurrence anyway).

`n_slots` may differ at test time (no parameter depends on it); the release
doubles it for logic at test (`test_n_slots`). `pointer_trees` reads the
binary trees off the returned pointers (released-code.md §3.2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.nn.ordered_memory import OrderedMemory
from tgjax.nn.params import logical
from tgjax.ops.ordered_memory import RELEASE, ordered_memory_scan, pointer_distances, pointer_tree

__all__ = ["OMClassifierConfig", "OrderedMemoryClassifier", "SentenceClassifier", "pair_features", "pointer_trees",
           "remove_leaves", "tree_spans"]

KINDS = ("sequence", "pair")


def check_classifier_config(config, sizes: tuple[str, ...]) -> None:
    """The checks every sentence classifier's config passes (ValueError naming the field): the kind, the
    vocabulary, the pair head's width, the dropouts, and the positive ints of `sizes` besides the common ones."""
    if config.kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {config.kind!r}")
    for name in ("vocab_size", "num_classes", "embedding_size", *sizes):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if config.kind == "pair" and config.mlp_hidden_size < 1:
        raise ValueError(f"the pair head needs mlp_hidden_size >= 1, got {config.mlp_hidden_size}")
    if not 0 <= config.pad_id < config.vocab_size:
        raise ValueError(f"pad_id {config.pad_id} is not an id of a vocabulary of {config.vocab_size}")
    for name in ("embedding_dropout", "output_dropout", "attention_dropout", "cell_dropout"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(config, name)}")


@dataclasses.dataclass(frozen=True)
class OMClassifierConfig:
    """Sizes and switches of an Ordered Memory classifier (see the module docstring).

    kind: "sequence" (one input, ListOps) or "pair" (premise, hypothesis; logic).
    vocab_size, pad_id: input ids (pad_id's embedding row is zero).
    embedding_size: D_in; slot_size: D; n_slots: N during training;
    test_n_slots: N at evaluation (None: n_slots).
    mlp_hidden_size: H of the pair head (ignored for "sequence").
    release_switches: the release's query/key LayerNorms, mask floor and
      zero padding (`tgjax.ops.ordered_memory.RELEASE`) instead of the thesis' form.
    embedding_init_range: None: N(0, 1) embeddings; r: U(-r, r).
    """

    kind: str
    vocab_size: int
    num_classes: int
    pad_id: int
    embedding_size: int = 128
    slot_size: int = 128
    n_slots: int = 21
    test_n_slots: int | None = None
    mlp_hidden_size: int = 0
    embedding_dropout: float = 0.1  # dropouti
    output_dropout: float = 0.2  # dropouto
    attention_dropout: float = 0.3  # dropoutm
    cell_dropout: float = 0.1  # dropout
    release_switches: bool = False
    embedding_init_range: float | None = None

    def __post_init__(self):
        check_classifier_config(self, sizes=("slot_size", "n_slots"))

    @property
    def om_options(self) -> dict:
        return dict(RELEASE) if self.release_switches else {}


def pair_features(u, v):
    """The release's sentence-pair features: [u; v; u*v; |u - v|], u, v [B, D] -> [B, 4D]."""
    return jnp.concatenate([u, v, u * v, jnp.abs(u - v)], axis=-1)


def _torch_linear(rngs: nnx.Rngs, fan_in: int, fan_out: int, out_axis: str | None) -> tuple[nnx.Param, nnx.Param]:
    bound = 1.0 / float(np.sqrt(fan_in))
    weight = jax.random.uniform(rngs.params(), (fan_in, fan_out), jnp.float32, -bound, bound)
    bias = jax.random.uniform(rngs.params(), (fan_out,), jnp.float32, -bound, bound)
    return nnx.Param(weight, **logical(None, out_axis)), nnx.Param(bias, **logical(out_axis))


def _dropout(key, rate: float, x):
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


class SentenceClassifier(nnx.Module):
    """The embedding and the two heads of the module docstring, around an encoder of sentences.

    A subclass builds `embedding` (`_init_embedding`), its encoder, then the head (`_init_head(width)`), in
    that order (the order of the parameter draws), and defines `encode(inputs, valid, *, dropout_key, **options)`
    -> (sentence vectors [B, width], extra [B, ...] or None); `classify` applies the head. Ordered Memory's
    extra is its pointers; the baselines of `tgjax.models.sequence_encoders` have none. The config is one with
    the fields the heads read: kind, vocab_size, num_classes, pad_id, embedding_size, mlp_hidden_size,
    embedding_dropout, output_dropout, embedding_init_range.
    """

    config: Any
    # The subclass's: (inputs [B, T], valid [B, T], *, dropout_key, **options) -> (vectors [B, width], extra or None).
    encode: Callable[..., tuple[Any, Any]]

    def _init_embedding(self, rngs: nnx.Rngs) -> None:
        c = self.config
        if c.embedding_init_range is None:
            table = jax.random.normal(rngs.params(), (c.vocab_size, c.embedding_size), jnp.float32)
        else:
            r = c.embedding_init_range
            table = jax.random.uniform(rngs.params(), (c.vocab_size, c.embedding_size), jnp.float32, -r, r)
        self.embedding = nnx.Param(table.at[c.pad_id].set(0.0), **logical("vocab", "embed"))

    def _init_head(self, rngs: nnx.Rngs, width: int) -> None:
        """The head over sentence vectors of `width` features."""
        c = self.config
        if c.kind == "sequence":
            self.w_out, self.b_out = _torch_linear(rngs, width, c.num_classes, None)
        else:
            self.w_hidden, self.b_hidden = _torch_linear(rngs, 4 * width, c.mlp_hidden_size, "mlp")
            self.w_out, self.b_out = _torch_linear(rngs, c.mlp_hidden_size, c.num_classes, None)

    def embed(self, inputs, dropout_key=None):
        """inputs [B, T] ids -> embeddings [B, T, D_in], with the embedding dropout when `dropout_key` is given."""
        return _dropout(dropout_key, self.config.embedding_dropout, self.embedding[...][inputs])

    def classify(self, inputs, valid, *, dropout_key=None, **options):
        """Logits [B, classes] and the encoder's extra ([B, ...], or (left, right) for "pair"; None if it has none).

        "sequence": inputs, valid [B, T]. "pair": inputs = (left, right), valid = (left_valid,
        right_valid), each [B, T] (both padded to one T). `options` go to `encode`.
        """
        c = self.config
        keys = (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))
        if c.kind == "sequence":
            vector, extra = self.encode(inputs, valid, dropout_key=keys[0], **options)
            vector = _dropout(keys[1], c.output_dropout, vector)
            return vector @ self.w_out[...] + self.b_out[...], extra
        left, right = inputs
        left_valid, right_valid = valid
        if left.shape != right.shape:
            raise ValueError(f"premise and hypothesis must be padded to one shape, got {left.shape} and {right.shape}")
        batch = left.shape[0]
        # One batch of 2B rows through the shared encoder, as the release does.
        vectors, extra = self.encode(jnp.concatenate([left, right]), jnp.concatenate([left_valid, right_valid]),
                                     dropout_key=keys[0], **options)
        features = pair_features(vectors[:batch], vectors[batch:])
        head_keys = (None, None) if keys[1] is None else tuple(jax.random.split(keys[1]))
        hidden = _dropout(head_keys[0], c.output_dropout, features) @ self.w_hidden[...] + self.b_hidden[...]
        hidden = _dropout(head_keys[1], c.output_dropout, jax.nn.elu(hidden))
        return hidden @ self.w_out[...] + self.b_out[...], None if extra is None else (extra[:batch], extra[batch:])


class OrderedMemoryClassifier(SentenceClassifier):
    """`model(inputs, valid)` -> (logits [B, classes], pointers); for "pair", inputs and valid are (left, right)."""

    def __init__(self, config: OMClassifierConfig, *, rngs: nnx.Rngs):
        c = config
        self.config = c
        self._init_embedding(rngs)
        # Dropout rates live here, not in the layer: the layer then holds no RNG stream (see the docstring).
        self.encoder = OrderedMemory(c.embedding_size, c.slot_size, c.n_slots, rngs=rngs, **c.om_options)
        self._init_head(rngs, c.slot_size)

    def encode(self, inputs, valid, *, n_slots: int, dropout_key=None):
        """inputs [B, T] ids, valid [B, T] bool -> (sequence vectors [B, D], pointers [B, T, N])."""
        c = self.config
        keys = (None, None) if dropout_key is None else tuple(jax.random.split(dropout_key))
        x = self.embed(inputs, keys[0])
        out = ordered_memory_scan(x, valid, self.encoder.parameters(), n_slots=n_slots, dropout_key=keys[1],
                                  attention_dropout=c.attention_dropout, cell_dropout=c.cell_dropout,
                                  **c.om_options)
        return out.final_output, out.pointer

    def __call__(self, inputs, valid, *, dropout_key=None, n_slots: int | None = None):
        """Logits [B, classes] and pointers: [B, T, N] ("sequence") or a (left, right) pair ("pair").

        "sequence": inputs, valid [B, T]. "pair": inputs = (left, right), valid = (left_valid,
        right_valid), each [B, T] (both padded to one T). `n_slots` None: `n_slots` with dropout
        (training), `test_n_slots` without.
        """
        c = self.config
        if n_slots is None:
            n_slots = c.n_slots if dropout_key is not None else (c.test_n_slots or c.n_slots)
        return self.classify(inputs, valid, dropout_key=dropout_key, n_slots=n_slots)


def pointer_trees(pointer, valid, words=None) -> list:
    """Binary trees (nested lists of token positions, or of `words[b]`) read off pointers [B, T, N].

    Padded steps are skipped, so positions count real tokens only.
    """
    distances = pointer_distances(np.asarray(pointer), np.asarray(valid))
    return [pointer_tree(d, None if words is None else words[b]) for b, d in enumerate(distances)]


def tree_spans(tree) -> set[tuple[int, int]]:
    """The [start, end) token spans of every node over >= 2 tokens of a nested-list tree (root included)."""
    spans: set[tuple[int, int]] = set()
    # Iterative post-order: deep ListOps trees must not hit the recursion limit.
    stack = [(tree, False)]
    position = 0
    starts: list[int] = []
    while stack:
        node, done = stack.pop()
        if not isinstance(node, list):
            position += 1
            continue
        if not node:
            continue
        if done:
            start = starts.pop()
            if position - start >= 2:
                spans.add((start, position))
            continue
        starts.append(position)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node))
    return spans


def remove_leaves(tree, drop: set):
    """`tree` (nested lists) without the leaves in `drop`; a node left with one child becomes that child.

    The release's `remove_bracket` for logic parses: the parenthesis tokens are
    read by the model but are not words of the gold tree, so they leave the
    predicted tree before scoring. A node left empty disappears (None if
    nothing is left). Iterative, like `tree_spans`.
    """
    results: list = []  # finished subtrees, in post-order
    stack = [(tree, False, 0)]
    while stack:
        node, done, first = stack.pop()
        if not isinstance(node, list):
            results.append(None if node in drop else node)
            continue
        if not done:
            stack.append((node, True, len(results)))
            stack.extend((child, False, 0) for child in reversed(node))
            continue
        kept = [child for child in results[first:] if child is not None]
        del results[first:]
        results.append(None if not kept else kept[0] if len(kept) == 1 else kept)
    return results[0]
