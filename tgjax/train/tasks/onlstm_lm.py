"""The ON-LSTM word-level language-modelling task (`trainer="onlstm_lm"`): the release's AWD-style recipe.

What the release does (`released-code.md` §2.3), and how it maps onto the
shared trainer:

- Data: one sentence per line, split on whitespace, `<eos>` appended to every
  line (an empty line is a lone `<eos>`), all lines concatenated. Sources:
  `data.source = "builtin"` (the synthetic treebank's sentences), `"text"`
  (plain-text files, e.g. Mikolov's PTB `train.txt` / `valid.txt`) or
  `"treebank"` (the words of a bracketed treebank, e.g. Tale of Two Cities)
  or `"craft"` (CRAFT's train / dev articles by their id lists under
  `data.craft_dir`, as UDGN's task reads them; words in the release's form,
  as `tgjax eval unsupervised-parse` feeds them: only the release's 36 word
  tags, lower-cased, digit runs -> `N`; sentences left empty or with a word
  outside a POS tag are skipped).
  The vocabulary is built from the training split in order of first
  appearance, plus `<unk>`; validation words outside it become `<unk>`
  (counted and reported); `data.min_word_count` > 1 also maps rare training
  words to `<unk>` so that it is trained. The release builds its dictionary from all three
  splits (`data.vocabulary_from = "all"` does that; on Mikolov's PTB the two
  agree, its valid/test have no unseen words).
- Batchify: the token stream is cut into `batch_size` contiguous columns,
  `[batch, rows]` here (the release's `[rows, batch]`); the remainder of
  `len % batch` tokens is dropped (reported).
- Variable-length BPTT: each step draws base = bptt with probability 0.95,
  else bptt / 2, then seq_len = max(5, int(N(base, 5))) (int() truncates).
  The segment is rows [i, i + min(seq_len, rows - 1 - i)), targets shifted
  by one; the epoch runs while i < rows - 2. The learning rate of the step is
  lr * seq_len / bptt (the sampled seq_len, even for a truncated last
  segment). Draws come from a stream seeded by (training.seed, epoch), so an
  epoch's segments are known in advance: each epoch is a grain dataset of
  its segments (`tgjax.data.batching.EpochBatches`), a data position
  {"epoch", "step"} fixes everything, and resume replays nothing. The
  readers, the vocabulary and batchify are `tgjax.data.word_stream`'s
  (no JAX). Segments are padded at the end to a multiple of
  `training.length_bucket` (a mask keeps padding out of the loss, the
  penalties and the carried state) so that XLA compiles a few shapes
  instead of one per length.
- The hidden state is carried from segment to segment within an epoch
  (gradients stopped) and reset to zeros at each epoch's first segment; it
  lives in the checkpointed state (`ParamsState.carry`), so a resumed run
  is bit-exact.
- Loss: mean cross-entropy per token + alpha * AR + beta * TAR
  (`tgjax.models.onlstm_lm.activation_penalties`). Update: the gradient
  clipped to global norm `clip` (PyTorch's clip_grad_norm_: scale by
  clip / (norm + 1e-6) when that is < 1), plus weight_decay * params, then
  params -= lr_t * grad (plain SGD, no momentum). The step is the trainer's
  one step (`tgjax.train.step`): the clip and the decay are the optax
  transformation, lr_t its `applied_rate` hook, the hidden state its carry.
- NT-ASGD: after each validation (one per epoch, as the release), while
  still on SGD: switch to averaged SGD when more than `nonmono` validations
  came before and this one is worse than the best of all but the last
  `nonmono` of them. ASGD with t0 = 0 and lambda = 0 is the same SGD step
  plus an average of the iterates. By default the average is AWD-LSTM's
  Algorithm 1 (Merity et al. 2018, which the ON-LSTM paper follows):
  (1 / (k - T + 1)) sum_{i=T..k} w_i, the mean of the parameters w_T at the
  validation that triggered and of every iterate after it. From then on
  validation (and the selection of the best checkpoint) uses the averaged
  parameters. `training.asgd_as_released = True` is the release instead:
  PyTorch's ASGD of its era, whose averaging weight lags one step (mu =
  1 / max(1, n - 1) at the n-th ASGD step), so the mean holds the iterates
  from the second ASGD step on (neither w_T nor the first ASGD iterate); and
  whose step size lags one step behind the seq_len rescale (it computes
  eta for step n + 1 from the rate main.py set for step n), so ASGD step
  n >= 2 moves by lr * (seq_len of the previous segment) / bptt (batches
  carry `previous_lr_scale` for it). The mean and its count are
  `ParamsState.average` = {"params", "count"}, kept by the step's average
  hook; the host hands each step "ASGD is on".
- Validation: the validation stream batchified at `evaluation.batch_size`
  (the release's 10), fixed segments of `evaluation.bptt`, hidden state
  carried from zero, eval-mode dropouts; perplexity = exp(mean per-token
  cross-entropy over every predicted token). (The release divides the
  summed loss by the number of rows, one more than the predicted rows: a
  bias of 1 / rows, 0.01% on PTB; not reproduced.)
- When to validate: `evaluation.every_epoch = True` validates at the end of
  every epoch (the release). The trainer asks for validation at steps
  multiple of `validation_interval`; this task sets that attribute to the
  step that ends the current epoch (`EpochEnds`), known in advance.
  `every_epoch = False` validates every `evaluation.interval_steps` steps
  instead.
- Length of the run: `training.num_epochs` (the release counts epochs), or
  `training.num_steps` when `num_epochs` is None.

Workdir: `vocab.txt` (one word per line, id = line number) beside the
checkpoints; the parsing evaluation reads it with the model.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, NamedTuple

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from ml_collections.config_dict import placeholder

from tgjax.data.batching import EpochBatches, local_rows, round_up
from tgjax.data.word_stream import (
    SOURCES,
    UNK,
    batchify,
    build_vocabulary,
    encode,
    read_sentences,
    split_path,
)
from tgjax.limits import max_words_of
from tgjax.models.onlstm_lm import OnLSTMLM, OnLSTMLMConfig, activation_penalties
from tgjax.progress import format_duration
from tgjax.train import sharding as shd
from tgjax.train.config import (
    ConfigError,
    check_choice,
    check_positive_int,
    check_range,
    family_config,
    to_json_dict,
)
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.params_state import ParamsState, params_layout, with_shardings
from tgjax.train.schedules import StepSchedule
from tgjax.train.step import make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals
from tgjax.workdir import WORD_LIST_FILE, word_list_fingerprint

_BPTT_STREAM = 0x0B77  # separates the seq_len draws from any other stream of the same seed

# -----------------------------------------------------------------------------
# Variable-length BPTT.


@dataclasses.dataclass(frozen=True)
class BPTTSettings:
    bptt: int = 70
    short_probability: float = 0.05  # the release: bptt / 2 with probability 1 - 0.95
    std: float = 5.0
    min_length: int = 5

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` sampled seq_lens: max(min_length, int(N(base, std))), base = bptt or bptt / 2."""
        uniform = rng.random(count)
        normal = rng.standard_normal(count)
        base = np.where(uniform < 1.0 - self.short_probability, float(self.bptt), self.bptt / 2.0)
        return np.maximum(self.min_length, np.trunc(base + self.std * normal)).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """One epoch's segments: start rows, lengths (truncated at the end of the data) and the sampled seq_lens."""

    starts: np.ndarray
    lengths: np.ndarray
    sampled: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)


