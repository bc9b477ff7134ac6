"""Pushdown-LM training (`trainer="pushdown_lm"`): LM + attachment loss on the shared trainer.

    tgjax train --config configs/pushdown_tiny.py --workdir runs/pushdown_tiny
    tgjax train --config configs/pushdown_dyck.py --workdir runs/pushdown_dyck
    tgjax train --config configs/pushdown_dyck.py --config.model.pushdown_layers=none --workdir runs/base_dyck

Murty et al. (EMNLP 2023) §3.3 / Appendix A-B, the release as restated in
released-code.md §1.5-1.6. What it hands the trainer (`tgjax.train.task`):

* data (`data.source`): "builtin" (the synthetic treebank), "treebank"
  (PTB-style bracketed files, one or more trees per line; a malformed tree
  is an error naming file:line) or "dyck" (Dyck_{k,m} strings of
  `tgjax.data.dyck`, the binary "has been reduced" tape). Trees become
  `<s> w_1 .. w_n <eos>` rows with gold attachment labels and node spans
  (`tgjax.data.pushdown`): n-ary nodes right-binarised, unary chains
  collapsed, sub-word pieces right-branching. Everything the pipeline
  changed is counted and said at setup: right-binarised nodes, sentences
  skipped as too long (`data.on_too_long="skip"`; "error" refuses), tape
  entries at or beyond the depth table (clipped by the model).
* windows (`data.windows=True`, the WikiTrees model of Appendix B): whole
  sentences, each with its own ROOT (`<s>`), packed greedily into rows of at
  most `model.sequence_length + 1` tokens, so every row starts at a sentence
  boundary; labels and node spans are offset per sentence, so an earlier
  sentence of the row keeps the depths of its finished tree. (The `<s>` of a
  following sentence is an LM target like any token; its attachment is a
  shift.) A sentence longer than a row is skipped and counted (or refused).
* batches: a shuffle per epoch from (training.seed, epoch); the last batch of
  an epoch is padded with idle rows (weight 0), so nothing is dropped; the
  iterator's position {"epoch", "step"} is all a checkpoint needs, and a
  resumed run is bit-identical (`tgjax.data.pushdown.train_epochs`, a grain
  dataset per epoch, through `tgjax.data.batching.EpochBatches`).
* the loss: mean LM cross-entropy per token + `training.attachment_weight`
  x mean attachment cross-entropy on the gold labels (weight 1: the paper
  sums the two, as the release's training_utils.py). The attachment
  softmax is the paper text's (eq. 5, Fig. 2), over the legal slots (ROOT
  only for `<eos>`, as the search and the sampler); `model.
  attachment_normalise="causal"` is the paper's Fig. 8 code's and the
  release's (every causal slot, illegal ones unmasked). The head's other
  release differences are switches too (defaults: the paper's Fig. 8):
  `model.head_scaled=False` (no 1/sqrt(d) on its scores),
  `model.head_self_key_input="query"`, `model.head_relative_positions=True`;
  `model.head_depth_dim` (0: d / num_heads) sizes its depth embedding.
  Base-LM (§4.1): `model.pushdown_layers="none"`, the same model without the
  depth term but still trained with the attachment head as a multi-task loss.
* the optimiser: `tgjax.train.optimizer` (clip, then Adam/AdamW with linear
  warm-up and cosine decay; the release: Adam lr 1e-4, eps 1e-7, clip 3,
  8000 warm-up steps; WikiTrees: 6e-4 after 200 warm-up steps).
* metrics: train LM loss, attachment loss and accuracy, tokens/s; validation
  LM loss per token (selection: the lowest), perplexity, attachment loss and
  accuracy.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx
from ml_collections.config_dict import placeholder

from tgjax.data.batching import EpochBatches, local_rows
from tgjax.data.pushdown import (
    GROUP_POOL_BATCHES,
    PushdownSentence,
    bucket_width,
    bucket_widths,
    make_batch,
    train_epochs,
)
from tgjax.data.pushdown_corpus import load_splits, load_vocabulary, read_trees, unigram_loss
from tgjax.models.parts import count_parameters
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig, pushdown_loss
from tgjax.progress import format_duration
from tgjax.train import sharding as shd
from tgjax.train.config import (
    UNSET_PATH,
    ConfigError,
    check_choice,
    check_positive_int,
    check_range,
    family_config,
    to_json_dict,
)
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.optimizer import make_optimizer
from tgjax.train.params_state import ParamsStateTask, params_layout
from tgjax.train.schedules import StepSchedule
from tgjax.train.step import make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals

SOURCES = ("builtin", "treebank", "dyck")
VOCABULARY_FILE = "vocab.json"

# -----------------------------------------------------------------------------
# Config.


def default_config() -> ml_collections.ConfigDict:
    """Every key this task reads; the values are the release's Dyck recipe at tiny sizes (configs set theirs)."""
    return family_config(dict(
        trainer="pushdown_lm",
        model=dict(d_model=64, num_layers=2, num_heads=4, ffw_hidden_size=256, sequence_length=64,
                   pushdown_layers="all", num_depths=50, max_relative_position=512, embedding_dropout=0.1,
                   dropout=0.1, head_depth_dim=0, head_scaled=True, head_self_key_input="projection",
                   head_relative_positions=False, attachment_normalise="legal",
                   remat="none",  # a tgjax.nn.remat policy name (true / false: full / none)
                   scan_layers=False,
                   # the attachment head's depth values per step of its scan (0: the whole [B, T, T, D] score
                   # table at once, 1.75x a plain LM's memory at BLLIP size against 1.07x; the same scores)
                   head_depth_chunk=1,
                   # None: the data's vocabulary size; an int is what `tgjax info` counts with when the
                   # data are absent (the run notes it when the data's differs)
                   vocab_size=placeholder(int)),
        data=dict(source="builtin", train_path="", valid_path="", vocab_path="",
                  num_train_sentences=placeholder(int), num_valid_sentences=placeholder(int), corpus_seed=0,
                  min_word_count=1, on_too_long="skip", windows=False,
                  dyck_num_types=20, dyck_max_depth=10, dyck_num_train=100_000, dyck_num_valid=1000,
                  dyck_max_length=600, dyck_min_length=1, dyck_open_probability=0.5),
        training=dict(num_steps=1000, batch_size=16, seed=42, attachment_weight=1.0, clip_grad_norm=3.0,
                      bucket_lengths=False, group_by_length=False,
                      optimizer=dict(name="adam", kwargs=dict(b1=0.9, b2=0.999, eps=1e-7)),
                      lr_schedule=dict(name="linear_warmup_then_cosine_anneal",
                                       kwargs=dict(start_lr=0.0, max_lr=1e-4, min_lr=0.0, warmup_steps=100,
                                                   cosine_cycle_length=900))),
        evaluation=dict(interval_steps=250, batch_size=16),
    ), checkpointing=dict(interval_steps=250, max_to_keep=2), logging=dict(interval_steps=25, tensorboard=False))


