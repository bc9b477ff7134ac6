"""The trainer: mesh, checkpoints, resume, the step loop, metrics and reports, for any task.

    result = train(config, "runs/tiny")       # resumes from runs/tiny/checkpoints if there are any

A task (`tgjax.train.task`; the config's `trainer` key picks it,
`tgjax.train.tasks`) says what differs between families: the model, the
batches, the step and its metrics, validation and the selection criterion,
the schedule policy. This module does the rest. Each step: this host's rows
become global arrays split over "data", the jitted step updates the sharded
state, and while the device works the host builds the next batch. Every
`logging` interval a record goes to `metrics.jsonl` / TensorBoard and the
progress line; every validation interval the task evaluates and a checkpoint
is saved with its selection value (keep-best); every checkpoint interval,
and at the end, a checkpoint is saved.

The host does not wait for each step: a step's metrics stay device arrays
and are fetched in one batch at the next logging step, and before every
validation and every save (`logging.fetch_every_step=true` fetches after each
step, as a `callback` does too). The host can so dispatch steps ahead of the
device. A NaN or infinite loss is therefore found when its step's metrics are
fetched: the run stops at the first logging step (or validation or save) whose
window holds a non-finite loss, naming the step where it happened; since a save
fetches first, the checkpoints on disk are all from before it. SIGTERM
(preemption) saves a checkpoint after a step and stops; on several hosts
every host saves and stops after the same step, whichever hosts got the
signal and when (`_Preemption` says how they agree; without JAX's preemption
service that costs a collective, done every `checkpointing.preemption_check_steps`
steps). A plateau
schedule may decay the learning rate or stop the run after a validation; a
run it stopped is recorded so (checkpoint meta `schedule_stopped`) and stays
stopped when called again. `TrainResult.stop_reason` says why a run ended
early.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np
from jax.experimental import multihost_utils

from tgjax.progress import Progress
from tgjax.train import sharding as shd
from tgjax.train.checkpoint import CheckpointStore, Problem
from tgjax.train.config import ConfigError, trainer_of
from tgjax.train.metrics import MetricsWriter
from tgjax.train.schedules import decayed
from tgjax.train.step import learning_rate_of
from tgjax.train.task import RunContext, Task, TrainingDiverged
from tgjax.train.tasks import make_task
from tgjax.workdir import FAMILY_NAMES, family_of, make_workdir

log = logging.getLogger(__name__)

__all__ = ["TrainResult", "Trainer", "TrainingDiverged", "setup_distributed", "train"]


@dataclasses.dataclass
class TrainResult:
    """What a call to `train` did."""

    workdir: Any  # an absolute local Path, or for a gs:// workdir an etils.epath.Path (`tgjax.workdir.workdir_path`)
    start_step: int  # the step it resumed from (0: a fresh run)
    final_step: int
    losses: dict[int, float]  # training loss of every step this call ran
    valid_losses: dict[int, float]  # the task's selection value at each validation this call ran
    best_valid_loss: float | None  # the best selection value (lowest or highest, as the task's selection says)
    best_step: int | None
    num_parameters: int
    seconds: float
    checkpoint_problems: list[Problem]
    # The family's own facts about the run (`Task.result_fields`): the treebank LM's vocabulary size, unigram
    # baseline and memory reports, ...
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The rate the optimiser state holds at the end (after any plateau decay), when it holds one.
    final_learning_rate: float | None = None
    stopped_early: bool = False  # by `stop_after_step`, SIGTERM or the schedule's early stopping
    # Why it stopped before num_steps: "stop_after_step", "sigterm" (both resume on the next call) or
    # "schedule" (early stopping: the run is over, and a later call does nothing).
    stop_reason: str | None = None


def setup_distributed(config) -> None:
    """`jax.distributed.initialize()` when `distributed.initialize` is set (before any device is touched)."""
    d = config.distributed
    if d.initialize and not jax.distributed.is_initialized():
        jax.distributed.initialize(coordinator_address=d.coordinator_address, num_processes=d.num_processes,
                                   process_id=d.process_id)


class SigtermFlag:
    """A SIGTERM handler that only records the signal (`signalled`), for code that runs several trainings in one
    process (`tgjax reproduce`) and must stop between them. A training loop entered while it is installed takes
    a signal it already recorded as its own (it saves and stops after its first step) and records the ones it
    receives in it, so the caller knows too."""

    def __init__(self) -> None:
        self.signalled = False

    def __call__(self, signum, frame) -> None:
        self.signalled = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[SigtermFlag]:
        """This flag as the process's SIGTERM handler within the block (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGTERM, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)