def epoch_plan(num_rows: int, settings: BPTTSettings, seed: int, epoch: int) -> EpochPlan:
    """The release's loop: while i < rows - 2, segment [i, i + min(seq_len, rows - 1 - i)) and i += seq_len."""
    if num_rows < 3:
        raise ValueError(f"the training stream has {num_rows} rows per batch column; at least 3 are needed "
                         f"(fewer sentences than the batch size?)")
    rng = np.random.default_rng([_BPTT_STREAM, seed, epoch])
    sampled = settings.sample(rng, num_rows // settings.min_length + 2)  # enough: every draw is >= min_length
    starts = np.concatenate([[0], np.cumsum(sampled)[:-1]])
    count = int(np.sum(starts < num_rows - 2))
    starts, sampled = starts[:count], sampled[:count]
    return EpochPlan(starts, np.minimum(sampled, num_rows - 1 - starts), sampled)


def segment_batch(data: np.ndarray, start: int, length: int, padded: int) -> dict[str, np.ndarray]:
    """inputs/targets [batch, padded] int32 and mask [batch, padded] float32 for rows [start, start + length)."""
    batch = data.shape[0]
    inputs = np.zeros((batch, padded), np.int32)
    targets = np.zeros((batch, padded), np.int32)
    mask = np.zeros((batch, padded), np.float32)
    inputs[:, :length] = data[:, start:start + length]
    targets[:, :length] = data[:, start + 1:start + 1 + length]
    mask[:, :length] = 1.0
    return {"inputs": inputs, "targets": targets, "mask": mask}


class Segment(NamedTuple):
    """One training step's segment: rows [start, start + length), its sampled seq_len and the previous
    segment's (the last of the previous epoch at an epoch's start; its own at the very first), and whether it
    is its epoch's first."""

    start: int
    length: int
    sampled: int
    previous: int
    first: bool


def epoch_segments(plans, epoch: int) -> list[Segment]:
    """The segments of epoch `epoch`, in order, from the epochs' plans (`plans(e)` -> `EpochPlan`)."""
    plan = plans(epoch)
    sampled = plan.sampled.tolist()
    before = int(plans(epoch - 1).sampled[-1]) if epoch > 0 else sampled[0]
    return [Segment(start, length, now, previous, step == 0) for step, (start, length, now, previous) in
            enumerate(zip(plan.starts.tolist(), plan.lengths.tolist(), sampled, [before, *sampled[:-1]]))]


def segment_training_batch(data: np.ndarray, segment: Segment, bptt: int, bucket: int) -> dict[str, np.ndarray]:
    """A training batch: inputs, targets, mask [batch, P] (P: the length rounded up to a multiple of `bucket`);
    lr_scale [batch] (sampled seq_len / bptt, the same in every row) and previous_lr_scale [batch] (the
    previous segment's, for the release's ASGD); reset [batch] (1 at an epoch's first segment: the carried
    state restarts from zeros)."""
    batch = segment_batch(data, segment.start, segment.length, round_up(segment.length, bucket))
    rows = data.shape[0]
    batch["lr_scale"] = np.full((rows,), segment.sampled / bptt, np.float32)
    batch["previous_lr_scale"] = np.full((rows,), segment.previous / bptt, np.float32)
    batch["reset"] = np.full((rows,), segment.first, np.bool_)
    return batch


def bptt_batches(data: np.ndarray, plans, settings: BPTTSettings, bucket: int, position: dict | None,
                 process_index: int = 0, process_count: int = 1) -> EpochBatches:
    """The training batches of every epoch in turn (`segment_training_batch`, this process's rows), from a
    position {"epoch", "step"} (the segments of that epoch already given): epoch e is a grain dataset over
    `epoch_segments(plans, e)`."""

    def epoch_dataset(epoch: int) -> grain.MapDataset:
        return grain.MapDataset.source(epoch_segments(plans, epoch)).map(
            lambda segment: local_rows(segment_training_batch(data, segment, settings.bptt, bucket),
                                       process_index, process_count))

    return EpochBatches(epoch_dataset, position)


class EpochEnds:
    """Global step numbers: where each epoch ends, and the step of a data position (from the epochs' plans)."""

    def __init__(self, plans):
        self.plans = plans
        self.ends: list[int] = []  # ends[e] = global step after the last segment of epoch e

    def end_of(self, epoch: int) -> int:
        while len(self.ends) <= epoch:
            self.ends.append((self.ends[-1] if self.ends else 0) + len(self.plans(len(self.ends))))
        return self.ends[epoch]

    def step_of(self, position: dict | None) -> int:
        if not position:
            return 0
        epoch = int(position["epoch"])
        return (self.end_of(epoch - 1) if epoch else 0) + int(position["step"])

    def next_end(self, step: int) -> int:
        """The first epoch end >= step."""
        epoch = 0
        while self.end_of(epoch) < step:
            epoch += 1
        return self.end_of(epoch)


# -----------------------------------------------------------------------------
# NT-ASGD.


def nt_asgd_triggered(history: list[float], value: float, nonmono: int) -> bool:
    """The release's non-monotone trigger: len(history) > nonmono and value > min(history[:-nonmono]).

    `nonmono` must be >= 1 (validated with the config): with 0 the release's slice `[:-0]` is empty.
    """
    if nonmono < 1:
        raise ValueError(f"nonmono must be >= 1, got {nonmono}")
    return len(history) > nonmono and value > min(history[:-nonmono])


def asgd_average(average: dict, params_before, params_after, active, release_lag: bool) -> dict:
    """One step of ASGD's running mean (the release's `ax`): {"params": shaped like params, "count": int32 []} -> next.

    count: iterates in the mean (paper) or ASGD steps so far (release); 0 before ASGD, when the mean is zeros.

    Paper (AWD Algorithm 1): the first active step seeds the mean with the
    parameters before it (w_T) and counts iterates in the mean. Release
    (`release_lag`): PyTorch's ASGD, counting ASGD steps n and weighting the
    newest iterate by 1 / max(1, n - 1).
    """
    mean, num_averaged = average["params"], average["count"]
    if release_lag:
        count = num_averaged + active.astype(jnp.int32)
        weight = 1.0 / jnp.maximum(1.0, count.astype(jnp.float32) - 1.0)
        new = jax.tree.map(lambda a, p: jnp.where(active, a + (p - a) * weight, a), mean, params_after)
        return {"params": new, "count": count}
    first = active & (num_averaged == 0)
    base = jax.tree.map(lambda a, p: jnp.where(first, p, a), mean, params_before)
    count = jnp.where(first, 1, num_averaged) + 1
    weight = 1.0 / count.astype(jnp.float32)
    new = jax.tree.map(lambda a, p: jnp.where(active, a + (p - a) * weight, a), base, params_after)
    return {"params": new, "count": jnp.where(active, count, num_averaged)}


def initial_average(params) -> dict:
    """The ASGD average before any ASGD step: zeros shaped like `params`, count 0 (`ParamsState.average`)."""
    return {"params": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)}


