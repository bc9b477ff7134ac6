"""Checkpoints: an orbax `CheckpointManager` (async, keep-N, best by validation loss) with integrity checks.

The workdir layout and the integrity check of one step live in `tgjax.workdir`
(inference reads them too).

A checkpoint at step s, `WORKDIR/checkpoints/<s>/`, holds three items:

    state     the task's whole state (a dataclass of arrays; most families'
              `tgjax.train.params_state.ParamsState`): params, optimiser
              state, step, RNG, and the family's extras: its recurrent carry
              (the treebank LM's memory [K, B, M, d], ON-LSTM's hidden
              state; left out without `checkpointing.save_memory`, and then
              restored empty) and averaged parameters, which make a resume
              mid-sequence bit-identical
    pipeline  the data position {"epoch", "step"} (JSON)
    meta      run facts (JSON): vocabulary fingerprint and size, best validation loss so far

Retention keeps the `max_to_keep` most recent steps and the `keep_best` best
by the task's selection value (steps saved with one as their metric; lowest
first, or highest with `best_mode="max"`). Of equal values the earliest step
is the best, as the trainer's selection (a strict improvement) has it, so the
step a resumed task reads its best parameters from is the one kept.

Integrity: a save cut short never looks finished. On a local disk orbax
writes each step to a temporary directory and renames it when complete; on a
bucket (`gs://`, where a directory rename is a copy of every object) it writes
the step in place and commits it by writing `commit_success.txt` last. A step
without its commit (a temporary name, or no marker) is not listed as a step,
and opening a store removes it. Beyond that, once
a save has finished this module writes a manifest of its files' sizes
(`WORKDIR/checkpoint_manifests/<s>.json`), and with `checksums` (the
trainer's default; `checkpointing.checksums=false` turns them off) their
sha256 sums too, which inference verifies on load. The manifest is written by
a background thread when the next save starts (or at `wait`), so training
never waits for it: hashing reads every byte (3 GB for 252M parameters with
Adam). On resume the newest step is checked (items present, sizes match, with
checksums the sums match, orbax restore succeeds); a step that fails is
reported, moved to `WORKDIR/checkpoints_corrupt/`, and the previous step is
tried. A step committed but without its manifest yet (a save cut between the
two) is complete: orbax's restore is its check.

On several processes (hosts) the step to resume from is chosen once: process 0
lists and checks the steps, and its choice (with the steps it rejected and
why) is broadcast (`multihost_utils.broadcast_one_to_all`), so a host whose
view of the bucket lags (a listing, a metadata cache) can never pick another
step; every process then reads that step, and a read that fails on one of them
counts as failed on all (`restore_latest`). Whether there is a step at all is
decided the same way (`has_checkpoints`).

A workdir may be a bucket URL (`gs://bucket/run`): orbax writes it directly
and the manifests and move-aside go through `etils.epath`
(`tgjax.workdir.workdir_path`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies

from tgjax.train.params_state import ParamsState
from tgjax.workdir import (
    CHECKPOINT_ITEMS,
    check_step,
    directory_manifest,
    orbax_read,
    restore_failure,
    workdir_path,
)

log = logging.getLogger(__name__)

# orbax warns on every save without metrics once it tracks a best; the trainer's saves between evaluations (a
# preemption, a budget's or a chunk's end) have none by design and are ranked by the policy below, so the
# warning says nothing. Only that message is dropped (absl logs through the "absl" logger).
ORBAX_NO_METRICS_WARNING = "Requested `tracked_metric`; did not provide metrics."


def _not_the_no_metrics_warning(record: logging.LogRecord) -> bool:
    return record.getMessage() != ORBAX_NO_METRICS_WARNING


logging.getLogger("absl").addFilter(_not_the_no_metrics_warning)

# The state field holding a family's recurrent carry across batches (`ParamsState.carry`), which
# `checkpointing.save_memory=false` leaves out of checkpoints.
RECURRENT_FIELD = "carry"

VALID_LOSS = "valid_loss"
STEP = "step"  # saved beside the value: ties go to the earliest step


def _rank(metrics: dict, best_mode: str) -> tuple[float, int]:
    """The keep-best sort key (orbax's `BestN` keeps the last of its sort, descending for "min"): the value, then
    the step so that of equal values the earliest sorts last. Steps saved without a step count as step 0."""
    step = int(metrics.get(STEP, 0))
    return float(metrics[VALID_LOSS]), step if best_mode == "min" else -step


@dataclasses.dataclass
class Restored:
    """A checkpoint read back: the state (in the target's shardings), data position, run facts."""

    step: int
    state: Any
    pipeline: dict[str, int]
    meta: dict[str, Any]


@dataclasses.dataclass
class Problem:
    """A checkpoint that could not be used, and why."""

    step: int
    reason: str
    moved_to: str | None = None

    def __str__(self) -> str:
        where = f"; moved to {self.moved_to}" if self.moved_to else ""
        return f"checkpoint step {self.step} is corrupt or incomplete ({self.reason}){where}"


def _state_tree(state: Any, save_memory: bool) -> dict[str, Any]:
    """The state's fields by name (any dataclass of arrays: a task's own state type works too); fields that are
    None (a `ParamsState` without carry or averaged parameters) are left out."""
    tree = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    tree = {name: value for name, value in tree.items() if value is not None}
    if not save_memory and isinstance(state, ParamsState):  # the trainer's carry; a task's own fields are its own
        tree.pop(RECURRENT_FIELD, None)
    return tree


def from_process_0(value: Any) -> Any:
    """Process 0's `value` (anything JSON holds) on every process; the other processes' `value` is ignored.

    One process: `value` itself. Several: its JSON, as bytes, broadcast from
    process 0 (`multihost_utils.broadcast_one_to_all`, a collective that every
    process calls at the same point): first the length, then the bytes.
    """
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    source = jax.process_index() == 0
    data = np.frombuffer(json.dumps(value).encode("utf-8"), np.uint8).astype(np.int32) if source else None
    size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size if source else 0)))
    received = multihost_utils.broadcast_one_to_all(data if source else np.zeros(size, np.int32))
    return json.loads(bytes(np.asarray(received).astype(np.uint8)).decode("utf-8"))


