"""Resuming: bit-identical losses across a stop, and falling back from a corrupt or partial checkpoint."""

import io
import os
import shutil
import signal
from pathlib import Path

import pytest

from tgjax.train.loop import train

from .helpers import read_metrics, small_config

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


NUM_STEPS = 10


def config(*overrides: str):
    """The test-sized config with one layer (a resume is bit-identical at any size; each run compiles its step)."""
    return small_config("model.num_layers=1", *overrides)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """One run of 10 steps without a break: the reference."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    return train(config(), workdir, quiet=True)


@pytest.fixture(scope="module")
def stopped_after_step_6(tmp_path_factory):
    """One run stopped after step 6 (checkpoints 2, 4, 5, 6, their manifests with sha256 sums: the default); the
    tests resume, or damage and resume, copies of its workdir (`_copy_of_stopped`)."""
    return train(config(), tmp_path_factory.mktemp("stopped") / "run", stop_after_step=6, quiet=True)


def _copy_of_stopped(stopped_after_step_6, tmp_path: Path) -> Path:
    """A workdir as a run stopped after step 6 leaves it: a copy of `stopped_after_step_6`'s."""
    return Path(shutil.copytree(stopped_after_step_6.workdir, tmp_path / "run"))


def test_stop_after_step_6_and_resume_is_bit_identical(tmp_path, uninterrupted, stopped_after_step_6):
    first = stopped_after_step_6
    assert first.stopped_early and first.final_step == 6
    workdir = _copy_of_stopped(first, tmp_path)
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == ["2", "4", "5", "6"]
    second = train(config(), workdir, quiet=True)
    assert second.start_step == 6 and second.final_step == NUM_STEPS
    assert sorted(second.losses) == [7, 8, 9, 10]
    for step in range(7, NUM_STEPS + 1):
        assert second.losses[step] == uninterrupted.losses[step], step  # exact float equality
    for step in range(1, 7):
        assert first.losses[step] == uninterrupted.losses[step], step
    assert second.valid_losses[NUM_STEPS] == uninterrupted.valid_losses[NUM_STEPS]
    # metrics.jsonl reads as one run: each training step once, validations at 5 and 10.
    records = read_metrics(workdir)
    assert [r["step"] for r in records if r["split"] == "train"] == list(range(1, NUM_STEPS + 1))
    assert [r["step"] for r in records if r["split"] == "valid"] == [5, 10]
    reference = read_metrics(uninterrupted.workdir)
    for mine, theirs in zip(records, reference):
        assert (mine["step"], mine["split"], mine["loss"]) == (theirs["step"], theirs["split"], theirs["loss"])


def test_sigterm_saves_after_the_current_step_and_the_resume_is_bit_identical(tmp_path, uninterrupted):
    def preempt(step, state, metrics):
        if step == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # what a preemption notice sends

    first = train(config(), tmp_path, quiet=True, callback=preempt)
    assert first.stopped_early and first.final_step == 3
    assert (tmp_path / "checkpoints" / "3").is_dir()
    second = train(config(), tmp_path, quiet=True)
    assert second.start_step == 3
    assert all(second.losses[s] == uninterrupted.losses[s] for s in range(4, NUM_STEPS + 1))


def _resume_and_check(workdir: Path, uninterrupted, expected_start: int) -> str:
    stream = io.StringIO()
    result = train(config(), workdir, stream=stream)
    assert result.start_step == expected_start
    for step in range(expected_start + 1, NUM_STEPS + 1):
        assert result.losses[step] == uninterrupted.losses[step], step
    return stream.getvalue()


def test_corrupt_latest_checkpoint_is_reported_and_the_previous_one_used(tmp_path, uninterrupted,
                                                                        stopped_after_step_6):
    assert config().checkpointing.checksums  # a flipped byte keeps the size: only the sha256 sums see it
    workdir = _copy_of_stopped(stopped_after_step_6, tmp_path)
    # Flip bytes in the largest file of step 6 (array data).
    files = sorted((p for p in (workdir / "checkpoints" / "6").rglob("*") if p.is_file()),
                   key=lambda p: p.stat().st_size)
    data = bytearray(files[-1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[-1].write_bytes(bytes(data))
    out = _resume_and_check(workdir, uninterrupted, 5)
    assert "warning: checkpoint step 6 is corrupt or incomplete (file " in out
    assert "does not match its sha256" in out
    assert "resuming from step 5, the newest usable checkpoint" in out
    moved = list((workdir / "checkpoints_corrupt").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith("6-")


def test_partial_latest_checkpoint_is_reported_and_the_previous_one_used(tmp_path, uninterrupted,
                                                                        stopped_after_step_6):
    workdir = _copy_of_stopped(stopped_after_step_6, tmp_path)
    # A save cut short: step 6's state item is gone.
    shutil.rmtree(workdir / "checkpoints" / "6" / "state")
    out = _resume_and_check(workdir, uninterrupted, expected_start=5)
    assert "warning: checkpoint step 6 is corrupt or incomplete (item(s) ['state'] missing" in out


# orbax's asyncio helpers may complain after a failed restore ("Event loop is closed"): harmless here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_unreadable_checkpoint_without_manifest_falls_back_on_orbax_errors(tmp_path, uninterrupted,
                                                                          stopped_after_step_6):
    workdir = _copy_of_stopped(stopped_after_step_6, tmp_path)
    # No manifest to compare with: the restore itself must fail and be caught.
    (workdir / "checkpoint_manifests" / "6.json").unlink()
    (workdir / "checkpoint_manifests" / "5.json").unlink()
    for path in (workdir / "checkpoints" / "6" / "state").rglob("*"):
        if path.is_file() and "manifest" in path.name:
            path.write_bytes(b"garbage")
    (workdir / "checkpoints" / "5" / "pipeline" / "metadata").write_text("{not json")
    out = _resume_and_check(workdir, uninterrupted, expected_start=4)
    assert "checkpoint step 6 is corrupt or incomplete (restore failed: " in out
    assert "checkpoint step 5 is corrupt or incomplete (restore failed: " in out