# -----------------------------------------------------------------------------
# The step: the trainer's one step (`tgjax.train.step`) with the carry, applied-rate and average hooks.


def _hidden_dict(state_list) -> dict:
    return {f"layer_{layer}": {"h": h, "c": c} for layer, (h, c) in enumerate(state_list)}


def _hidden_list(hidden: dict) -> list:
    return [(hidden[f"layer_{layer}"]["h"], hidden[f"layer_{layer}"]["c"]) for layer in range(len(hidden))]


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The optimisation settings a step needs."""

    lr: float
    weight_decay: float
    clip: float
    alpha: float
    beta: float
    asgd_as_released: bool


def token_nll(logits, targets, mask):
    """(sum of per-token cross-entropy over real tokens, number of real tokens)."""
    nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    return jnp.sum(nll * mask), jnp.sum(mask)


def clip_like_torch(max_norm: float) -> optax.GradientTransformation:
    """PyTorch 0.4's clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is < 1 (optax's
    `clip_by_global_norm` scales by max_norm / norm, without the 1e-6)."""

    def update(updates, state, params=None):
        del params
        coefficient = max_norm / (optax.tree.norm(updates) + 1e-6)
        scale = jnp.where(coefficient < 1.0, coefficient, 1.0)
        return jax.tree.map(lambda g: g * scale, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def optimizer(recipe: Recipe) -> optax.GradientTransformation:
    """The update's direction, clip(g) + weight_decay * params; the step moves params by -lr_t times it (SGD)."""
    return optax.chain(clip_like_torch(recipe.clip), optax.add_decayed_weights(recipe.weight_decay))


