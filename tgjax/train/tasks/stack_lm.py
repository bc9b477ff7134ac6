"""A stack-attention language model on sentences of words (`trainer="stack_lm"`): DuSell & Chiang (ICLR 2024), §7.

The paper's natural-language set-up (§7, Appendix F): each sentence is a
sequence of its own, without context from the sentences before it, read as
`<bos> w_1 .. w_n` and trained to predict `w_1 .. w_n <eos>`; the loss is the
cross-entropy of the words and of `<eos>`. The model is
`tgjax.models.stack_lm.StackTransformerLM` with `causal=True` (5 pre-norm
layers, sinusoidal positions), its middle layer's self-attention replaced by
a stack attention (`model.stack`: "superposition" = Tf+Sup,
"nondeterministic" = Tf+Nd, "none" = the plain transformer Tf). The defaults
are §7's sizes: d_model 256, feedforward 1024, 8 heads, dropout 0.1;
Tf+Sup m = 511; Tf+Nd |Q| = 3, |Γ| = 3, m = 10 (`model.stack_embedding_size`
None picks m by the stack); initialisation as Appendix D.2 with the interval
of F.2, [−0.01, 0.01]; gradients clipped to norm 5, Adam.

The family is a plug-in of the trainer (`tgjax.train.family`): its task is
`FamilyTask` with the vocabulary written into the workdir and recorded in the
checkpoint's meta, so that `tgjax.load` reads the model back as a
`SentenceScorer` (`tgjax.infer.stack_lm`).

Data. The words of each split come from `tgjax.data.word_stream.read_sentences`
(what the ON-LSTM task reads): `data.source` "builtin" (the synthetic
treebank), "text" (one sentence per line), "treebank" (the leaves of each
tree of a bracketed file) or "craft". The vocabulary is
`word_stream.build_vocabulary` of the training split (first appearance, with
`<eos>` and `<unk>`; `data.min_word_count` > 1 maps rare training words to
`<unk>`, so that it is trained), then `<bos>`. Validation words outside it
read as `<unk>` (counted). The softmax covers every id but `<bos>`.

Batches. Every epoch the training sentences are shuffled (a permutation of
(training.seed, epoch) alone), cut into pools of `data.length_pool` batches
whose sentences are sorted by length, so a batch holds sentences of similar
lengths (the paper groups them too), and the batches of the epoch are then
shuffled. A batch is `training.batch_size` sentences, padded at the end to a
multiple of `training.length_bucket` positions (few compiled shapes;
padding comes after every real position, which a causal model and a stack
read left to right never see). Step s's batch is a function of s alone (a
grain dataset), so a resumed run reads exactly the batches an uninterrupted
one would. The sentences left over at an epoch's end (fewer than a batch)
wait for the next epoch's shuffle.

Validation: the mean cross-entropy per predicted token (words and `<eos>`)
over the validation split, and its exponential, the perplexity
(`valid_loss`, `valid_perplexity`; the best checkpoint is the lowest loss).

Where this differs from the paper: its batches hold up to B tokens with B
drawn per run, its learning rate is drawn log-uniformly and halved on a
validation plateau, and it ties the input and output embeddings; here a
batch is a fixed number of sentences, the rate is `training.learning_rate`
(with optional warm-up), and the embeddings are not tied (the CFL models'
layout).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from ml_collections.config_dict import placeholder

from tgjax.data.batching import epoch_order
from tgjax.data.word_stream import BOS, EOS, SOURCES, UNK, build_vocabulary, read_sentences, sentence_batch, split_path
from tgjax.limits import max_words_of
from tgjax.models.stack_lm import StackLMConfig, StackTransformerLM
from tgjax.ops import token_log_probs
from tgjax.train.config import ConfigError, check_choice, check_positive_int, check_range
from tgjax.train.family import FamilyTask
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.task import RunContext, Selection
from tgjax.workdir import WORD_LIST_FILE, word_list_fingerprint

STACKS = ("superposition", "nondeterministic", "none")
# §7: Tf+Sup m = 511; Tf+Nd m = 10 (with |Q| = 3, |Γ| = 3); Tf has no stack.
PAPER_STACK_EMBEDDING_SIZE = {"superposition": 511, "nondeterministic": 10, "none": 32}
DISPLAY_NAMES = {"superposition": "Tf+Sup", "nondeterministic": "Tf+Nd", "none": "Tf"}


# -----------------------------------------------------------------------------
# Data: the sentences of each split, the vocabulary and the ids (no JAX).


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The word lists of the training and validation splits, as ids, with the vocabulary they were read by.

    words: id -> word (`<eos>`, `<unk>` and `<bos>` among them). train / valid: per sentence, its word ids
    (without `<bos>` / `<eos>`). valid is None without a validation split. rare: training words read as
    `<unk>` (`data.min_word_count`); unknown: validation words outside the vocabulary.
    """

    words: tuple[str, ...]
    train: tuple[np.ndarray, ...]
    valid: tuple[np.ndarray, ...] | None
    rare: int
    unknown: int

    @property
    def index(self) -> dict[str, int]:
        return {word: i for i, word in enumerate(self.words)}

    @property
    def bos(self) -> int:
        return self.words.index(BOS)

    @property
    def eos(self) -> int:
        return self.words.index(EOS)