def _failed_on_any_process(reason: str | None) -> str | None:
    """A read's failure, agreed: on several processes a step that one of them could not read is unusable for all
    (`process_allgather` of the flags); this process's own reason, or which processes failed."""
    if jax.process_count() == 1:
        return reason
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.int32(reason is not None))).reshape(-1)
    if reason is None and flags.any():
        reason = f"restore failed on process(es) {[int(i) for i in np.flatnonzero(flags)]}"
    return reason


class CheckpointStore:
    """Saves and restores training checkpoints under `workdir` (see the module docstring)."""

    def __init__(self, workdir: str | os.PathLike, *, max_to_keep: int = 3, keep_best: int = 1,
                 async_save: bool = True, checksums: bool = False, save_memory: bool = True,
                 best_mode: str = "min"):
        # A relative --workdir is taken from the current directory; a gs:// one is an epath.Path.
        self.workdir = workdir_path(workdir)
        self.directory = self.workdir / "checkpoints"
        self.manifest_dir = self.workdir / "checkpoint_manifests"
        self.corrupt_dir = self.workdir / "checkpoints_corrupt"
        self.save_memory = save_memory
        self.checksums = checksums
        # best_mode: "min" keeps the lowest selection values (a loss), "max" the highest (an accuracy).
        self._options = dict(max_to_keep=max_to_keep, keep_best=keep_best, async_save=async_save, best_mode=best_mode)
        self._pending_manifests: list[int] = []  # saved steps whose manifest is not started yet
        # One thread writes manifests (stat, and with checksums sha256, of a finished step) off the training thread.
        self._manifest_writer = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                                      thread_name_prefix="tgjax-manifest")
        self._manifest_jobs: list[concurrent.futures.Future] = []
        self.manager = self._open()

    def _open(self) -> ocp.CheckpointManager:
        o = self._options
        preserve = [policies.LatestN(n=max(o["max_to_keep"], 1))]
        if o["keep_best"] > 0:
            # BestN sorts ascending and keeps the last n: reverse=True keeps the lowest values.
            preserve.append(policies.BestN(get_metric_fn=lambda m: _rank(m, o["best_mode"]),
                                           reverse=o["best_mode"] == "min",
                                           n=o["keep_best"],
                                           keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            preservation_policy=policies.AnyPreservationPolicy(preserve),
            # Retention is the policy above; best_fn only makes orbax write each step's metrics to disk (it does
            # so only when it tracks a best), so that a resumed run still ranks the steps saved before it.
            best_fn=(lambda m: m[VALID_LOSS]) if o["keep_best"] > 0 else None,
            best_mode=o["best_mode"],
            enable_async_checkpointing=o["async_save"],
            create=True,
            cleanup_tmp_directories=True,  # a save cut short leaves a temporary directory: remove it
        )
        return ocp.CheckpointManager(self.directory, item_names=CHECKPOINT_ITEMS, options=options)

    # -- saving ------------------------------------------------------------------------------

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest finished step in this process's listing (`has_checkpoints` is the one all processes agree
        on)."""
        return self.manager.latest_step()

    def has_checkpoints(self) -> bool:
        """Whether there is a step to resume from: orbax's listing, on several processes process 0's, broadcast
        (every process calls this), so that all of them restore or all start afresh."""
        mine = self.manager.latest_step() is not None if jax.process_index() == 0 else None
        return bool(from_process_0(mine))

    def save(self, step: int, state: Any, pipeline_state: dict[str, int], meta: dict[str, Any],
             valid_loss: float | None = None) -> None:
        """Starts saving step `step` (in the background when async); `valid_loss` (the task's selection
        value, a loss for the treebank LM) ranks it for keep-best."""
        self._start_manifests()
        metrics = {VALID_LOSS: float(valid_loss), STEP: int(step)} if valid_loss is not None else None
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_state_tree(state, self.save_memory)),
                pipeline=ocp.args.JsonSave(dict(pipeline_state)),
                meta=ocp.args.JsonSave(dict(meta)),
            ),
            metrics=metrics,
            force=True,
        )
        self._pending_manifests.append(step)

    def wait(self) -> None:
        """Blocks until every save has finished and its manifest is written."""
        self.manager.wait_until_finished()
        self._start_manifests()
        jobs, self._manifest_jobs = self._manifest_jobs, []
        for job in jobs:
            job.result()  # a failure to write a manifest surfaces here
        if jax.process_index() == 0 and self.manifest_dir.exists():
            kept = set(self.manager.all_steps())
            for stale in self.manifest_dir.glob("*.json"):  # manifests of steps retention has deleted
                if stale.stem.isdigit() and int(stale.stem) not in kept:
                    stale.unlink()

    def close(self) -> None:
        self.wait()
        self._manifest_writer.shutdown()
        # orbax's close() does not wait for the clean-up of temporary directories that opening the manager
        # started; a process exiting right after (a data error) would print that thread's traceback.
        cleanup = getattr(self.manager, "_cleanup_tmp_directory_future", None)
        if cleanup is not None:
            cleanup.result()
        self.manager.close()

    def _start_manifests(self) -> None:
        """Hands finished steps to the manifest thread (process 0); waits only for orbax's previous save,
        which `CheckpointManager.save` waits for anyway."""
        if not self._pending_manifests:
            return
        self.manager.wait_until_finished()
        if jax.process_index() == 0:
            for step in self._pending_manifests:
                self._manifest_jobs.append(self._manifest_writer.submit(self._write_manifest, step))
        self._pending_manifests.clear()
        finished = [job for job in self._manifest_jobs if job.done()]
        for job in finished:
            job.result()
        self._manifest_jobs = [job for job in self._manifest_jobs if not job.done()]

    def _write_manifest(self, step: int) -> None:
        """(On the manifest thread.) Sizes, and with checksums sha256 sums, of step `step`'s files."""
        step_dir = self._step_dir(step)
        try:
            manifest = directory_manifest(step_dir, hashes=self.checksums)
            if not step_dir.exists():  # retention deleted the step meanwhile
                return
            self.manifest_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.manifest_dir / f"{step}.json.tmp"
            tmp.write_text(json.dumps(manifest, indent=0, sort_keys=True))
            tmp.replace(self.manifest_dir / f"{step}.json")
        except FileNotFoundError:  # retention deleted the step while it was read
            return
        except Exception as e:  # noqa: BLE001 - a step without a manifest is still checked by orbax's restore
            log.warning("checkpoint step %d: no manifest written (%s: %s)", step, type(e).__name__, e)

    def _step_dir(self, step: int):
        return self.directory / str(step)

    # -- checking and restoring ----------------------------------------------------------------

    def check(self, step: int) -> str | None:
        """Why step `step` cannot be trusted, or None (`check_step`)."""
        return check_step(self.workdir, step, checksums=self.checksums)

    def read_meta(self, step: int) -> dict[str, Any]:
        """The `meta` item of a step (small JSON), read without the state."""
        items = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = items["meta"]
        if not isinstance(meta, dict):
            raise ValueError(f"meta item is {type(meta).__name__}, expected a JSON object")
        return meta

    def restore_latest(self, target: Any, check_meta: Callable[[int, dict], None] | None = None
                       ) -> tuple[Restored | None, list[Problem]]:
        """The newest checkpoint that passes `check` and restores; older steps are tried in turn.

        `target` is a state of `jax.ShapeDtypeStruct`s with shardings.
        `check_meta(step, meta)` runs before the state is read and raises when
        the checkpoint belongs to another run (another model or vocabulary):
        that error propagates, nothing is moved. Unusable (corrupt or
        incomplete) steps are moved aside, so that training can save that step
        again, and returned as `Problem`s for the caller to report. Without
        a saved carry (`save_memory=False`), the restored carry is zeros.

        On several processes every one of them calls this: which step to try
        is process 0's choice (`_pick`, broadcast), and a step that fails to
        read on any process is given up by all (see the module docstring), so
        all of them restore the same step, report the same problems and move
        the same steps aside.
        """
        self.wait()  # every manifest written before any is read
        problems: list[Problem] = []
        restored = None
        below = None  # the steps from here up have been tried
        while True:
            step, rejected = self._pick(below)
            problems += rejected
            if step is None:
                break
            below = step
            reason = None
            meta = None
            try:
                with orbax_read():  # a failed read: one line, not orbax's teardown noise
                    meta = self.read_meta(step)
            except Exception as e:  # orbax raises many kinds; all mean "unreadable"
                reason = f"restore failed: meta: {restore_failure(e)}"
            reason = _failed_on_any_process(reason)
            if reason is None:
                if check_meta is not None:
                    check_meta(step, meta)  # a different run's checkpoint: not corruption
                try:
                    with orbax_read():
                        restored = self._restore(step, target)
                except Exception as e:
                    reason = f"restore failed: {restore_failure(e)}"
                reason = _failed_on_any_process(reason)
                if reason is None:
                    break
                restored = None
            problems.append(Problem(step, reason))
            log.info("%s", problems[-1])
        if problems:
            self._move_aside(problems)
        return restored, problems

    def _pick(self, below: int | None) -> tuple[int | None, list[Problem]]:
        """The newest step under `below` (any, when None) that passes `check`, or None; and the newer ones that
        did not, as `Problem`s. Process 0 lists and checks; on several processes its answer is every process's
        (`from_process_0`)."""
        choice: dict[str, Any] | None = None
        if jax.process_index() == 0:
            rejected = []
            step = None
            for candidate in sorted(self.manager.all_steps(), reverse=True):
                if below is not None and candidate >= below:
                    continue
                reason = self.check(candidate)
                if reason is None:
                    step = candidate
                    break
                rejected.append([candidate, reason])
                log.info("%s", Problem(candidate, reason))
            choice = {"step": step, "rejected": rejected}
        choice = from_process_0(choice)
        return choice["step"], [Problem(int(step), str(reason)) for step, reason in choice["rejected"]]

    def _restore(self, step: int, target: Any) -> Restored:
        tree_target = _state_tree(target, self.save_memory)
        items = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(tree_target),
                pipeline=ocp.args.JsonRestore(),
                meta=ocp.args.JsonRestore(),
            ),
        )
        tree = dict(items["state"])
        carried = getattr(target, RECURRENT_FIELD, None) if isinstance(target, ParamsState) else None
        if carried is not None and RECURRENT_FIELD not in tree:  # saved without the carry: rows start empty
            tree[RECURRENT_FIELD] = jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), carried),
                                            out_shardings=jax.tree.map(lambda s: s.sharding, carried))()
        pipeline = items["pipeline"]
        if not isinstance(pipeline, dict) or set(pipeline) != {"epoch", "step"}:
            raise ValueError(f"pipeline item is {pipeline!r}, expected {{'epoch', 'step'}}")
        if int(tree["step"]) != step:
            raise ValueError(f"state says step {int(tree['step'])}")
        return Restored(step, type(target)(**tree), pipeline, dict(items["meta"]))

    def _move_aside(self, problems: list[Problem]) -> None:
        """Moves unusable step directories out of orbax's way (process 0), then reopens the manager."""
        self.manager.close()
        if jax.process_index() == 0:
            self.corrupt_dir.mkdir(parents=True, exist_ok=True)
            for problem in problems:
                source = self._step_dir(problem.step)
                if source.exists():
                    dest = self.corrupt_dir / f"{problem.step}-{time.strftime('%Y%m%d-%H%M%S')}"
                    if isinstance(source, Path):
                        shutil.move(str(source), str(dest))
                    else:  # a bucket: epath renames (copy and delete on GCS)
                        source.rename(dest)
                    problem.moved_to = str(dest)
                (self.manifest_dir / f"{problem.step}.json").unlink(missing_ok=True)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("tgjax checkpoint fallback")
        self.manager = self._open()