def lm_loss(recipe: Recipe):
    """The loss of the carry hook: (model, batch, key, hidden) -> (objective, metrics, next hidden).

    batch: inputs / targets / mask [B, T], reset [B] (an epoch's first segment: the hidden state restarts from
    zeros). hidden: {"layer_l": {"h", "c": [B, H_l]}}. The objective is the mean cross-entropy per token plus
    the AR / TAR penalties; the metric "loss" is the cross-entropy alone.
    """

    def loss(model, batch, key, hidden):
        reset = batch["reset"][:, None]
        hidden = jax.tree.map(lambda a: jnp.where(reset, jnp.zeros_like(a), a), hidden)
        mask = batch["mask"]
        logits, new_hidden, aux = model(batch["inputs"], _hidden_list(hidden), deterministic=False, key=key,
                                        mask=mask)
        total, count = token_nll(logits, batch["targets"], mask)
        ce = total / jnp.maximum(count, 1.0)
        ar, tar = activation_penalties(aux["raw_outputs"][-1], mask)
        objective = ce + recipe.alpha * ar + recipe.beta * tar
        metrics = {"loss": ce, "objective": objective, "sum_nll": total, "num_tokens": count}
        return objective, metrics, _hidden_dict(new_hidden)

    return loss


def make_step(graphdef, recipe: Recipe):
    """`(state, rest, batch, asgd_active) -> (state, metrics)`, not jitted: `tgjax.train.step.make_train_step`.

    state: a `ParamsState` with carry = the hidden state and average = `asgd_average`'s dict; rest: None (the
    model has parameters only; it takes its dropout key explicitly); asgd_active: bool [], the host's
    "NT-ASGD has switched". The step's key folds in the updates done before it, as this task always drew.
    """

    def applied_rate(state, batch, asgd_active):
        """lr * seq_len / bptt of this segment; PyTorch's ASGD (released) from its second step: the previous one's."""
        scale = batch["lr_scale"][0]
        if recipe.asgd_as_released:
            scale = jnp.where(asgd_active & (state.average["count"] >= 1), batch["previous_lr_scale"][0], scale)
        return recipe.lr * scale

    def average(average, params_before, params_after, batch, asgd_active):
        return asgd_average(average, params_before, params_after, asgd_active, recipe.asgd_as_released)

    return make_train_step(graphdef, lm_loss(recipe), optimizer(recipe), applied_rate=applied_rate, carry=True,
                           average=average, draw_key_at="updates_done")


def make_eval_fn(graphdef):
    """`(params, hidden, batch) -> (sum nll, tokens, hidden)`, deterministic (eval-mode dropouts)."""

    def eval_fn(params, hidden, batch):
        model = nnx.merge(graphdef, params)
        logits, new_hidden, _ = model(batch["inputs"], _hidden_list(hidden), deterministic=True, mask=batch["mask"])
        total, count = token_nll(logits, batch["targets"], batch["mask"])
        return total, count, _hidden_dict(new_hidden)

    return eval_fn


