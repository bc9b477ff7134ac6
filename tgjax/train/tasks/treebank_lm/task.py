"""The treebank language-modelling task: TG and TXL models on Choe–Charniak action sequences (or words).

What it hands the trainer (`tgjax.train.task`): the config's checks, the
train and valid pipelines with the vocabulary (saved in the workdir, checked
on resume), `TransformerLM` parts with their shardings, the jitted step of
`tgjax.train.tasks.treebank_lm.state` (mean negative log-likelihood per prediction event, the
Transformer-XL memory carried in the state), the train record of each
logging window, and validation: the whole valid split with memory reset,
mean loss per prediction event, the best checkpoint the lowest. The
learning rate follows the optimiser's step schedule (warm-up + cosine).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from tgjax.data import pipeline as pl
from tgjax.data.vocab import load_vocabulary
from tgjax.models import MODEL_NAMES, ModelConfig, TransformerLM, count_parameters, model_config
from tgjax.models.parts import model_parts
from tgjax.progress import format_duration
from tgjax.syntax import masks
from tgjax.train import sharding as shd
from tgjax.train.config import UNSET_PATH, ConfigError, default_config, to_json_dict
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.optimizer import make_optimizer
from tgjax.train.schedules import StepSchedule
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals
from tgjax.train.tasks.treebank_lm import inputs
from tgjax.train.tasks.treebank_lm import state as st
from tgjax.train.tasks.treebank_lm.validation import check_values
from tgjax.workdir import VocabularyMismatch, vocabulary_fingerprint

# The batch fields the model reads (the pipeline also emits bookkeeping: seq_index, segment_index).
MODEL_FIELDS = tuple(masks.CompactChunk._fields)


# -----------------------------------------------------------------------------
# From the config.


def validate_config(config) -> None:
    """The whole config, checked before anything runs (no file read, no device, no checkpoint manager).

    Each key's own value (`validation.check_values`), then what takes several
    keys: the model (sizes, heads dividing d_model, position range, the
    switches its registered name admits), each split's pipeline settings, and
    the optimiser and schedule. Raises `ConfigError` naming the key.
    """
    check_values(config)
    if config.model.name not in MODEL_NAMES:
        raise ConfigError(f"model.name: unknown {config.model.name!r}; expected one of {MODEL_NAMES}")
    model_cfg = resolve_model_config(config, config.model.vocab_size or 1)
    try:
        inputs.pipeline_config(config, model_cfg, "train", config.training.batch_size)
        inputs.pipeline_config(config, model_cfg, "valid", config.evaluation.batch_size)
    except ValueError as e:
        raise ConfigError(f"data settings: {e}") from e
    try:
        make_optimizer(config.training)
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from e


def resolve_model_config(config, vocab_size: int) -> ModelConfig:
    """`ModelConfig` from the `model` section (authors' names) and the vocabulary's size."""
    m = config.model
    try:
        return model_config(
            m.name, vocab_size, d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads,
            ffw_hidden_size=m.ffw_hidden_size, sequence_length=m.sequence_length, memory_length=m.memory_length,
            min_relative_position=m.min_relative_position, max_relative_position=m.max_relative_position,
            num_unrestricted_layers=m.num_unrestricted_layers or 0,
            num_unrestricted_heads=m.num_unrestricted_heads or 0,
            embedding_dropout=m.embedding_dropout, core_dropout=m.core_dropout, final_dropout=m.core_output_dropout,
            dtype=m.dtype, param_dtype=m.param_dtype, remat=m.remat, scan_layers=bool(m.scan_layers),
        )
    except ValueError as e:
        raise ConfigError(str(e)) from e


def count_model_parameters(model_cfg: ModelConfig) -> int:
    """Parameters of a model without allocating it."""
    return count_parameters(nnx.eval_shape(lambda: TransformerLM(model_cfg, rngs=nnx.Rngs(0))))


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: the model, its parameter count, the vocabulary size and where it came from."""
    data_available = config.data.train_path not in (UNSET_PATH, "") and (
        config.data.train_path == "builtin" or Path(config.data.train_path).exists())
    if config.data.vocab_path and Path(config.data.vocab_path).exists():
        vocab_size = load_vocabulary(config.data.vocab_path).size
        source = f"data.vocab_path ({config.data.vocab_path})"
    elif config.model.vocab_size:
        vocab_size, source = int(config.model.vocab_size), "model.vocab_size"
    elif data_available:
        probe = resolve_model_config(config, 1)
        pcfg = inputs.pipeline_config(config, probe, "train", config.training.batch_size)
        trees = inputs.load_trees(pcfg, "data.train_path")
        tagged = pl.corpus_pos_tags(trees, pcfg.pos_tags, pcfg.corpus)
        vocab = pl.build_vocabulary([pl.tokens_for_rule(t, pcfg.rule, pos_tags=tagged) for t in trees],
                                    kind=config.data.vocabulary,
                                    size=config.model.vocab_size or 32768, min_count=config.data.min_word_count)
        vocab_size, source = vocab.size, f"built from {config.data.train_path}"
    else:
        raise ConfigError("the vocabulary size is unknown: set model.vocab_size, data.vocab_path or data.train_path")
    model_cfg = resolve_model_config(config, vocab_size)
    return ModelInfo(config.model.name, vocab_size, source, dataclasses.asdict(model_cfg),
                     lambda rngs: TransformerLM(model_cfg, rngs=rngs))


# Model settings that a checkpoint's arrays do not depend on: they may change between runs.
_FREE_BETWEEN_RUNS = ("embedding_dropout", "core_dropout", "final_dropout", "dtype", "remat")


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                   if f.default is not dataclasses.MISSING}