def _ids(sentences: list[list[str]], index: dict[str, int]) -> tuple[tuple[np.ndarray, ...], int]:
    unk = index[UNK]
    ids = tuple(np.asarray([index.get(w, unk) for w in words], np.int32) for words in sentences)
    unknown = sum(1 for words in sentences for w in words if w not in index)
    return ids, unknown


def corpus(data) -> Corpus:
    """The `Corpus` of a config's `data` section (read once per distinct section)."""
    return _corpus(json.dumps(data.to_dict() if hasattr(data, "to_dict") else dict(data), sort_keys=True))


@functools.lru_cache(maxsize=4)
def _corpus(data_json: str) -> Corpus:
    d = ml_collections.ConfigDict(json.loads(data_json))
    read = functools.partial(read_sentences, corpus_seed=d.corpus_seed, max_words=max_words_of(d))
    train = read(d.source, split_path(d, "train"), "train", num_sentences=d.num_train_sentences,
                 key="data.train_path")
    if not train:
        raise ConfigError(f"data.train_path: no training sentences in {split_path(d, 'train')!r}")
    valid = (read(d.source, split_path(d, "valid"), "valid", num_sentences=d.num_valid_sentences,
                  key="data.valid_path") if split_path(d, "valid") else None)
    words = build_vocabulary(train, *([valid] if valid and d.vocabulary_from == "all" else []),
                             min_count=d.min_word_count)
    if BOS in words:
        raise ConfigError(f"the data holds the word {BOS!r}, which this family reserves for the start of a sentence")
    words.append(BOS)
    index = {w: i for i, w in enumerate(words)}
    train_ids, rare = _ids(train, index)
    valid_ids, unknown = _ids(valid, index) if valid is not None else (None, 0)
    return Corpus(tuple(words), train_ids, valid_ids, rare, unknown)


def epoch_batches(lengths: np.ndarray, batch_size: int, pool: int, seed: int, epoch: int) -> np.ndarray:
    """[batches, batch_size] sentence indices of one epoch: a shuffle, pools of `pool` batches sorted by length
    (similar lengths batched together), the batches shuffled again; the left-over sentences are left out."""
    count = len(lengths) // batch_size
    order = epoch_order(len(lengths), seed, epoch)[:count * batch_size]
    span = pool * batch_size
    grouped = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                              for chunk in np.split(order, range(span, len(order), span))]) if count else order
    batches = grouped.reshape(count, batch_size)
    return batches[np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(epoch, 1))).permutation(count)]


# -----------------------------------------------------------------------------
# Config.


def default_config() -> ml_collections.ConfigDict:
    """The family's keys at §7's set-up (the trainer adds its `training` and `evaluation` keys; a config names
    its corpus: the paths are empty)."""
    return ml_collections.ConfigDict(dict(
        model=dict(stack="superposition", num_layers=5, d_model=256, num_heads=8, feedforward_size=1024,
                   dropout_rate=0.1, stack_layer=placeholder(int), stack_embedding_size=placeholder(int),
                   num_states=3, stack_alphabet_size=3, nd_num_blocks=placeholder(int), pushed_vectors="released",
                   init="released", init_scale=0.01),
        data=dict(source="text", train_path="", valid_path="", craft_dir="", num_train_sentences=placeholder(int),
                  num_valid_sentences=placeholder(int), corpus_seed=0, min_word_count=1, vocabulary_from="train",
                  length_pool=50),
        training=dict(batch_size=32, learning_rate=1e-4, clip_grad_norm=5.0, num_steps=10000, length_bucket=16),
        evaluation=dict(interval_steps=1000, batch_size=32),
    ))


