"""The training loop: data, model, optimiser, mesh, checkpoints, validation and reports, from one config.

    result = train(config, "runs/tiny")       # resumes from runs/tiny/checkpoints if there are any

Each step: this host's rows become global arrays split over "data", the
jitted step updates the sharded state, and while the device works the host
builds the next batch. Every `logging.interval_steps` a record goes to
`metrics.jsonl` / TensorBoard and the progress line; every
`evaluation.interval_steps` the whole validation split is scored (memory
reset first; mean loss per prediction event) and a checkpoint is saved with
that loss (keep-best); every `checkpointing.interval_steps`, and at the end,
a checkpoint is saved. A NaN or infinite loss stops the run naming the step;
the checkpoints on disk are all from before it. SIGTERM (preemption) saves a
checkpoint after the current step and stops.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np
from flax import nnx

from tgjax.data import pipeline as pl
from tgjax.data.vocab import load_vocabulary
from tgjax.models import MODEL_NAMES, ModelConfig, TransformerLM, count_parameters, model_config
from tgjax.syntax import masks
from tgjax.train import inputs
from tgjax.train import sharding as shd
from tgjax.train import state as st
from tgjax.train.checkpoint import CheckpointStore, Problem, local_workdir
from tgjax.train.config import UNSET_PATH, ConfigError, to_json_dict
from tgjax.train.metrics import MetricsWriter, Progress, format_duration
from tgjax.train.optimizer import make_optimizer
from tgjax.train.validation import check_values

log = logging.getLogger(__name__)

# The batch fields the model reads (the pipeline also emits bookkeeping: seq_index, segment_index).
MODEL_FIELDS = tuple(masks.CompactChunk._fields)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message names the step and the last good checkpoint."""


@dataclasses.dataclass
class TrainResult:
    """What a call to `train` did."""

    workdir: Path
    start_step: int  # the step it resumed from (0: a fresh run)
    final_step: int
    losses: dict[int, float]  # training loss of every step this call ran
    valid_losses: dict[int, float]  # validation loss at each validation this call ran
    unigram_loss: float | None
    best_valid_loss: float | None
    best_step: int | None
    num_parameters: int
    vocab_size: int
    seconds: float
    checkpoint_problems: list[Problem]
    dropped_stack: list[inputs.DroppedStackReport]
    stopped_early: bool = False  # by `stop_after_step` or SIGTERM


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
        )
    except ValueError as e:
        raise ConfigError(str(e)) from e


def setup_distributed(config) -> None:
    """`jax.distributed.initialize()` when `distributed.initialize` is set (before any device is touched)."""
    d = config.distributed
    if d.initialize and not jax.distributed.is_initialized():
        jax.distributed.initialize(coordinator_address=d.coordinator_address, num_processes=d.num_processes,
                                   process_id=d.process_id)


def count_model_parameters(model_cfg: ModelConfig) -> int:
    """Parameters of a model without allocating it."""
    return count_parameters(nnx.eval_shape(lambda: TransformerLM(model_cfg, rngs=nnx.Rngs(0))))


def describe(config) -> dict[str, Any]:
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
    return {
        "num_parameters": count_model_parameters(model_cfg),
        "vocab_size": vocab_size,
        "vocab_source": source,
        "model": dataclasses.asdict(model_cfg),
    }


# -----------------------------------------------------------------------------
# The loop.


