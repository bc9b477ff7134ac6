"""A toy family from outside tgjax: a two-layer MLP bigram language model over the built-in sentences.

tests/train/test_toy_family.py copies this file into a temporary package
registered under the entry-point group `tgjax.families` (as `toy_mlp`), and
trains it with `tgjax train`; docs/adding-a-family.md walks through it. Only
public tgjax APIs are used.
"""

import functools

import grain
import jax
import ml_collections
import numpy as np
import optax
from flax import nnx

from tgjax.data.corpora import builtin_treebank
from tgjax.nn.params import dense_init, param
from tgjax.train.task import Selection

BOUNDARY = "</s>"  # the previous word of a sentence's first word, and the next word of its last


@functools.cache
def bigrams(split: str, num_sentences: int) -> tuple[tuple[str, ...], np.ndarray]:
    """(vocabulary, [N, 2] int32 pairs (previous word, word)) of the built-in treebank's `split`; the
    vocabulary is the training split's (words unseen in training are dropped from validation pairs)."""
    vocabulary = _vocabulary(num_sentences)
    index = {word: i for i, word in enumerate(vocabulary)}
    pairs = []
    for tree in builtin_treebank(split, num_sentences):
        words = [BOUNDARY, *tree.leaves(), BOUNDARY]
        pairs += [(index[a], index[b]) for a, b in zip(words, words[1:]) if a in index and b in index]
    return vocabulary, np.asarray(pairs, np.int32)


@functools.cache
def _vocabulary(num_sentences: int) -> tuple[str, ...]:
    return (BOUNDARY, *sorted({w for tree in builtin_treebank("train", num_sentences) for w in tree.leaves()}))


class BigramMLP(nnx.Module):
    """logits [B, V] of the next word given the previous one [B]: embed, ReLU layer, output layer."""

    def __init__(self, vocab_size: int, hidden: int, *, rngs: nnx.Rngs):
        self.embedding = param(rngs, nnx.initializers.normal(0.1), (vocab_size, hidden), ("vocab", "embed"))
        self.w_hidden = param(rngs, dense_init(), (hidden, hidden), ("embed", "mlp"))
        self.b_hidden = param(rngs, nnx.initializers.zeros, (hidden,), ("mlp",))
        self.w_out = param(rngs, dense_init(), (hidden, vocab_size), ("mlp", "vocab"))

    def __call__(self, previous: jax.Array) -> jax.Array:
        hidden = jax.nn.relu(self.embedding[previous] @ self.w_hidden + self.b_hidden)
        return hidden @ self.w_out


class ToyMLPFamily:
    name = "toy_mlp"
    selection = Selection("valid_loss", "min")

    @staticmethod
    def default_config() -> ml_collections.ConfigDict:
        return ml_collections.ConfigDict(dict(model=dict(hidden=32), data=dict(num_sentences=300)))

    def build_model(self, config, rngs: nnx.Rngs) -> nnx.Module:
        vocabulary, _ = bigrams("train", config.data.num_sentences)
        return BigramMLP(len(vocabulary), config.model.hidden, rngs=rngs)

    def loss(self, model, batch, rngs):
        nll = optax.softmax_cross_entropy_with_integer_labels(model(batch["previous"]), batch["word"])
        return nll.mean(), {}

    def train_batches(self, config, shard):
        """Step s's batch: `training.batch_size` pairs drawn with the seed (training.seed, s), this shard's rows."""
        _, pairs = bigrams("train", config.data.num_sentences)
        seed = config.training.seed

        def batch(step):
            rows = np.random.default_rng([seed, step]).integers(0, len(pairs), shard.batch_size)
            mine = pairs[rows[shard.offset:shard.offset + shard.rows]]
            return {"previous": mine[:, 0], "word": mine[:, 1]}

        return grain.MapDataset.range(config.training.num_steps).map(batch)

    def evaluate(self, model, config) -> dict[str, float]:
        _, pairs = bigrams("valid", config.data.num_sentences)
        nll = optax.softmax_cross_entropy_with_integer_labels(model(pairs[:, 0]), pairs[:, 1])
        return {"valid_loss": float(nll.mean())}