def model_config(config, vocab_size: int) -> StackLMConfig:
    """The `StackLMConfig` of `config.model` for a vocabulary of `vocab_size` ids, the last `<bos>` (embedded,
    never predicted)."""
    m = config.model
    size = m.stack_embedding_size
    try:
        return StackLMConfig(
            input_vocab_size=vocab_size, output_ids=tuple(range(vocab_size - 1)), num_layers=m.num_layers,
            d_model=m.d_model, num_heads=m.num_heads, feedforward_size=m.feedforward_size,
            dropout_rate=m.dropout_rate, stack=m.stack, stack_layer=m.stack_layer,
            stack_embedding_size=PAPER_STACK_EMBEDDING_SIZE.get(m.stack, 32) if size is None else size,
            num_states=m.num_states, stack_alphabet_size=m.stack_alphabet_size, nd_num_blocks=m.nd_num_blocks,
            pushed_vectors=m.pushed_vectors, causal=True, init_scale=m.init_scale, init=m.init)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model: {e}") from e


def validate_config(config) -> None:
    """The keys this family reads, checked before anything runs; `ConfigError` names the key."""
    check_choice(config, "model.stack", STACKS)
    check_choice(config, "model.pushed_vectors", ("released", "paper"))
    check_choice(config, "model.init", ("released", "xavier"))
    for key in ("num_layers", "d_model", "num_heads", "feedforward_size", "num_states", "stack_alphabet_size"):
        check_positive_int(config, f"model.{key}")
    check_range(config, "model.dropout_rate", 0, 1, high_open=True)
    check_range(config, "model.init_scale", low=0, low_open=True)
    if config.model.stack_embedding_size is not None:
        check_positive_int(config, "model.stack_embedding_size")
    model_config(config, 4)
    check_choice(config, "data.source", SOURCES)
    check_choice(config, "data.vocabulary_from", ("train", "all"))
    for key in ("data.min_word_count", "data.length_pool", "training.length_bucket", "evaluation.batch_size"):
        check_positive_int(config, key)


# -----------------------------------------------------------------------------
# The family.


def token_nll(model, batch) -> tuple[jax.Array, jax.Array]:
    """(Σ −log p over the real positions, their number) of a `sentence_batch`."""
    log_probs = token_log_probs(model(batch["inputs"]), batch["targets"])
    mask = batch["mask"]
    return -jnp.sum(jnp.where(mask > 0, log_probs, 0.0)), jnp.sum(mask)