def pushdown_layer_indices(spec, num_layers: int) -> tuple[int, ...] | None:
    """`model.pushdown_layers` -> the model's `pushdown_layers`: "all" -> None, "none" -> (),
    "last:K" -> the last K layers, or a comma-separated list of layer indices ("6,7,8")."""
    text = str(spec).strip().lower()
    if text == "all":
        return None
    if text == "none":
        return ()
    try:
        if text.startswith("last:"):
            count = int(text[5:])
            if not 0 <= count <= num_layers:
                raise ValueError
            return tuple(range(num_layers - count, num_layers))
        layers = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"model.pushdown_layers: {spec!r}; expected 'all', 'none' (Base-LM), 'last:K' with "
                          f"0 <= K <= {num_layers}, or layer indices like '6,7,8'") from None
    bad = [i for i in layers if not 0 <= i < num_layers]
    if bad:
        raise ConfigError(f"model.pushdown_layers: layers {bad} outside 0..{num_layers - 1}")
    return layers


# Model switches that change how the same numbers are computed, not which: a run may resume with another value.
COMPUTE_LAYOUT_KEYS = ("remat", "scan_layers", "head_depth_chunk")


def model_config(config, vocab_size: int) -> PushdownLMConfig:
    m = config.model
    binary = config.data.source == "dyck"
    try:
        return PushdownLMConfig(
            vocab_size=vocab_size, d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads,
            ffw_hidden_size=m.ffw_hidden_size, sequence_length=m.sequence_length,
            pushdown_layers=pushdown_layer_indices(m.pushdown_layers, m.num_layers),
            num_depths=2 if binary else m.num_depths, binary_tape=binary,
            max_relative_position=m.max_relative_position, embedding_dropout=m.embedding_dropout, dropout=m.dropout,
            head_depth_dim=m.head_depth_dim or None, head_scaled=m.head_scaled,
            head_self_key_input=m.head_self_key_input, head_relative_positions=m.head_relative_positions,
            attachment_normalise=m.attachment_normalise, remat=m.remat, scan_layers=m.scan_layers,
            head_depth_chunk=m.head_depth_chunk or None)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from e