def check_same_run(meta: dict, step: int, directory: Path, vocab_fp: str, vocab_path: Path,
                   model_cfg: ModelConfig, batch_size: int) -> None:
    """Refuses a checkpoint of another vocabulary, model or batch size before its arrays are read."""
    if meta.get("vocab_sha256") != vocab_fp:
        raise VocabularyMismatch(
            f"the vocabulary {vocab_path} is not the one checkpoint step {step} in {directory} was trained with "
            f"({meta.get('vocab_size')} ids there, fingerprints differ); restore the original file or use a new "
            f"--workdir")
    # A key missing from an older checkpoint's meta had its default then (e.g. scan_layers=False).
    saved = {**_MODEL_DEFAULTS, **meta.get("model", {})}
    here = dataclasses.asdict(model_cfg)
    changed = [f"model.{k}: {saved.get(k)!r} in the checkpoint, {v!r} now" for k, v in here.items()
               if k not in _FREE_BETWEEN_RUNS and saved.get(k) != v]
    if meta.get("batch_size") != batch_size:
        changed.append(f"training.batch_size: {meta.get('batch_size')} in the checkpoint, {batch_size} now")
    if changed:
        raise ConfigError(f"checkpoint step {step} in {directory} is of another model or batch: "
                          + "; ".join(changed) + ". Use the original config or a new --workdir")


# -----------------------------------------------------------------------------
# Per step.


def model_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fields of a pipeline batch that the model reads."""
    return {name: batch[name] for name in MODEL_FIELDS if name in batch}


class _ModelBatches:
    """The train pipeline's iterator, yielding only the model's fields; `get_state()` is the pipeline's."""

    def __init__(self, iterator):
        self._iterator = iterator

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return model_batch(next(self._iterator))

    def get_state(self) -> dict[str, int]:
        return self._iterator.get_state()


# -----------------------------------------------------------------------------
# The task.