# -----------------------------------------------------------------------------
# Config.

def default_config() -> ml_collections.ConfigDict:
    """Every key this task reads, at the release's PTB recipe (released-code.md §2.3); configs set their own.

    3 layers [400 -> 1150 -> 1150 -> 400], chunk 10; dropouts output 0.45,
    between layers 0.3, input 0.5, embedding 0.1, DropConnect 0.45; AR 2, TAR 1;
    SGD lr 30, weight decay 1.2e-6, clip 0.25, batch 20, BPTT 70 with the
    release's random lengths; NT-ASGD with nonmono 5; 1000 epochs; validation
    batch 10 every epoch. Data paths are empty: a config names its corpus.
    """
    return family_config(dict(
        trainer="onlstm_lm",
        model=dict(
            embedding_size=400, hidden_size=1150, num_layers=3, chunk_size=10,
            dropout=0.45, dropout_hidden=0.3, dropout_input=0.5, dropout_embedding=0.1, weight_drop=0.45,
            ordered=True,  # False: a plain LSTM in the same layout (the parsing claim's same-budget baseline)
        ),
        data=dict(
            source="text", train_path="", valid_path="", craft_dir="",
            num_train_sentences=placeholder(int), num_valid_sentences=placeholder(int), corpus_seed=0,
            min_word_count=1,
            vocabulary_from="train",
        ),
        training=dict(
            batch_size=20, bptt=70, bptt_short_probability=0.05, bptt_std=5.0, min_seq_len=5,
            length_bucket=16,  # pad segments to a multiple of 16 steps: a few compiled shapes
            lr=30.0, weight_decay=1.2e-6, clip=0.25, alpha=2.0, beta=1.0,
            asgd=True, nonmono=5, asgd_as_released=False,
            num_epochs=1000, num_steps=placeholder(int), seed=141,  # one of the two counts
        ),
        evaluation=dict(every_epoch=True, interval_steps=0, batch_size=10, bptt=70),
    ), checkpointing=dict(interval_steps=1000, max_to_keep=2, save_memory=True), logging=dict(interval_steps=200))


_MODEL_KEYS = ("embedding_size", "hidden_size", "num_layers", "chunk_size", "dropout", "dropout_hidden",
               "dropout_input", "dropout_embedding", "weight_drop", "ordered")


def model_config(config, vocab_size: int) -> OnLSTMLMConfig:
    try:
        return OnLSTMLMConfig(vocab_size=vocab_size, **{k: config.model[k] for k in _MODEL_KEYS})
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model: {e}") from e


def validate_config(config) -> None:
    """The values this task reads, checked before anything runs (every key is there: the config was merged over
    `default_config()`); `ConfigError` names the key."""
    model_config(config, 2)
    check_choice(config, "data.source", SOURCES)
    check_choice(config, "data.vocabulary_from", ("train", "all"))
    check_positive_int(config, "data.min_word_count")
    for k in ("batch_size", "bptt", "length_bucket", "min_seq_len", "nonmono"):
        check_positive_int(config, f"training.{k}")
    check_range(config, "training.bptt_short_probability", 0, 1)
    check_range(config, "training.lr", low=0, low_open=True)
    check_range(config, "training.clip", low=0, low_open=True)
    epochs, steps = config.training.num_epochs, config.training.num_steps
    if (epochs is None) == (steps is None):
        raise ConfigError(f"set exactly one of training.num_epochs ({epochs!r}) and training.num_steps ({steps!r})")
    check_positive_int(config, "training.num_epochs" if epochs is not None else "training.num_steps")
    for k in ("batch_size", "bptt"):
        check_positive_int(config, f"evaluation.{k}")
    if not config.evaluation.every_epoch:
        check_positive_int(config, "evaluation.interval_steps")
    check_positive_int(config, "checkpointing.interval_steps")
    check_positive_int(config, "logging.interval_steps")


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: parameters, the vocabulary (built from the training data) and the model's sizes."""
    validate_config(config)
    d = config.data
    train = read_sentences(d.source, split_path(d, "train"), "train", num_sentences=d.num_train_sentences,
                           corpus_seed=d.corpus_seed, max_words=max_words_of(d), key="data.train_path")
    splits = [train]
    if d.vocabulary_from == "all" and split_path(d, "valid"):
        splits.append(read_sentences(d.source, split_path(d, "valid"), "valid", num_sentences=d.num_valid_sentences,
                                     corpus_seed=d.corpus_seed, max_words=max_words_of(d), key="data.valid_path"))
    words = build_vocabulary(*splits, min_count=d.min_word_count)
    model_cfg = model_config(config, len(words))
    return ModelInfo("onlstm_lm", len(words), f"built from {split_path(d, 'train')}", dataclasses.asdict(model_cfg),
                     lambda rngs: OnLSTMLM(model_cfg, rngs=rngs))