class _Stop:
    """Set by SIGTERM (a preemption notice): finish the step, save, stop."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


class _Window:
    """Sums over the steps since the last log record: loss, events, tokens and the time they took."""

    def __init__(self):
        self.steps, self.nll, self.events, self.tokens = 0, 0.0, 0, 0
        self.start = time.perf_counter()

    def add(self, metrics: dict) -> None:
        self.steps += 1
        self.nll += float(metrics["sum_nll"])
        self.events += int(metrics["num_events"])
        self.tokens += int(metrics["num_tokens"])

    def record(self, step: int, metrics: dict) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return {
            "split": "train", "step": step,
            "loss": self.nll / max(self.events, 1),  # per prediction event over the window
            "learning_rate": float(metrics["learning_rate"]),
            "tokens_per_second": self.tokens / elapsed,
            "steps_per_second": self.steps / elapsed,
            "grad_norm": float(metrics["grad_norm"]),
            "num_events": self.events,
        }


def _model_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: batch[name] for name in MODEL_FIELDS if name in batch}


class Trainer:
    """One training run in a workdir: set up from the config, restore if there is anything to restore, run.

    Most users call `train`; the pieces are here to be read one at a time:
    `__init__` (mesh, data, model, optimiser, shardings), `restore_or_init`,
    `evaluate`, `run`.
    """

    def __init__(self, config, workdir: str | Path, *, devices: list | None = None,
                 stream: TextIO | None = None, quiet: bool = False):
        self.started = time.perf_counter()
        validate_config(config)
        setup_distributed(config)
        self.config = config
        self.workdir = local_workdir(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.is_main = jax.process_index() == 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.progress: Progress | None = None
        self.writer: MetricsWriter | None = None
        # The mesh's checks need the devices but no checkpoint manager (whose threads start on opening).
        self.mesh = shd.make_mesh(config.mesh.data, config.mesh.model, devices)
        self.batch_size = config.training.batch_size
        shd.check_batch_divides(self.batch_size, self.mesh, "training.batch_size")
        shd.check_batch_divides(config.evaluation.batch_size, self.mesh, "evaluation.batch_size")
        ck = config.checkpointing
        self.store = CheckpointStore(self.workdir, max_to_keep=ck.max_to_keep, keep_best=ck.keep_best,
                                     async_save=ck.async_save, checksums=ck.checksums, save_memory=ck.save_memory)
        try:
            self._setup()
        except BaseException:
            self.store.close()
            raise

    def _setup(self) -> None:
        config = self.config
        self.resuming = self.store.latest_step() is not None

        # Data and vocabulary (checked against the workdir's on resume).
        self.data = inputs.make_training_data(config, lambda v: resolve_model_config(config, v), self.workdir,
                                              resuming=self.resuming, process_index=jax.process_index(),
                                              process_count=jax.process_count())
        vocab = self.data.vocab
        for report in self.data.dropped:
            if report.dropped_stack_entries:
                self.say(f"warning: memory too short: {report}")
        if config.model.vocab_size and config.model.vocab_size != vocab.size:
            self.say(f"note: model.vocab_size={config.model.vocab_size}, but the vocabulary "
                     f"({self.data.vocab_path.name}) has {vocab.size} ids: the model uses {vocab.size}")
        self.vocab_fingerprint = inputs.vocabulary_fingerprint(vocab)
        self.unigram = (inputs.unigram_cross_entropy(self.data.train.encoded, self.data.valid.encoded, vocab.size)
                        if self.data.valid is not None else None)

        # Model, optimiser, shardings.
        self.model_config = resolve_model_config(config, vocab.size)
        self.parts = st.model_parts(self.model_config)
        self.num_parameters = count_model_parameters(self.model_config)
        self.tx, self.schedule = make_optimizer(config.training)
        self.rules = tuple(tuple(rule) for rule in config.mesh.logical_axis_rules)
        self.shardings = st.state_shardings(self.parts, self.tx, self.mesh, self.rules)
        self.best: dict[str, Any] = {"loss": None, "step": None}
        self._valid_batches: list[dict[str, np.ndarray]] | None = None

    # -- reporting ---------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """A message for the person running this (on `stream`, between progress lines)."""
        log.info("%s", text)
        if self.quiet or not self.is_main:
            return
        if self.progress is not None:
            self.progress.message(text)
        else:
            print(text, file=self.stream, flush=True)

    # -- state ---------------------------------------------------------------------------------

    def _fresh_state(self) -> tuple[st.TrainState, Any]:
        state, rest, _ = st.init_train_state(self.parts, self.tx, self.mesh, self.rules,
                                             seed=self.config.training.seed, batch_size=self.batch_size)
        return state, rest

    def restore_or_init(self) -> tuple[st.TrainState, Any, int, dict | None, list[Problem]]:
        """The newest good checkpoint, or a fresh start.

        Returns (state, rest, start step, data position or None, the checkpoints skipped as unusable).
        """
        if not self.resuming:
            state, rest = self._fresh_state()
            return state, rest, 0, None, []
        target = st.abstract_train_state(self.parts, self.tx, self.shardings, self.batch_size)
        restored, problems = self.store.restore_latest(
            target, lambda step, meta: check_same_run(meta, step, self.store.directory, self.vocab_fingerprint,
                                                      self.data.vocab_path, self.model_config, self.batch_size))
        for problem in problems:
            self.say(f"warning: {problem}")
        if restored is None:
            self.say(f"no usable checkpoint in {self.store.directory}; starting from step 0")
            state, rest = self._fresh_state()
            return state, rest, 0, None, problems
        # Parameters come from the checkpoint; only the constants and RNG streams are made here.
        rest = st.init_rest(self.parts, self.shardings, self.config.training.seed)
        self.best = {"loss": restored.meta.get("best_valid_loss"), "step": restored.meta.get("best_step")}
        where = "the newest usable checkpoint" if problems else str(self.store.directory / str(restored.step))
        self.say(f"resuming from step {restored.step}, {where}" if problems
                 else f"resuming from step {restored.step} ({where})")
        return restored.state, rest, restored.step, restored.pipeline, problems

    def checkpoint_meta(self) -> dict[str, Any]:
        """What a checkpoint records about its run (checked on resume by `check_same_run`)."""
        return {"vocab_sha256": self.vocab_fingerprint, "vocab_size": self.data.vocab.size,
                "best_valid_loss": self.best["loss"], "best_step": self.best["step"],
                "model": dataclasses.asdict(self.model_config), "batch_size": self.batch_size,
                "config": to_json_dict(self.config)}

    # -- validation ----------------------------------------------------------------------------

    def evaluate(self, params, rest, eval_step) -> tuple[float, int]:
        """Mean loss per prediction event over the whole validation split (memory starts empty), and the events."""
        if self._valid_batches is None:  # built once: the validation split is fixed
            source = self.data.valid.epoch_source(0)
            self._valid_batches = [_model_batch(source[i]) for i in range(len(source))]
        memory = st.empty_memory(self.parts, self.config.evaluation.batch_size, self.shardings)
        totals, counts = [], []
        for batch in self._valid_batches:
            total, events, memory = eval_step(params, rest, shd.global_batch(batch, self.mesh), memory)
            totals.append(total)
            counts.append(events)
        totals, counts = jax.device_get((totals, counts))  # one transfer at the end, not one per batch
        num_events = int(sum(int(c) for c in counts))
        return float(sum(np.float64(t) for t in totals) / max(num_events, 1)), num_events

    # -- the loop ------------------------------------------------------------------------------

    def run(self, *, stop_after_step: int | None = None,
            callback: Callable[[int, st.TrainState, dict], None] | None = None) -> TrainResult:
        config, store = self.config, self.store
        state, rest, start_step, data_position, problems = self.restore_or_init()
        num_steps = config.training.num_steps
        mesh = self.mesh
        self.say(f"model {config.model.name}: {self.num_parameters:,} parameters, vocabulary "
                 f"{self.data.vocab.size} ids, mesh data={mesh.shape['data']} x model={mesh.shape['model']} over "
                 f"{mesh.devices.size} {mesh.devices.flat[0].platform} device(s)")
        if self.unigram is not None:
            self.say(f"unigram baseline on validation: {self.unigram:.4f} nats per prediction event")
        result = TrainResult(self.workdir, start_step, start_step, {}, {}, self.unigram, self.best["loss"],
                             self.best["step"], self.num_parameters, self.data.vocab.size, 0.0, problems,
                             self.data.dropped)
        if start_step >= num_steps:
            self.say(f"already trained to step {start_step} (training.num_steps={num_steps}); nothing to do")
            result.seconds = time.perf_counter() - self.started
            return result

        train_step = st.make_train_step(self.parts, self.tx, self.schedule, self.shardings)
        eval_step = st.make_eval_step(self.parts, self.shardings)
        self.writer = MetricsWriter(self.workdir, start_step=start_step, tensorboard=config.logging.tensorboard,
                                    enabled=self.is_main)
        self.progress = Progress(num_steps, start_step, stream=self.stream, enabled=not self.quiet and self.is_main)
        iterator = self.data.train.iterator(data_position)
        batch = _model_batch(next(iterator))
        position = iterator.get_state()  # the data position once `batch` is consumed
        window = _Window()
        last_saved = start_step or None
        with _Stop() as stop:
            for step in range(start_step + 1, num_steps + 1):
                state, metrics = train_step(state, rest, shd.global_batch(batch, mesh))
                position_after_step = position
                if step < num_steps:  # the host builds the next batch while the device works
                    batch = _model_batch(next(iterator))
                    position = iterator.get_state()
                metrics = jax.device_get(metrics)
                loss = float(metrics["loss"])
                if not math.isfinite(loss):
                    store.wait()
                    kept = (f"the last good checkpoint is step {last_saved} in {store.directory}" if last_saved
                            else "no checkpoint was saved before it")
                    raise TrainingDiverged(f"training loss is {loss} at step {step}; stopped, and {kept} "
                                           f"(nothing from step {step} was saved)")
                result.losses[step], result.final_step = loss, step
                window.add(metrics)
                if callback is not None:
                    callback(step, state, metrics)

                if step % config.logging.interval_steps == 0 or step == num_steps:
                    record = window.record(step, metrics)
                    self.writer.write(record)
                    self.progress.update(step, loss=record["loss"], learning_rate=record["learning_rate"],
                                         steps_per_second=record["steps_per_second"],
                                         tokens_per_second=record["tokens_per_second"])
                    window = _Window()

                paused_at = time.perf_counter()  # validation and saving do not count towards steps/s
                valid_loss = None
                interval = config.evaluation.interval_steps
                if self.data.valid is not None and ((interval and step % interval == 0) or step == num_steps):
                    valid_loss, num_events = self.evaluate(state.params, rest, eval_step)
                    improved = self.best["loss"] is None or valid_loss < self.best["loss"]
                    if improved:
                        self.best = {"loss": valid_loss, "step": step}
                    result.valid_losses[step] = valid_loss
                    result.best_valid_loss, result.best_step = self.best["loss"], self.best["step"]
                    self.writer.write({"split": "valid", "step": step, "loss": valid_loss,
                                       "unigram_loss": self.unigram, "num_events": num_events, "best": improved})
                    self.say(f"validation at step {step}: loss {valid_loss:.4f} (unigram {self.unigram:.4f}), "
                             f"best {self.best['loss']:.4f} at step {self.best['step']}")

                stopping = stop.requested or (stop_after_step is not None and step >= stop_after_step)
                if (valid_loss is not None or step % config.checkpointing.interval_steps == 0
                        or step == num_steps or stopping):
                    store.save(step, state, position_after_step, self.checkpoint_meta(), valid_loss=valid_loss)
                    last_saved = step
                window.start += time.perf_counter() - paused_at
                if stopping:
                    result.stopped_early = True
                    self.say(f"stopped after step {step} ({'SIGTERM' if stop.requested else 'stop_after_step'}); "
                             f"checkpoint saved, re-run the same command to resume")
                    break
        store.wait()
        self.progress.close()
        result.seconds = time.perf_counter() - self.started
        if result.final_step == num_steps and num_steps in result.valid_losses:
            self._summary(result, start_step, num_steps)
        return result

    def _summary(self, result: TrainResult, start_step: int, num_steps: int) -> None:
        """The model's validation loss beside the unigram baseline's."""
        final, unigram = result.valid_losses[num_steps], self.unigram
        ran = num_steps - start_step
        self.say(f"done: step {num_steps} ({ran} step{'s' * (ran != 1)} in {format_duration(result.seconds)}).\n"
                 f"  validation loss (nats per prediction event): model {final:.4f} | unigram {unigram:.4f}\n"
                 f"  perplexity per prediction event:             model {math.exp(final):.2f} | "
                 f"unigram {math.exp(unigram):.2f}\n"
                 f"  best validation loss {self.best['loss']:.4f} at step {self.best['step']}")

    def close(self) -> None:
        """Waits for checkpoint saves to finish and closes the writers."""
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
        self.store.close()


def train(config, workdir: str | Path, *, devices: list | None = None, stop_after_step: int | None = None,
          stream: TextIO | None = None, quiet: bool = False,
          callback: Callable[[int, st.TrainState, dict], None] | None = None) -> TrainResult:
    """Trains (or resumes training) as `config` says, in `workdir`; see the module docstring.

    Args:
      config: a resolved config (`tgjax.train.config.load_config`).
      workdir: checkpoints, vocabulary, metrics.jsonl and TensorBoard events go here.
      devices: the devices of the mesh (default: all).
      stop_after_step: stop (after saving a checkpoint) once this step is done, as a preemption would.
      stream: where the progress line and messages go (default stderr).
      quiet: no progress line or messages.
      callback: called after every step with (step, state, metrics as host scalars); for custom
        logging or inspection (it must not keep `state`: the next step donates its buffers).

    Raises:
      ConfigError, FileNotFoundError, ValueError: bad config or data (named).
      inputs.VocabularyMismatch: the data's vocabulary is not the checkpoints'.
      TrainingDiverged: NaN / inf loss.
    """
    trainer = Trainer(config, workdir, devices=devices, stream=stream, quiet=quiet)
    try:
        return trainer.run(stop_after_step=stop_after_step, callback=callback)
    finally:
        trainer.close()


# Model settings that a checkpoint's arrays depend on (dropout rates may change between runs).
_DROPOUTS = ("embedding_dropout", "core_dropout", "final_dropout")


def check_same_run(meta: dict, step: int, directory: Path, vocab_fp: str, vocab_path: Path,
                   model_cfg: ModelConfig, batch_size: int) -> None:
    """Refuses a checkpoint of another vocabulary, model or batch size before its arrays are read."""
    if meta.get("vocab_sha256") != vocab_fp:
        raise inputs.VocabularyMismatch(
            f"the vocabulary {vocab_path} is not the one checkpoint step {step} in {directory} was trained with "
            f"({meta.get('vocab_size')} ids there, fingerprints differ); restore the original file or use a new "
            f"--workdir")
    saved = meta.get("model", {})
    here = dataclasses.asdict(model_cfg)
    changed = [f"model.{k}: {saved.get(k)!r} in the checkpoint, {v!r} now" for k, v in here.items()
               if k not in _DROPOUTS and saved.get(k) != v]
    if meta.get("batch_size") != batch_size:
        changed.append(f"training.batch_size: {meta.get('batch_size')} in the checkpoint, {batch_size} now")
    if changed:
        raise ConfigError(f"checkpoint step {step} in {directory} is of another model or batch: "
                          + "; ".join(changed) + ". Use the original config or a new --workdir")