def check_config(config) -> None:
    """Each value that can be checked before any data is read (every key is there: the config was merged over
    `default_config()`); `ConfigError` names the key."""
    d, m, t = config.data, config.model, config.training
    check_choice(config, "data.source", SOURCES)
    check_choice(config, "data.on_too_long", ("skip", "error"))  # skip: count them
    check_choice(config, "model.attachment_normalise", ("legal", "causal"))  # paper text's; Fig. 8's and release's
    check_choice(config, "model.head_self_key_input", ("projection", "query"))  # Fig. 8's, the release's
    for key in ("training.batch_size", "evaluation.batch_size", "training.num_steps", "model.num_depths",
                "model.num_heads"):
        check_positive_int(config, key)
    if m.d_model % m.num_heads:
        raise ConfigError(f"model.num_heads={m.num_heads} does not divide model.d_model={m.d_model}")
    check_range(config, "training.attachment_weight", low=0)
    if d.source == "dyck" and d.windows:
        raise ConfigError("data.windows: packing several strings into a row is for text (WikiTrees), not Dyck")
    model_config(config, 8)  # sizes and switches
    try:
        make_optimizer(t)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from e


# -----------------------------------------------------------------------------
# Data: read and fitted by `tgjax.data.pushdown_corpus`, batched by `tgjax.data.pushdown.train_epochs`.


def _fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -----------------------------------------------------------------------------
# Steps.


# The fields the model and the loss read (make_batch's fields; no dense tape).
BATCH_FIELDS = ("inputs", "targets", "attach", "attach_targets", "weights", "attach_weights", "node_start",
                "node_end", "roots")


def loss_and_metrics(outputs, batch, model_cfg: PushdownLMConfig, attachment_weight: float):
    """`(loss, metrics)`: LM CE + weight x attachment CE, and the sums a logging window adds up."""
    _, parts = pushdown_loss(outputs, batch, model_cfg)
    num_tokens = batch["weights"].sum()
    num_attach = batch["attach_weights"].sum()
    loss = parts["lm_loss"] + attachment_weight * parts["attach_loss"]
    metrics = {"loss": loss, "lm_loss": parts["lm_loss"], "attach_loss": parts["attach_loss"],
               "sum_lm_nll": parts["lm_loss"] * jnp.maximum(num_tokens, 1.0),
               "sum_attach_nll": parts["attach_loss"] * jnp.maximum(num_attach, 1.0),
               "attach_correct": parts["attach_accuracy"] * jnp.maximum(num_attach, 1.0),
               "num_tokens": num_tokens, "num_attach": num_attach, "clipped_depths": parts["clipped_depths"]}
    return loss, metrics


def make_steps(graphdef, model_cfg: PushdownLMConfig, tx, schedule, attachment_weight: float):
    """train_step(state, rest, batch) -> (state, metrics): the trainer's one step on the LM + attachment loss
    (dropout from the step's key); eval_step(params, rest, batch) -> metrics."""

    def loss(model, batch, key):
        nnx.reseed(model, dropout=key)
        return loss_and_metrics(model(batch, deterministic=False), batch, model_cfg, attachment_weight)

    train_step = make_train_step(graphdef, loss, tx, learning_rate_schedule=schedule)

    def eval_step(params, rest, batch):
        model = nnx.merge(graphdef, params, rest)
        return loss_and_metrics(model(batch, deterministic=True), batch, model_cfg, attachment_weight)[1]

    return train_step, eval_step