def _sigterm_already_recorded() -> bool:
    """A single process whose caller's `SigtermFlag` (the installed SIGTERM handler) recorded the signal."""
    handler = signal.getsignal(signal.SIGTERM)
    return jax.process_count() == 1 and isinstance(handler, SigtermFlag) and handler.signalled


class _Preemption:
    """SIGTERM (a preemption notice) -> the step after which every process saves and stops, the same on all.

    A checkpoint save is collective: if hosts that got the signal at different
    steps saved at different steps, the save would hang or mix steps. So the
    decision to stop is agreed, in one of three ways:

    - One process: its own SIGTERM handler sets a flag, read after each step.
    - Several processes with JAX's preemption service (on by default in
      `jax.distributed.initialize`; the `jax_enable_preemption_service` flag):
      the service's own SIGTERM notifier tells the coordination service, which
      tells every process, and `multihost_utils.reached_preemption_sync_point`
      (what orbax's `CheckpointManager.reached_preemption` calls) is True on all
      of them at the same step. It costs nothing until a notice comes, which is
      why it is preferred on pods. We install no handler here: a Python handler
      replaces the service's and the service would never hear the notice. The
      stop comes a little after the signal (the notifier polls about once a
      second), still within a preemption's grace period.
    - Several processes without the service: our handler sets a local flag,
      and every `check_every` steps (`checkpointing.preemption_check_steps`)
      the flags are combined by `process_allgather`, so all hosts see the same
      "someone got SIGTERM" at the same step. The collective waits for the
      device to finish the steps dispatched so far, hence not every step: the
      stop comes up to `check_every - 1` steps after the signal.
    """

    def __init__(self, check_every: int = 1):
        self.check_every = check_every
        self.requested = False  # set once the processes agree to stop
        self._signalled = False  # this process got SIGTERM (local; not yet agreed)
        self._previous = None
        several = jax.process_count() > 1
        self.uses_service = several and jax.distributed.is_initialized() and jax.config.jax_enable_preemption_service
        self._combine = several and not self.uses_service

    def __enter__(self):
        if not self.uses_service and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            if isinstance(self._previous, SigtermFlag) and self._previous.signalled:
                self._signalled = True  # the signal came before this loop began: stop after its first step
        return self

    def _handle(self, signum, frame):
        self._signalled = True
        if isinstance(self._previous, SigtermFlag):
            self._previous(signum, frame)

    def agreed(self, step: int) -> bool:
        """Whether every process stops after `step` (each process calls this after every step, in step)."""
        if self.uses_service:
            self.requested = multihost_utils.reached_preemption_sync_point(step)
        elif self._combine:
            if step % self.check_every:
                return False
            flags = multihost_utils.process_allgather(np.int32(self._signalled))
            self.requested = bool(np.max(flags))
        else:
            self.requested = self._signalled
        return self.requested

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


def _preemption_check_steps(config) -> int:
    """`checkpointing.preemption_check_steps` (10 for a config without it), refused unless a whole number >= 1."""
    value = config.checkpointing.get("preemption_check_steps", 10)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"checkpointing.preemption_check_steps: expected a whole number of steps >= 1, "
                          f"got {value!r}")
    return value


