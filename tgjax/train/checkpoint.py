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
first, or highest with `best_mode="max"`).

Integrity: orbax writes each step to a temporary directory and renames it
when complete, so a save cut short never looks finished; beyond that, once
a save has finished this module writes a manifest of its files' sizes
(`WORKDIR/checkpoint_manifests/<s>.json`), and with `checksums` (the
trainer's default; `checkpointing.checksums=false` turns them off) their
sha256 sums too, which inference verifies on load. The manifest is written by
a background thread when the next save starts (or at `wait`), so training
never waits for it: hashing reads every byte (3 GB for 252M parameters with
Adam). On resume the newest step is checked (items present, sizes match, with
checksums the sums match, orbax restore succeeds); a step that fails is
reported, moved to `WORKDIR/checkpoints_corrupt/`, and the previous step is
tried.

A workdir may be a bucket URL (`gs://bucket/run`): orbax writes it directly
and the manifests and move-aside go through `etils.epath`
(`tgjax.workdir.checkpoint_workdir`).
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
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies

from tgjax.train.params_state import ParamsState
from tgjax.workdir import (
    CHECKPOINT_ITEMS,
    check_step,
    checkpoint_workdir,
    directory_manifest,
    orbax_read,
    restore_failure,
)

log = logging.getLogger(__name__)

# The state field holding a family's recurrent carry across batches (`ParamsState.carry`), which
# `checkpointing.save_memory=false` leaves out of checkpoints.
RECURRENT_FIELD = "carry"

VALID_LOSS = "valid_loss"


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


class CheckpointStore:
    """Saves and restores training checkpoints under `workdir` (see the module docstring)."""

    def __init__(self, workdir: str | os.PathLike, *, max_to_keep: int = 3, keep_best: int = 1,
                 async_save: bool = True, checksums: bool = False, save_memory: bool = True,
                 best_mode: str = "min"):
        # A relative --workdir is taken from the current directory; a gs:// one is an epath.Path.
        self.workdir = checkpoint_workdir(workdir)
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
            preserve.append(policies.BestN(get_metric_fn=lambda m: m[VALID_LOSS], reverse=o["best_mode"] == "min",
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
        return self.manager.latest_step()

    def save(self, step: int, state: Any, pipeline_state: dict[str, int], meta: dict[str, Any],
             valid_loss: float | None = None) -> None:
        """Starts saving step `step` (in the background when async); `valid_loss` (the task's selection
        value, a loss for the treebank LM) ranks it for keep-best."""
        self._start_manifests()
        metrics = {VALID_LOSS: float(valid_loss)} if valid_loss is not None else None
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
        """
        self.wait()  # every manifest written before any is read
        problems: list[Problem] = []
        restored = None
        for step in sorted(self.manager.all_steps(), reverse=True):
            reason = self.check(step)
            meta = None
            if reason is None:
                try:
                    with orbax_read():  # a failed read: one line, not orbax's teardown noise
                        meta = self.read_meta(step)
                except Exception as e:  # orbax raises many kinds; all mean "unreadable"
                    reason = f"restore failed: meta: {restore_failure(e)}"
            if reason is None:
                if check_meta is not None:
                    check_meta(step, meta)  # a different run's checkpoint: not corruption
                try:
                    with orbax_read():
                        restored = self._restore(step, target)
                    break
                except Exception as e:
                    reason = f"restore failed: {restore_failure(e)}"
            problems.append(Problem(step, reason))
            log.info("%s", problems[-1])
        if problems:
            self._move_aside(problems)
        return restored, problems

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