# -----------------------------------------------------------------------------
# `tgjax info`.


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: parameters, and the vocabulary (from the data; or `model.vocab_size` when
    the configuration names one and the data are absent, e.g. BLLIP's 32,768 SentencePiece pieces)."""
    check_config(config)
    d = config.data
    if d.source == "dyck":
        from tgjax.data.dyck import dyck_vocabulary

        vocab_size, source = dyck_vocabulary(d.dyck_num_types).size, f"Dyck, {d.dyck_num_types} bracket types"
    else:
        try:
            trees, where = read_trees(d, "train")
            vocab_size, source = load_vocabulary(d, trees).size, f"built from {where}"
        except FileNotFoundError as missing:
            if not config.model.get("vocab_size"):
                raise
            vocab_size, source = int(config.model.vocab_size), f"model.vocab_size; the data are absent ({missing})"
    model_cfg = model_config(config, vocab_size)
    return ModelInfo("pushdown_lm", vocab_size, source, dataclasses.asdict(model_cfg),
                     lambda rngs: PushdownLM(model_cfg, rngs=rngs))


# -----------------------------------------------------------------------------
# The task.


class PushdownLMTask(ParamsStateTask):
    """Pushdown-LM (or Base-LM with the attachment head) on trees or Dyck strings; see the module docstring."""

    name = "pushdown_lm"
    selection = Selection("valid_loss", "min")
    default_config = staticmethod(default_config)

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)
        self.schedule = StepSchedule()

    def validate_config(self, config) -> None:
        check_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.config.training.batch_size, mesh, "training.batch_size")
        shd.check_batch_divides(self.config.evaluation.batch_size, mesh, "evaluation.batch_size")

    # -- setup

    def setup(self, run: RunContext) -> None:
        self.run = run
        c, t = self.config, self.config.training
        data = load_splits(c, unset_path=UNSET_PATH)
        self.notes: list[str] = data.notes
        self.train_data, self.valid_data = data.train, data.valid
        vocab_size, vocab_text = data.vocab_size, data.vocab_text
        self.vocab_sha256 = _fingerprint(vocab_text)
        self.vocab_size = vocab_size
        if c.model.get("vocab_size") and c.model.vocab_size != vocab_size:
            self.notes.append(f"model.vocab_size={c.model.vocab_size} (what `tgjax info` counts without the data), but "
                              f"the vocabulary has {vocab_size} ids: the model uses {vocab_size}")
        path = run.workdir / "vocab.txt"
        if path.is_file() and run.resuming and path.read_text(encoding="utf-8") != vocab_text:
            raise ConfigError(f"{path} is not the vocabulary of this data ({vocab_size} ids now); the data changed "
                              f"since the checkpoints were written: restore it or use a new --workdir")
        if run.process_index == 0:
            path.write_text(vocab_text, encoding="utf-8")
        self.data_sha256 = _fingerprint(",".join(str(len(s)) + ":" + " ".join(map(str, s.tokens[:8]))
                                                 for s in self.train_data.sentences))
        self.unigram = (unigram_loss(self.train_data.sentences, self.valid_data.sentences, vocab_size)
                        if self.valid_data is not None else None)
        self.model_config = model_config(c, vocab_size)
        abstract = nnx.eval_shape(lambda: PushdownLM(self.model_config, rngs=nnx.Rngs(0)))
        self.graphdef = nnx.split(abstract, nnx.Param, ...)[0]
        self.layout = params_layout(self._build, run.mesh, shd.config_rules(self.config))
        self.num_parameters = count_parameters(abstract)
        self.tx, self.lr_schedule = make_optimizer(t)
        self.replicated = shd.replicated(run.mesh)
        train_step, eval_step = make_steps(self.graphdef, self.model_config, self.tx, self.lr_schedule,
                                           float(t.attachment_weight))
        self._train_step = jax.jit(train_step, donate_argnums=(0,),
                                   out_shardings=(self.layout.state_shardings(self.tx), self.replicated))
        self._eval_step = jax.jit(eval_step)
        self._valid_batches = None
        for line in self.describe_data():
            if line.startswith("note"):
                run.say(line)

    def describe_data(self) -> list[str]:
        lines = [f"{split}: {data.report.summary()}; {len(data.sentences)} rows"
                 for split, data in (("train", self.train_data), ("valid", self.valid_data)) if data is not None]
        lines += [f"note: {n}" for n in self.notes]
        for split, data in (("train", self.train_data), ("valid", self.valid_data)):
            if data is not None and (data.report.num_skipped_too_long or data.report.num_clipped_entries):
                lines.append(f"note: {split}: {data.report.num_skipped_too_long} sentence(s) longer than "
                             f"model.sequence_length={self.config.model.sequence_length} skipped; "
                             f"{data.report.num_clipped_entries} tape entries at or beyond "
                             f"model.num_depths={self.model_config.num_depths} clipped")
        return lines

    def describe_run(self) -> list[str]:
        m = self.model_config
        kind = ("Base-LM (no pushdown layers; attachment head as a multi-task loss)" if m.pushdown_layers == ()
                else "Pushdown-LM")
        which = "every layer" if m.pushdown_layers is None else f"layers {list(m.pushdown_layers)}"
        return [f"{kind}: {self.num_parameters:,} parameters, d={m.d_model}, {m.num_layers} layers ({which} "
                f"pushdown), {m.num_heads} heads, rows of {m.sequence_length} tokens, "
                f"{'binary tape' if m.binary_tape else f'{m.num_depths} depths'}, vocabulary {self.vocab_size}",
                *[line for line in self.describe_data() if not line.startswith("note")],
                *self._describe_batching(),
                *([f"unigram baseline on validation: {self.unigram:.4f} nats per token (perplexity "
                   f"{math.exp(self.unigram):.2f})"] if self.unigram is not None else [])]

    def _describe_batching(self) -> list[str]:
        t = self.config.training
        how = []
        if t.group_by_length:
            how.append(f"rows grouped by length (pools of {GROUP_POOL_BATCHES} batches)")
        if t.bucket_lengths:
            how.append("each padded to the power of two that holds its longest row")
        return ["batches: " + "; ".join(how)] if how else []

    # -- state and checkpoints

    def _build(self, rngs: nnx.Rngs) -> PushdownLM:
        return PushdownLM(self.model_config, rngs=rngs)

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"model": dataclasses.asdict(self.model_config), "vocab_sha256": self.vocab_sha256,
                "vocab_size": self.vocab_size, "data_sha256": self.data_sha256,
                "batch_size": self.config.training.batch_size, "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        changed = []
        saved = meta.get("model", {})
        for key, value in dataclasses.asdict(self.model_config).items():
            if key.endswith("dropout") or key in COMPUTE_LAYOUT_KEYS:
                continue
            old = saved.get(key)
            if (list(old) if isinstance(old, (list, tuple)) else old) != (
                    list(value) if isinstance(value, tuple) else value):
                changed.append(f"model.{key}: {old!r} in the checkpoint, {value!r} now")
        if meta.get("vocab_sha256") != self.vocab_sha256:
            changed.append(f"the vocabulary ({meta.get('vocab_size')} ids there, {self.vocab_size} now)")
        if meta.get("data_sha256") != self.data_sha256:
            changed.append("the training rows differ (data.* or the files changed)")
        if meta.get("batch_size") != self.config.training.batch_size:
            changed.append(f"training.batch_size: {meta.get('batch_size')} in the checkpoint, "
                           f"{self.config.training.batch_size} now")
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run: " + "; ".join(changed)
                              + ". Use the original config and data, or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        """Nothing on the host: the schedule reads the restored step."""

    # -- steps

    def batches(self, position: dict | None) -> EpochBatches:
        t = self.config.training
        return EpochBatches(train_epochs(self.train_data.sentences, seq_len=self.config.model.sequence_length,
                                         batch_size=t.batch_size, seed=t.seed, process_index=self.run.process_index,
                                         process_count=self.run.process_count, bucket_lengths=t.bucket_lengths,
                                         group_by_length=t.group_by_length), position)

    def make_train_step(self):
        step = self._train_step
        compile_widths_first = bool(self.config.training.bucket_lengths)

        def train_step(state, rest, batch):
            nonlocal compile_widths_first
            if compile_widths_first:
                compile_widths_first = False
                self._compile_bucket_widths(state, rest)
            return step(state, rest, shd.global_batch(batch, self.run.mesh))

        return train_step

    def _compile_bucket_widths(self, state, rest) -> None:
        """Compile the train step for every bucket width at once, before the first step.

        Left to the first batch of each width, the compilations come one at a
        time, spread over the first hundred steps (six widths for Dyck's rows of
        512; on the H200 all six took 2m54s side by side, so minutes each); XLA
        compiles outside the GIL, so threads overlap them on the host's cores. `lower` only reads `state` (no
        donation), and `jax.jit` reuses these executables for the real calls.
        """
        t, seq_len = self.config.training, self.config.model.sequence_length
        widths = bucket_widths(seq_len)
        p, n = self.run.process_index, self.run.process_count

        def compile_width(width: int) -> None:
            idle = local_rows(make_batch([None] * t.batch_size, width)[0], p, n)
            self._train_step.lower(state, rest, shd.global_batch(idle, self.run.mesh)).compile()

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(widths)) as pool:
            list(pool.map(compile_width, widths))
        self.run.say(f"compiled the train step for widths {', '.join(map(str, widths))} in "
                     f"{format_duration(time.perf_counter() - start)} ({len(widths)} programs, side by side)")

    def new_window(self) -> SummingWindow:
        # loss: the step's weighted objective, a mean per step; the rest per token or per attachment
        return SummingWindow(ratios={"loss": ("loss", None), "lm_loss": ("sum_lm_nll", "num_tokens"),
                                     "attach_loss": ("sum_attach_nll", "num_attach"),
                                     "attach_accuracy": ("attach_correct", "num_attach")},
                             tokens="num_tokens", perplexity_of="lm_loss")


    # -- validation

    def has_validation(self) -> bool:
        return self.valid_data is not None

    def validation_metrics(self, params, rest) -> dict[str, float]:
        """LM loss per token, perplexity, attachment loss and accuracy per label over the validation rows."""
        if self._valid_batches is None:  # in order, the last batch padded with idle rows
            rows, size = self.valid_data.sentences, self.config.evaluation.batch_size
            self._valid_batches = []
            for start in range(0, len(rows), size):
                chunk: list[PushdownSentence | None] = list(rows[start:start + size])
                chunk += [None] * (size - len(chunk))
                width = self.config.model.sequence_length
                width = bucket_width(chunk, width) if self.config.training.bucket_lengths else width
                self._valid_batches.append(local_rows(make_batch(chunk, width)[0],
                                                      self.run.process_index, self.run.process_count))
        outs = [self._eval_step(params, rest, shd.global_batch(b, self.run.mesh)) for b in self._valid_batches]
        outs = jax.device_get(outs)
        total = lambda key: float(sum(np.float64(o[key]) for o in outs))  # noqa: E731
        tokens, attachments = total("num_tokens"), total("num_attach")
        loss = total("sum_lm_nll") / max(tokens, 1.0)
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)),
                "attach_loss": total("sum_attach_nll") / max(attachments, 1.0),
                "attach_accuracy": total("attach_correct") / max(attachments, 1.0), "num_tokens": int(tokens),
                "clipped_depths": int(total("clipped_depths"))}

    def evaluate(self, state, rest) -> Evaluation:
        values = self.validation_metrics(state.params, rest)
        return Evaluation(values={"valid_loss": values["loss"]}, record={**values, "unigram_loss": self.unigram},
                          message=(f"LM loss {values['loss']:.4f} (perplexity {values['perplexity']:.2f}), "
                                   f"attachment loss {values['attach_loss']:.4f}, accuracy "
                                   f"{values['attach_accuracy']:.3f}"))

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.vocab_size, "unigram_loss": self.unigram}

    def summary(self, result) -> str | None:
        if result.final_step not in result.valid_losses:
            return None
        final = result.valid_losses[result.final_step]
        ran = result.final_step - result.start_step
        return (f"done: step {result.final_step} ({ran} step{'s' * (ran != 1)} in {format_duration(result.seconds)})."
                f"\n  validation LM loss {final:.4f} nats per token (perplexity {math.exp(min(final, 50)):.2f}); "
                f"best {result.best_valid_loss:.4f} at step {result.best_step}; unigram {self.unigram:.4f} (perplexity "
                f"{math.exp(self.unigram):.2f}). (Teacher-forced on the gold tape: p(x_t+1 | x_<=t, gold parse "
                f"prefix), not p(x); p(x) needs the beam's marginal.)")