def _fetch_to_host(pending: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """[(step, metrics as device arrays)] -> the same with NumPy values, in one `jax.device_get`."""
    steps = [step for step, _ in pending]
    return list(zip(steps, jax.device_get([metrics for _, metrics in pending])))


def _check_workdir_family(path, given: str | Path, trainer: str) -> None:
    """Refuses, in one line, resuming a workdir that holds another family's run (its checkpoints would be read
    as this family's, and fail somewhere less clear); silent for a new workdir or one that says nothing."""
    held = family_of(path)
    if held is not None and held.trainer != trainer:
        raise ConfigError(f"--workdir {given} holds {FAMILY_NAMES.get(held.trainer, held.trainer)} run "
                          f"(trainer {held.trainer!r}), but this config trains {FAMILY_NAMES.get(trainer, trainer)} "
                          f"model (trainer {trainer!r}); give another --workdir")


class Trainer:
    """One training run of a task in a workdir: set up from the config, restore if there is anything, run.

    Most users call `train`; the pieces are here to be read one at a time:
    `__init__` (task checks, mesh, checkpoint store, the task's setup),
    `restore_or_init`, `evaluate`, `run`.
    """

    def __init__(self, config, workdir: str | Path, *, task: Task | None = None, devices: list | None = None,
                 stream: TextIO | None = None, quiet: bool = False):
        self.started = time.perf_counter()
        self.task = task if task is not None else make_task(config)
        self.task.validate_config(config)
        setup_distributed(config)
        self.config = config
        # A local directory or a bucket (gs://...): every file of the run goes through this path object.
        self.workdir = make_workdir(workdir)
        _check_workdir_family(self.workdir, workdir, trainer_of(config))
        self.is_main = jax.process_index() == 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.progress: Progress | None = None
        self.writer: MetricsWriter | None = None
        # The mesh's checks need the devices but no checkpoint manager (whose threads start on opening).
        self._preemption_check_steps = _preemption_check_steps(config)
        self.mesh = shd.make_mesh(config.mesh.data, config.mesh.model, devices)
        self.task.check_mesh(self.mesh)
        ck = config.checkpointing
        self.store = CheckpointStore(self.workdir, max_to_keep=ck.max_to_keep, keep_best=ck.keep_best,
                                     async_save=ck.async_save, checksums=ck.checksums,
                                     save_memory=ck.get("save_memory", True),  # a task without memory may omit it
                                     best_mode=self.task.selection.mode)
        try:
            self.resuming = self.store.has_checkpoints()  # the same on every process (process 0's listing)
            self.task.setup(RunContext(self.workdir, self.mesh, self.resuming, jax.process_index(),
                                       jax.process_count(), self.say))
        except BaseException:
            self.store.close()
            raise
        self.best: dict[str, Any] = {"value": None, "step": None}
        self._last_saved: int | None = None  # the newest checkpoint step of this run (a NaN message names it)
        self.schedule_stopped = False  # the schedule ended the run (early stopping), here or before a resume

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

    def warn(self, text: str) -> None:
        """A warning about the run's data (a corrupt checkpoint moved aside): shown even when quiet, on stderr."""
        if self.quiet and self.is_main:
            log.info("%s", text)
            print(text, file=sys.stderr, flush=True)
        else:
            self.say(text)

    # -- state ---------------------------------------------------------------------------------

    def restore_or_init(self) -> tuple[Any, Any, int, dict | None, list[Problem]]:
        """The newest good checkpoint, or a fresh start.

        Returns (state, rest, start step, data position or None, the checkpoints skipped as unusable).
        """
        task = self.task
        if not self.resuming:
            state, rest = task.init_state()
            return state, rest, 0, None, []
        restored, problems = self.store.restore_latest(
            task.abstract_state(), lambda step, meta: task.check_checkpoint(meta, step, self.store.directory))
        for problem in problems:
            self.warn(f"warning: {problem}")
        if restored is None:
            self.say(f"no usable checkpoint in {self.store.directory}; starting from step 0")
            state, rest = task.init_state()
            return state, rest, 0, None, problems
        rest = task.restored_rest()
        task.resume_from(restored.meta)
        self.best = {"value": restored.meta.get("best_valid_loss"), "step": restored.meta.get("best_step")}
        self.schedule_stopped = bool(restored.meta.get("schedule_stopped", False))
        where = "the newest usable checkpoint" if problems else str(self.store.directory / str(restored.step))
        self.say(f"resuming from step {restored.step}, {where}" if problems
                 else f"resuming from step {restored.step} ({where})")
        return restored.state, rest, restored.step, restored.pipeline, problems

    def checkpoint_meta(self) -> dict[str, Any]:
        """The task's run facts (checked on resume) and the best selection value so far."""
        # "family": what `tgjax.load` reads to know what the checkpoint holds (no guessing from files).
        return {**self.task.checkpoint_meta(), "family": trainer_of(self.config), "best_valid_loss": self.best["value"],
                "best_step": self.best["step"], "schedule_stopped": self.schedule_stopped}

    # -- the loop ------------------------------------------------------------------------------

    def run(self, *, stop_after_step: int | None = None,
            callback: Callable[[int, Any, dict], None] | None = None) -> TrainResult:
        task, store, mesh = self.task, self.store, self.mesh
        state, rest, start_step, data_position, problems = self.restore_or_init()
        num_steps = task.num_steps
        for line in task.describe_run():
            self.say(line)
        facts = dict(task.result_fields())
        result = TrainResult(self.workdir, start_step, start_step, {}, {}, self.best["value"], self.best["step"],
                             facts.pop("num_parameters", 0), 0.0, problems, facts)
        if self.schedule_stopped:
            self.say(f"already stopped early at step {start_step} (no improvement); nothing to do")
            result.stopped_early, result.stop_reason = True, "schedule"
        elif start_step >= num_steps:
            self.say(f"already trained to step {start_step} (training.num_steps={num_steps}); nothing to do")
        if self.schedule_stopped or start_step >= num_steps:
            result.seconds = time.perf_counter() - self.started
            return result
        if _sigterm_already_recorded():  # do not compile a step that must not run
            self.say(f"SIGTERM came before step {start_step + 1}; nothing trained")
            result.stop_reason, result.seconds = "sigterm", time.perf_counter() - self.started
            return result

        train_step = task.make_train_step()
        self.writer = MetricsWriter(self.workdir, start_step=start_step, tensorboard=task.tensorboard,
                                    enabled=self.is_main)
        self.progress = Progress(num_steps, label="step", noun="step", start=start_step, stream=self.stream,
                                 enabled=not self.quiet and self.is_main)
        iterator = task.batches(data_position)
        batch = next(iterator)
        position = iterator.get_state()  # the data position once `batch` is consumed
        window = task.new_window()
        self._last_saved = start_step or None
        # A callback gets each step's metrics as host scalars, so it fetches every step.
        fetch_every_step = bool(self.config.logging.get("fetch_every_step", False)) or callback is not None
        pending: list[tuple[int, dict]] = []  # (step, metrics as device arrays) not fetched yet
        last_metrics: dict = {}
        with _Preemption(self._preemption_check_steps) as stop:
            for step in range(start_step + 1, num_steps + 1):
                step_began = time.perf_counter()
                state, metrics = train_step(state, rest, shd.global_batch(batch, mesh))
                pending.append((step, metrics))
                position_after_step = position
                if step < num_steps:  # the host builds the next batch while the device works
                    batch = next(iterator)
                    position = iterator.get_state()
                if step == start_step + 1:
                    # The first call compiles (every bucket width, where the task has them): minutes on an
                    # accelerator, which would put the first interval's steps/s and ETA far off.
                    compile_seconds = time.perf_counter() - step_began
                    window.start += compile_seconds
                    self.say(f"first step (compiling included) took {compile_seconds:.1f} s; not counted in steps/s")
                result.final_step = step

                logging_due = step % task.logging_interval == 0 or step == num_steps
                interval = task.validation_interval
                validation_due = task.has_validation() and ((interval and step % interval == 0) or step == num_steps)
                if fetch_every_step or logging_due or validation_due:
                    last_metrics = self._take_fetched(pending, step, state, window, result, callback)
                if logging_due:
                    record = window.record(step, last_metrics)
                    self.writer.write(record)
                    self.progress.update(step, rates={"steps": record["steps_per_second"],
                                                      "tokens": record["tokens_per_second"]},
                                         fields=[f"loss {record['loss']:7.4f}", f"lr {record['learning_rate']:.2e}"])
                    window = task.new_window()

                paused_at = time.perf_counter()  # validation and saving do not count towards steps/s
                value, schedule_stop = None, False
                if validation_due:
                    state, value, schedule_stop = self._validate(step, state, rest, result)

                self.schedule_stopped = schedule_stop
                preempted = stop.agreed(step)  # every process, every step (a collective every K steps, at most)
                # A stop requested at the last step is no stop: the run finished (stop_reason None).
                stopping = (preempted or schedule_stop
                            or (stop_after_step is not None and stop_after_step <= step < num_steps))
                if (value is not None or step % task.checkpoint_interval == 0 or step == num_steps or stopping):
                    # Fetch first: a non-finite loss among the pending steps stops the run before this save.
                    last_metrics = self._take_fetched(pending, step, state, window, result, callback) or last_metrics
                    store.save(step, state, position_after_step, self.checkpoint_meta(), valid_loss=value)
                    self._last_saved = step
                window.start += time.perf_counter() - paused_at
                if stopping:
                    result.stopped_early = True
                    result.stop_reason = ("sigterm" if preempted else "schedule" if schedule_stop
                                          else "stop_after_step")
                    why = "SIGTERM" if preempted else task.schedule.stop_reason if schedule_stop else "stop_after_step"
                    self.say(f"{getattr(task, 'label', '')}stopped after step {step} ({why}); checkpoint saved"
                             + ("" if schedule_stop else ", re-run the same command to resume"))
                    break
        store.wait()
        self.progress.close()
        rate = learning_rate_of(getattr(state, "opt_state", None))
        result.final_learning_rate = None if rate is None else float(rate)
        result.seconds = time.perf_counter() - self.started
        summary = task.summary(result)
        if summary:
            self.say(summary)
        return result

    def _take_fetched(self, pending: list[tuple[int, dict]], checked_at: int, state, window, result: TrainResult,
                      callback) -> dict:
        """Fetches the pending steps' metrics in one batch and takes them in step order: the NaN check, the
        loss into `result`, the window, the callback. Empties `pending`; returns the last step's metrics
        ({} when nothing was pending)."""
        if not pending:
            return {}
        fetched = _fetch_to_host(pending)
        pending.clear()
        for step, metrics in fetched:
            loss = float(metrics["loss"])
            if not math.isfinite(loss):
                self._diverged(step, loss, checked_at)
            result.losses[step] = loss
            window.add(metrics)
            if callback is not None:
                callback(step, state, metrics)
        return fetched[-1][1]

    def _diverged(self, step: int, loss: float, checked_at: int):
        """Raises `TrainingDiverged` for a non-finite loss at `step`, found when fetching at `checked_at`."""
        self.store.wait()
        last_saved = self._last_saved
        kept = (f"the last good checkpoint is step {last_saved} in {self.store.directory}" if last_saved
                else "no checkpoint was saved before it")
        found = "" if checked_at == step else f"; found when the metrics were fetched at step {checked_at}"
        raise TrainingDiverged(f"training loss is {loss} at step {step}; stopped, and {kept} "
                               f"(nothing from step {step} on was saved{found})")

    def _validate(self, step: int, state, rest, result: TrainResult) -> tuple[Any, float, bool]:
        """The task's evaluation: the best so far, the record, the message, the schedule's verdict.

        Returns (the state, its learning rate decayed when the schedule says so; the selection value; whether the
        schedule stops the run).
        """
        task = self.task
        evaluation = task.evaluate(state, rest)
        value = evaluation.values[task.selection.name]
        improved = task.selection.improves(value, self.best["value"])
        if improved:
            self.best = {"value": value, "step": step}
        result.valid_losses[step] = value
        result.best_valid_loss, result.best_step = self.best["value"], self.best["step"]
        self.writer.write({"split": "valid", "step": step, **evaluation.record, "best": improved})
        line = getattr(task, "validation_message", None)  # optional (tgjax.train.task)
        self.say(line(step, evaluation, self.best["value"], self.best["step"]) if line is not None
                 else f"validation at step {step}: {evaluation.message}, "
                      f"best {self.best['value']:.4f} at step {self.best['step']}")
        _, decay, schedule_stop = task.schedule.update(value)
        if decay:  # the rate lives in the optimiser state (`schedules.plateau_optimizer`)
            state, rate = decayed(state, task.schedule.factor)
            # `label`: an optional prefix a task gives its lines (the CFL trials: "[trial 2/10] ").
            self.say(f"{getattr(task, 'label', '')}no improvement: learning rate -> {rate:.3g}")
        return state, value, schedule_stop

    def close(self) -> None:
        """Waits for checkpoint saves to finish and closes the writers."""
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
        self.store.close()


def train(config, workdir: str | Path, *, task: Task | None = None, devices: list | None = None,
          stop_after_step: int | None = None, stream: TextIO | None = None, quiet: bool = False,
          callback: Callable[[int, Any, dict], None] | None = None) -> TrainResult:
    """Trains (or resumes training) as `config` says, in `workdir`; see the module docstring.

    Args:
      config: a resolved config (`tgjax.train.config.load_config`).
      workdir: checkpoints, vocabulary, metrics.jsonl and TensorBoard events go here: a local directory or a
        bucket URL (`gs://bucket/run`, written through orbax and `etils.epath`).
      task: the task to train (default: the one the config's `trainer` key names, `tgjax.train.tasks`).
      devices: the devices of the mesh (default: all).
      stop_after_step: stop (after saving a checkpoint) once this step is done, as a preemption would; at or
        past num_steps the run simply finishes (`stop_reason` None).
      stream: where the progress line and messages go (default stderr).
      quiet: no progress line or messages.
      callback: called after every step with (step, state, metrics as host scalars); for custom
        logging or inspection (it must not keep `state`: the next step donates its buffers). With one,
        each step's metrics are fetched as it ends (as with `logging.fetch_every_step`).

    Raises:
      ConfigError, FileNotFoundError, ValueError: bad config or data (named).
      tgjax.workdir.VocabularyMismatch: the data's vocabulary is not the checkpoints'.
      TrainingDiverged: NaN / inf loss.
    """
    trainer = Trainer(config, workdir, task=task, devices=devices, stream=stream, quiet=quiet)
    try:
        return trainer.run(stop_after_step=stop_after_step, callback=callback)
    finally:
        trainer.close()