class StackLMFamily:
    """The model, loss, batches and validation of the family (`tgjax.train.family.Family`)."""

    name = "stack_lm"
    selection = Selection("valid_loss", "min")
    default_config = staticmethod(default_config)
    validate_config = staticmethod(validate_config)

    def __init__(self):
        self._eval: tuple[Any, Any] | None = None  # (graphdef, jitted sums), made at the first validation

    def build_model(self, config, rngs: nnx.Rngs) -> nnx.Module:
        return StackTransformerLM(model_config(config, len(corpus(config.data).words)), rngs=rngs)

    def loss(self, model, batch, rngs) -> tuple[jax.Array, dict]:
        """Mean cross-entropy per predicted token (words and `<eos>`) of the batch."""
        total, count = token_nll(model, batch)
        return total / jnp.maximum(count, 1.0), {"sum_nll": total, "num_tokens": count}

    def train_batches(self, config, shard) -> grain.MapDataset:
        """Step s + 1's batch is item s: epoch s // per_epoch of `epoch_batches`, this process's rows."""
        data = corpus(config.data)
        t = config.training
        lengths = np.asarray([len(s) for s in data.train])
        per_epoch = len(lengths) // t.batch_size
        if per_epoch == 0:
            raise ConfigError(f"training.batch_size={t.batch_size} is more than the {len(lengths)} training "
                              f"sentences: lower it or give more data")
        plans = functools.lru_cache(maxsize=2)(
            lambda epoch: epoch_batches(lengths, t.batch_size, config.data.length_pool, t.seed, epoch))

        def batch(step: int) -> dict[str, np.ndarray]:
            rows = plans(step // per_epoch)[step % per_epoch][shard.offset:shard.offset + shard.rows]
            return sentence_batch([data.train[i] for i in rows], data.bos, data.eos, shard.rows, t.length_bucket)

        return grain.MapDataset.range(t.num_steps).map(batch)

    def validation_batches(self, config) -> list[dict[str, np.ndarray]]:
        """The validation split in batches of `evaluation.batch_size` sentences, in order of length."""
        data = corpus(config.data)
        order = np.argsort([len(s) for s in data.valid], kind="stable")
        size = config.evaluation.batch_size
        return [sentence_batch([data.valid[i] for i in order[start:start + size]], data.bos, data.eos, size,
                               config.training.length_bucket) for start in range(0, len(order), size)]

    def evaluate(self, model, config) -> dict[str, float]:
        """valid_loss: the mean cross-entropy per predicted token of the validation split; valid_perplexity."""
        graphdef, state = nnx.split(model)
        if self._eval is None or self._eval[0] != graphdef:
            self._eval = (graphdef, jax.jit(lambda state, batch: token_nll(nnx.merge(graphdef, state), batch)))
        sums = [self._eval[1](state, batch) for batch in self.validation_batches(config)]
        totals, counts = jax.device_get(([s[0] for s in sums], [s[1] for s in sums]))
        tokens = max(float(sum(counts)), 1.0)
        loss = math.fsum(float(t) for t in totals) / tokens
        return {"valid_loss": loss, "valid_perplexity": math.exp(min(loss, 700.0))}

    def describe(self, config) -> list[str]:
        data = corpus(config.data)
        m = model_config(config, len(data.words))
        stack = {"superposition": f", m {m.stack_embedding_size}",
                 "nondeterministic": f", |Q| {m.num_states}, |Γ| {m.stack_alphabet_size}, m {m.stack_embedding_size}",
                 "none": ""}[m.stack]
        lines = [f"{DISPLAY_NAMES[m.stack]} on words: d_model {m.d_model}, {m.num_layers} layers, {m.num_heads} "
                 f"heads, stack {m.stack}{stack}; vocabulary {len(data.words)} ids; {len(data.train):,} training "
                 f"sentences ({len(data.train) // config.training.batch_size} batches of "
                 f"{config.training.batch_size} per epoch)"]
        if data.rare:
            lines.append(f"note: {data.rare} training word(s) seen fewer than {config.data.min_word_count} times "
                         f"read as {UNK}")
        if data.valid is not None and data.unknown:
            lines.append(f"note: {data.unknown} validation word(s) of {sum(len(s) for s in data.valid)} are outside "
                         f"the training vocabulary and read as {UNK}")
        return lines


class StackLMTask(FamilyTask):
    """The trainer's task of the family: `FamilyTask`, with the vocabulary in the workdir (`vocab.txt`) and in
    the checkpoint's meta (`vocab_sha256`, and `model`: the `StackLMConfig`), and the loss per token logged."""

    family_class = StackLMFamily

    @classmethod
    def describe(cls, config) -> ModelInfo:
        return dataclasses.replace(super().describe(config), vocab_size=len(corpus(config.data).words),
                                   vocab_source=f"built from {split_path(config.data, 'train')}")

    def setup(self, run: RunContext) -> None:
        data = corpus(self.config.data)
        self.words = list(data.words)
        self.model_config = model_config(self.config, len(self.words))
        self.vocab_fingerprint = word_list_fingerprint(self.words)
        path = run.workdir / WORD_LIST_FILE
        text = "".join(f"{w}\n" for w in self.words)
        if run.resuming and path.exists() and path.read_text(encoding="utf-8") != text:
            raise ConfigError(f"{path} is not the vocabulary of this data ({len(self.words)} words now); the data "
                              f"changed since the checkpoints were written: restore it or use a new --workdir")
        if run.process_index == 0:
            path.write_text(text, encoding="utf-8")
        super().setup(run)

    def has_validation(self) -> bool:
        return corpus(self.config.data).valid is not None

    def new_window(self) -> SummingWindow:
        """Loss per predicted token (and its perplexity) over the logging interval."""
        return SummingWindow(ratios={"loss": ("sum_nll", "num_tokens")}, tokens="num_tokens", perplexity_of="loss")

    def checkpoint_meta(self) -> dict[str, Any]:
        return {**super().checkpoint_meta(), "model": dataclasses.asdict(self.model_config),
                "vocab_sha256": self.vocab_fingerprint, "vocab_size": len(self.words)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        super().check_checkpoint(meta, step, directory)
        if meta.get("vocab_sha256") != self.vocab_fingerprint:
            raise ConfigError(f"checkpoint step {step} in {directory} was trained with another vocabulary "
                              f"({meta.get('vocab_size')} words there, {len(self.words)} now): use the original "
                              f"data or a new --workdir")


def describe(config) -> ModelInfo:
    """What `tgjax info` prints (the task's `describe`)."""
    return StackLMTask.describe(config)


__all__ = ["BOS", "Corpus", "StackLMFamily", "StackLMTask", "corpus", "default_config", "epoch_batches",
           "model_config", "token_nll", "validate_config"]