class TreebankLMTask:
    """TG / TXL language modelling on a treebank (`trainer="lm"`, the default); see the module docstring."""

    name = "treebank_lm"
    selection = Selection("valid_loss", "min")
    default_config = staticmethod(default_config)

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)
        self.batch_size = config.training.batch_size
        self.schedule = StepSchedule()
        self._valid_batches: list[dict[str, np.ndarray]] | None = None

    # -- before anything runs ----------------------------------------------------------------

    def validate_config(self, config) -> None:
        validate_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.batch_size, mesh, "training.batch_size")
        shd.check_batch_divides(self.config.evaluation.batch_size, mesh, "evaluation.batch_size")

    def setup(self, run: RunContext) -> None:
        """Data and vocabulary (checked against the workdir's on resume), model, optimiser, shardings."""
        config = self.config
        self.run = run
        self.data = inputs.make_training_data(config, lambda v: resolve_model_config(config, v), run.workdir,
                                              resuming=run.resuming, process_index=run.process_index,
                                              process_count=run.process_count)
        vocab = self.data.vocab
        for report in self.data.dropped:
            if report.dropped_stack_entries:
                run.say(f"warning: memory too short: {report}")
        if config.model.vocab_size and config.model.vocab_size != vocab.size:
            run.say(f"note: model.vocab_size={config.model.vocab_size}, but the vocabulary "
                    f"({self.data.vocab_path.name}) has {vocab.size} ids: the model uses {vocab.size}")
        self.vocab_fingerprint = vocabulary_fingerprint(vocab)
        self.unigram = (inputs.unigram_cross_entropy(self.data.train.encoded, self.data.valid.encoded, vocab.size)
                        if self.data.valid is not None else None)
        self.model_config = resolve_model_config(config, vocab.size)
        self.parts = model_parts(self.model_config)
        self.num_parameters = count_model_parameters(self.model_config)
        self.tx, self.lr_schedule = make_optimizer(config.training)
        self.rules = shd.config_rules(config)
        self.shardings = st.state_shardings(self.parts, self.tx, run.mesh, self.rules)

    @property
    def vocab_size(self) -> int:
        return self.data.vocab.size

    def describe_run(self) -> list[str]:
        mesh = self.run.mesh
        lines = [f"model {self.config.model.name}: {self.num_parameters:,} parameters, vocabulary "
                 f"{self.data.vocab.size} ids, mesh data={mesh.shape['data']} x model={mesh.shape['model']} over "
                 f"{mesh.devices.size} {mesh.devices.flat[0].platform} device(s)"]
        if self.unigram is not None:
            lines.append(f"unigram baseline on validation: {self.unigram:.4f} nats per prediction event")
        return lines

    # -- state and checkpoints ---------------------------------------------------------------

    def init_state(self):
        state, rest, _ = st.init_train_state(self.parts, self.tx, self.run.mesh, self.rules,
                                             seed=self.config.training.seed, batch_size=self.batch_size)
        return state, rest

    def abstract_state(self):
        return st.abstract_train_state(self.parts, self.tx, self.shardings, self.batch_size)

    def restored_rest(self):
        # Parameters come from the checkpoint; only the constants and RNG streams are made here.
        return st.init_rest(self.parts, self.shardings, self.config.training.seed)

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint records about its run (checked on resume by `check_same_run`)."""
        return {"vocab_sha256": self.vocab_fingerprint, "vocab_size": self.data.vocab.size,
                "model": dataclasses.asdict(self.model_config), "batch_size": self.batch_size,
                "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        check_same_run(meta, step, directory, self.vocab_fingerprint, self.data.vocab_path, self.model_config,
                       self.batch_size)

    def resume_from(self, meta: dict) -> None:
        """Nothing to restore on the host: the step schedule reads the restored step."""

    # -- steps ---------------------------------------------------------------------------------

    def batches(self, position: dict | None):
        return _ModelBatches(self.data.train.iterator(position))

    def make_train_step(self):
        return st.make_train_step(self.parts, self.tx, self.lr_schedule, self.shardings)

    def new_window(self) -> SummingWindow:
        # loss per prediction event over the window
        return SummingWindow(ratios={"loss": ("sum_nll", "num_events")}, tokens="num_tokens",
                             totals={"num_events": "num_events"})


    # -- validation ----------------------------------------------------------------------------

    def has_validation(self) -> bool:
        return self.data.valid is not None

    def evaluate(self, state, rest) -> Evaluation:
        """Mean loss per prediction event over the whole validation split (memory starts empty)."""
        if self._valid_batches is None:  # built once: the validation split is fixed
            source = self.data.valid.epoch_source(0)
            self._valid_batches = [model_batch(source[i]) for i in range(len(source))]
            self._eval_step = st.make_eval_step(self.parts, self.shardings)
        memory = st.empty_memory(self.parts, self.config.evaluation.batch_size, self.shardings)
        totals, counts = [], []
        for batch in self._valid_batches:
            total, events, memory = self._eval_step(state.params, rest, shd.global_batch(batch, self.run.mesh),
                                                    memory)
            totals.append(total)
            counts.append(events)
        totals, counts = jax.device_get((totals, counts))  # one transfer at the end, not one per batch
        num_events = int(sum(int(c) for c in counts))
        loss = float(sum(np.float64(t) for t in totals) / max(num_events, 1))
        return Evaluation(values={"valid_loss": loss},
                          record={"loss": loss, "unigram_loss": self.unigram, "num_events": num_events},
                          message=f"loss {loss:.4f} (unigram {self.unigram:.4f})")

    def result_fields(self) -> dict[str, Any]:
        return {"unigram_loss": self.unigram, "num_parameters": self.num_parameters,
                "vocab_size": self.data.vocab.size, "dropped_stack": self.data.dropped}

    def summary(self, result) -> str | None:
        """The model's validation loss beside the unigram baseline's (when the last step was validated)."""
        num_steps = self.num_steps
        if not (result.final_step == num_steps and num_steps in result.valid_losses):
            return None
        final, unigram = result.valid_losses[num_steps], self.unigram
        ran = num_steps - result.start_step
        return (f"done: step {num_steps} ({ran} step{'s' * (ran != 1)} in {format_duration(result.seconds)}).\n"
                f"  validation loss (nats per prediction event): model {final:.4f} | unigram {unigram:.4f}\n"
                f"  perplexity per prediction event:             model {math.exp(final):.2f} | "
                f"unigram {math.exp(unigram):.2f}\n"
                f"  best validation loss {result.best_valid_loss:.4f} at step {result.best_step}")