# -----------------------------------------------------------------------------
# The task.


class OnLSTMLMTask:
    """See the module docstring."""

    name = "onlstm_lm"
    selection = Selection("valid_perplexity", "min")
    default_config = staticmethod(default_config)

    def __init__(self, config):
        self.config = config
        self.schedule = StepSchedule()  # the rate is constant but for the seq_len rescale; NT-ASGD is not a decay
        read_intervals(self, config, fixed_steps=False)
        self.checkpoint_interval = config.checkpointing.interval_steps
        self.num_steps = config.training.num_steps or 0  # set from num_epochs in setup
        self.asgd_start_step: int | None = None  # the step after whose validation ASGD began
        self.valid_history: list[float] = []  # validation losses while on SGD (the release's best_val_loss list)
        self._steps_done = 0
        self._fixed_interval = None if config.evaluation.every_epoch else int(config.evaluation.interval_steps)

    # -- before anything runs ----------------------------------------------------------------

    def validate_config(self, config) -> None:
        validate_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.config.training.batch_size, mesh, "training.batch_size")
        shd.check_batch_divides(self.config.evaluation.batch_size, mesh, "evaluation.batch_size")

    def setup(self, run: RunContext) -> None:
        c = self.config
        self.run = run
        d = c.data
        train = read_sentences(d.source, split_path(d, "train"), "train", num_sentences=d.num_train_sentences,
                               corpus_seed=d.corpus_seed, max_words=max_words_of(d), key="data.train_path")
        valid = (read_sentences(d.source, split_path(d, "valid"), "valid", num_sentences=d.num_valid_sentences,
                                corpus_seed=d.corpus_seed, max_words=max_words_of(d), key="data.valid_path")
                 if split_path(d, "valid") else None)
        self.words = build_vocabulary(train, *([valid] if valid and d.vocabulary_from == "all" else []),
                                      min_count=d.min_word_count)
        index = {w: i for i, w in enumerate(self.words)}
        self.vocab_fingerprint = word_list_fingerprint(self.words)
        self._write_vocabulary(run)
        train_ids, rare = encode(train, index)
        if rare:
            run.say(f"note: {rare} training word(s) seen fewer than {d.min_word_count} times read as {UNK}")
        self.train_data, dropped = batchify(train_ids, c.training.batch_size)
        self.num_train_tokens = int(train_ids.size)
        if dropped:
            run.say(f"note: the last {dropped} training token(s) do not fill a batch column and are dropped "
                    f"(as the release's batchify)")
        self.valid_data = None
        if valid is not None:
            valid_ids, unknown = encode(valid, index)
            if unknown:
                run.say(f"note: {unknown} validation word(s) of {valid_ids.size} are outside the training "
                        f"vocabulary and read as {UNK}")
            self.valid_data, dropped_valid = batchify(valid_ids, c.evaluation.batch_size)
            if dropped_valid:
                run.say(f"note: the last {dropped_valid} validation token(s) do not fill a batch column and are "
                        f"not scored")
            counts = np.bincount(train_ids, minlength=len(self.words)) + 1.0  # add-one: <unk> may be unseen
            log_probs = np.log(counts / counts.sum())
            self.unigram = float(-log_probs[self.valid_data].mean())
        else:
            self.unigram = None
        t = c.training
        self.settings = BPTTSettings(bptt=t.bptt, short_probability=t.bptt_short_probability, std=t.bptt_std,
                                     min_length=t.min_seq_len)
        rows = self.train_data.shape[1]
        cache: dict[int, EpochPlan] = {}

        def plans(epoch: int) -> EpochPlan:
            if epoch not in cache:
                if len(cache) > 4:
                    cache.pop(min(cache))
                cache[epoch] = epoch_plan(rows, self.settings, t.seed, epoch)
            return cache[epoch]

        try:
            plans(0)
        except ValueError as e:
            raise ValueError(f"data.train_path: {e}") from e
        self.plans = plans
        self.epoch_ends = EpochEnds(plans)
        if t.num_epochs is not None:
            self.num_steps = self.epoch_ends.end_of(t.num_epochs - 1)
        self.model_config = model_config(c, len(self.words))
        abstract = nnx.eval_shape(lambda: OnLSTMLM(self.model_config, rngs=nnx.Rngs(0)))
        self.graphdef = nnx.split(abstract, nnx.Param)[0]
        self.layout = params_layout(lambda rngs: OnLSTMLM(self.model_config, rngs=rngs), run.mesh,
                                    shd.config_rules(self.config))
        self.num_parameters = self.layout.num_parameters
        self.recipe = Recipe(lr=float(t.lr), weight_decay=float(t.weight_decay), clip=float(t.clip),
                             alpha=float(t.alpha), beta=float(t.beta),
                             asgd_as_released=bool(t.asgd_as_released))
        self.tx = optimizer(self.recipe)
        self.replicated = shd.replicated(run.mesh)
        self.rows_sharding = shd.batch_sharding(run.mesh)

    def _write_vocabulary(self, run: RunContext) -> None:
        path = run.workdir / WORD_LIST_FILE
        text = "".join(f"{w}\n" for w in self.words)
        if path.exists() and path.read_text(encoding="utf-8") != text and run.resuming:
            raise ConfigError(f"{path} is not the vocabulary of this data ({len(self.words)} words now); the data "
                              f"changed since the checkpoints were written: restore it or use a new --workdir")
        if run.process_index == 0:
            path.write_text(text, encoding="utf-8")

    @property
    def validation_interval(self) -> int:
        """Steps between validations: the end of the current epoch (every_epoch), or the configured interval."""
        if self._fixed_interval is not None:
            return self._fixed_interval
        if not hasattr(self, "epoch_ends"):  # before setup: no data yet, so no epoch ends
            return 0
        # The trainer validates at step s when s % interval == 0; s <= the next epoch end E, so only s == E does.
        return self.epoch_ends.next_end(max(self._steps_done, 1))

    def describe_run(self) -> list[str]:
        m = self.model_config
        rows = self.train_data.shape[1]
        lines = [f"ON-LSTM LM: {self.num_parameters:,} parameters, layers {m.layer_sizes()} (chunk {m.chunk_size}), "
                 f"vocabulary {len(self.words)} words",
                 f"training stream {self.num_train_tokens:,} tokens in {self.train_data.shape[0]} columns of "
                 f"{rows} rows; {len(self.plans(0))} BPTT segments in epoch 0; {self.num_steps} steps in all"]
        if self.unigram is not None:
            lines.append(f"unigram baseline on validation: perplexity {math.exp(self.unigram):.1f}")
        return lines

    # -- state and checkpoints ---------------------------------------------------------------

    def _shardings(self) -> ParamsState:
        params = self.layout.shardings  # the averaged parameters (ASGD) like the parameters
        hidden = {f"layer_{layer}": {"h": self.rows_sharding, "c": self.rows_sharding}
                  for layer in range(self.model_config.num_layers)}
        return ParamsState(params=params, opt_state=self.layout.opt_state_shardings(self.tx), step=self.replicated,
                           rng=self.replicated, carry=hidden, average={"params": params, "count": self.replicated})

    def _shapes(self) -> ParamsState:
        batch = self.config.training.batch_size
        hidden = {f"layer_{layer}": {"h": jax.ShapeDtypeStruct((batch, size), jnp.float32),
                                 "c": jax.ShapeDtypeStruct((batch, size), jnp.float32)}
                  for layer, size in enumerate(self.model_config.layer_sizes())}
        scalar = jax.ShapeDtypeStruct((), jnp.int32)
        params = self.layout.shapes
        return ParamsState(params=params, opt_state=jax.eval_shape(self.tx.init, params), step=scalar,
                           rng=jax.ShapeDtypeStruct((2,), jnp.uint32), carry=hidden,
                           average={"params": params, "count": scalar})

    def init_state(self):
        param_key, step_key = jax.random.split(jax.random.key(self.config.training.seed))
        config = self.model_config

        def init():
            params = nnx.to_pure_dict(nnx.state(OnLSTMLM(config, rngs=nnx.Rngs(params=param_key)), nnx.Param))
            zeros = lambda s: jnp.zeros(s.shape, s.dtype)  # noqa: E731
            return ParamsState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                               rng=jax.random.key_data(step_key), carry=jax.tree.map(zeros, self._shapes().carry),
                               average=initial_average(params))

        with jax.threefry_partitionable(False):
            state = jax.jit(init, out_shardings=self._shardings())()
        return state, {}

    def abstract_state(self):
        return with_shardings(self._shapes(), self._shardings())

    def restored_rest(self):
        return {}

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"vocab_sha256": self.vocab_fingerprint, "vocab_size": len(self.words),
                "model": dataclasses.asdict(self.model_config), "batch_size": self.config.training.batch_size,
                "asgd_start_step": self.asgd_start_step, "valid_history": list(self.valid_history),
                "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        changed = []
        if meta.get("vocab_sha256") != self.vocab_fingerprint:
            changed.append(f"the vocabulary ({meta.get('vocab_size')} words there, {len(self.words)} now)")
        saved = {"ordered": True, **meta.get("model", {})}  # checkpoints from before the switch are ON-LSTMs
        changed += [f"model.{k}: {saved.get(k)!r} there, {v!r} now"
                    for k, v in dataclasses.asdict(self.model_config).items()
                    if k in ("vocab_size", "embedding_size", "hidden_size", "num_layers", "chunk_size", "ordered")
                    and saved.get(k) != v]
        if meta.get("batch_size") != self.config.training.batch_size:
            changed.append(f"training.batch_size: {meta.get('batch_size')} there, "
                           f"{self.config.training.batch_size} now")
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run: " + "; ".join(changed)
                              + ". Use the original config and data, or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        """The NT-ASGD host state: when averaging began, and the validation history it watched."""
        self.asgd_start_step = meta.get("asgd_start_step")
        self.valid_history = [float(v) for v in meta.get("valid_history", [])]

    # -- steps ---------------------------------------------------------------------------------

    def batches(self, position: dict | None):
        self._steps_done = self.epoch_ends.step_of(position)
        return bptt_batches(self.train_data, self.plans, self.settings, self.config.training.length_bucket,
                            position, self.run.process_index, self.run.process_count)

    def make_train_step(self):
        jitted = jax.jit(make_step(self.graphdef, self.recipe), donate_argnums=(0,),
                         out_shardings=(self._shardings(), self.replicated))

        def train_step(state, rest, batch):
            self._steps_done += 1
            # No `rest`: the model is parameters only (init_state's rest is {}, for the trainer's bookkeeping).
            return jitted(state, None, batch, jnp.asarray(self.asgd_start_step is not None))

        return train_step

    def new_window(self) -> SummingWindow:
        """Loss per token (and its perplexity), and the regularised objective per step, over the logging interval."""
        return SummingWindow(ratios={"loss": ("sum_nll", "num_tokens"), "objective": ("objective", None)},
                             tokens="num_tokens", perplexity_of="loss")


    # -- validation ----------------------------------------------------------------------------

    def has_validation(self) -> bool:
        return self.valid_data is not None

    def _valid_batches(self):
        if not hasattr(self, "_valid_cache"):
            bptt = self.config.evaluation.bptt
            rows = self.valid_data.shape[1]
            self._valid_cache = [segment_batch(self.valid_data, i, min(bptt, rows - 1 - i), bptt)
                                 for i in range(0, rows - 1, bptt)]
            self._eval_fn = jax.jit(make_eval_fn(self.graphdef))
        return self._valid_cache

    def validation_loss(self, params) -> tuple[float, int]:
        """Mean per-token cross-entropy of `params` over the validation stream (state carried from zeros)."""
        batches = self._valid_batches()
        batch_size = self.config.evaluation.batch_size
        hidden = {f"layer_{layer}": {"h": jnp.zeros((batch_size, size)), "c": jnp.zeros((batch_size, size))}
                  for layer, size in enumerate(self.model_config.layer_sizes())}
        totals, counts = [], []
        for batch in batches:
            total, count, hidden = self._eval_fn(params, hidden, shd.global_batch(batch, self.run.mesh))
            totals.append(total)
            counts.append(count)
        totals, counts = jax.device_get((totals, counts))
        tokens = int(sum(float(c) for c in counts))
        return float(sum(np.float64(t) for t in totals) / max(tokens, 1)), tokens

    def evaluate(self, state, rest) -> Evaluation:
        """Validation perplexity (of the averaged parameters once ASGD runs), then the NT-ASGD check."""
        averaged = self.asgd_start_step is not None
        loss, tokens = self.validation_loss(state.average["params"] if averaged else state.params)
        switched = False
        if not averaged:
            if self.config.training.asgd and nt_asgd_triggered(self.valid_history, loss,
                                                               self.config.training.nonmono):
                self.asgd_start_step = self._steps_done
                switched = True
            self.valid_history.append(loss)
        perplexity = math.exp(loss)
        record = {"loss": loss, "perplexity": perplexity, "num_tokens": tokens, "averaged": averaged,
                  "unigram_loss": self.unigram}
        message = f"perplexity {perplexity:.2f}" + (" (averaged parameters)" if averaged else "")
        if switched:
            record["switched_to_asgd"] = True
            message += f"; no improvement over the last {self.config.training.nonmono} validations: switching to ASGD"
        return Evaluation(values={"valid_perplexity": perplexity, "valid_loss": loss}, record=record,
                          message=message)

    def result_fields(self) -> dict[str, Any]:
        return {"unigram_loss": self.unigram, "num_parameters": self.num_parameters, "vocab_size": len(self.words)}

    def summary(self, result) -> str | None:
        if result.final_step not in result.valid_losses:
            return None
        final = result.valid_losses[result.final_step]
        ran = result.final_step - result.start_step
        averaged = f", averaged since step {self.asgd_start_step}" if self.asgd_start_step is not None else ""
        return (f"done: step {result.final_step} ({ran} step{'s' * (ran != 1)} in {format_duration(result.seconds)}).\n"
                f"  validation perplexity {final:.2f}{averaged} (unigram {math.exp(self.unigram):.2f}); "
                f"best {result.best_valid_loss:.2f} at step {result.best_step}")
