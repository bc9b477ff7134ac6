"""CheckpointStore alone: keep-N plus keep-best retention, manifests (sizes; sha256 opted in) written off the
training thread, corrupt-step fallback, a state without memory, and gs:// workdirs through etils.epath
(the trainer on a bucket, cut saves and the multi-host resume decision: test_bucket_workdir.py)."""

import json
import logging
import shutil
import threading

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import logging as absl_logging

from tgjax.train.checkpoint import ORBAX_NO_METRICS_WARNING, CheckpointStore
from tgjax.train.params_state import ParamsState


def fake_state(step: int) -> ParamsState:
    return ParamsState(params={"w": jnp.full((3,), float(step))}, opt_state=(jnp.zeros(()),),
                      step=jnp.asarray(step, jnp.int32), rng=jnp.zeros((2,), jnp.uint32),
                      carry=jnp.ones((1, 2, 4, 3)) * step)


def abstract(state: ParamsState) -> ParamsState:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def test_keeps_the_latest_and_the_best_by_validation_loss(tmp_path):
    store = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1)
    for step, loss in zip((1, 2, 3, 4, 5), (3.0, 1.0, 2.0, 4.0, None)):
        store.save(step, fake_state(step), {"epoch": 0, "step": step}, {"note": step}, valid_loss=loss)
    store.wait()
    assert store.all_steps() == [2, 5]  # 2: the lowest validation loss; 5: the latest
    assert sorted(p.stem for p in (tmp_path / "checkpoint_manifests").glob("*.json")) == ["2", "5"]
    restored, problems = store.restore_latest(abstract(fake_state(0)))
    store.close()
    assert problems == [] and restored.step == 5
    assert restored.pipeline == {"epoch": 0, "step": 5} and restored.meta == {"note": 5}
    chex.assert_trees_all_equal(restored.state, fake_state(5))  # params, optimiser state, step, rng, carry (memory)


def test_a_save_between_evaluations_logs_no_orbax_warning_and_other_warnings_still_show(tmp_path, caplog):
    store = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1)
    with caplog.at_level(logging.WARNING):
        store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {}, valid_loss=None)  # a preemption's save
        store.wait()
        absl_logging.warning("another orbax warning")
    store.close()
    messages = [record.getMessage() for record in caplog.records]
    assert "another orbax warning" in messages and ORBAX_NO_METRICS_WARNING not in messages


@pytest.mark.parametrize("mode", ["min", "max"])
def test_the_best_step_survives_a_resume(tmp_path, mode):
    """A run stopped and resumed (a new store on the same directory) still knows its earlier best.

    Orbax writes a step's metrics to disk only when it tracks a best; without
    them a resumed run saw the earlier steps as metric-less and deleted its best.
    """
    best, worse = (1.0, 9.0) if mode == "min" else (9.0, 1.0)
    first = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1, best_mode=mode)
    first.save(1, fake_state(1), {"step": 1}, {}, valid_loss=best)
    first.save(2, fake_state(2), {"step": 2}, {}, valid_loss=(best + worse) / 2)
    first.wait()
    first.close()
    resumed = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1, best_mode=mode)
    for step in (3, 4):
        resumed.save(step, fake_state(step), {"step": step}, {}, valid_loss=worse)
    resumed.wait()
    assert resumed.all_steps() == [1, 4]  # 1: still the best; 4: the latest
    resumed.close()


@pytest.mark.parametrize("mode", ["min", "max"])
def test_of_equal_values_the_earliest_step_is_kept_as_the_trainer_selects_it(tmp_path, mode):
    """The trainer's selection takes a strict improvement only, so of equal values the first step is its best;
    keeping a later one deleted the best that a resumed task reads its parameters from."""
    first = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1, best_mode=mode)
    first.save(1, fake_state(1), {"step": 1}, {}, valid_loss=0.5)
    first.wait()
    first.close()
    resumed = CheckpointStore(tmp_path, max_to_keep=1, keep_best=1, best_mode=mode)
    for step in (2, 3):
        resumed.save(step, fake_state(step), {"step": step}, {}, valid_loss=0.5)
    resumed.wait()
    assert resumed.all_steps() == [1, 3]  # 1: the first of the equal values; 3: the latest
    resumed.close()


def test_a_state_saved_without_memory_restores_with_empty_memory(tmp_path):
    store = CheckpointStore(tmp_path, save_memory=False, async_save=False)
    store.save(7, fake_state(7), {"epoch": 1, "step": 0}, {})
    restored, _ = store.restore_latest(abstract(fake_state(0)))
    store.close()
    assert restored.step == 7 and float(restored.state.params["w"][0]) == 7.0
    np.testing.assert_array_equal(restored.state.carry, np.zeros((1, 2, 4, 3)))


def test_check_names_the_file_that_changed(tmp_path):
    store = CheckpointStore(tmp_path, async_save=False)
    store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    store.wait()
    assert store.check(1) is None
    metadata = tmp_path / "checkpoints" / "1" / "pipeline" / "metadata"
    metadata.write_text(metadata.read_text() + " ")
    size = metadata.stat().st_size
    assert store.check(1) == f"file {metadata} has {size} bytes, expected {size - 1}"
    store.close()


def test_a_relative_workdir_is_taken_from_the_current_directory(tmp_path, monkeypatch):
    """orbax refuses relative paths; `tgjax train --workdir runs/x` must still save and restore."""
    monkeypatch.chdir(tmp_path)
    store = CheckpointStore("runs/rel", async_save=False)
    store.save(3, fake_state(3), {"epoch": 0, "step": 3}, {})
    restored, problems = store.restore_latest(abstract(fake_state(0)))
    store.close()
    assert problems == [] and restored.step == 3
    assert (tmp_path / "runs" / "rel" / "checkpoints" / "3").is_dir()


def test_a_url_workdir_is_an_epath_path_for_the_writers_and_the_readers_alike(tmp_path, monkeypatch):
    """pathlib reads gs://bucket/run as the relative directory gs:/bucket/run: a workdir that is a URL is an
    epath.Path, which the trainer writes and evaluation's loaders read (tests/train/bucket.py: a local stand-in)."""
    from tgjax.infer.loading import resolve_step
    from tgjax.workdir import workdir_path

    from .bucket import fake_bucket

    monkeypatch.chdir(tmp_path)
    with fake_bucket(tmp_path / "gcs", monkeypatch):
        with pytest.raises(FileNotFoundError, match=r"workdir 'gs://bucket/run' does not exist"):
            resolve_step("gs://bucket/run")
    assert not (tmp_path / "gs:").exists()
    bucket = workdir_path("gs://bucket/run")
    assert str(bucket / "checkpoints" / "3") == "gs://bucket/run/checkpoints/3"
    assert workdir_path("runs/x") == tmp_path / "runs" / "x"


def test_manifest_and_checks_through_epath_on_a_bucket_url(tmp_path, monkeypatch):
    """The manifest and the integrity check of a step on gs:// (tests/train/bucket.py: a local stand-in)."""
    from etils import epath

    from tgjax.workdir import check_step, directory_manifest, workdir_path

    from .bucket import fake_bucket

    local_run = tmp_path / "local"
    store = CheckpointStore(local_run, async_save=False)
    store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    store.close()
    shutil.copytree(local_run, tmp_path / "bucket" / "run")
    with fake_bucket(tmp_path, monkeypatch):
        run = workdir_path("gs://bucket/run")
        assert isinstance(run, epath.Path)
        step_dir = run / "checkpoints" / "1"
        manifest = directory_manifest(step_dir, hashes=True)
        assert manifest == directory_manifest(local_run / "checkpoints" / "1", hashes=True)
        assert check_step(run, 1, checksums=True) is None
        largest = max(manifest, key=lambda name: manifest[name][0])
        with (step_dir / largest).open("wb") as f:
            f.write(b"x")
        assert check_step("gs://bucket/run", 1) == (f"file gs://bucket/run/checkpoints/1/{largest} has 1 bytes, "
                                                    f"expected {manifest[largest][0]}")


def _largest_file(step_dir):
    return max((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def test_hashing_is_off_by_default_and_sizes_still_catch_a_truncated_or_missing_file(tmp_path):
    store = CheckpointStore(tmp_path, async_save=False)
    store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    store.wait()
    manifest = json.loads((tmp_path / "checkpoint_manifests" / "1.json").read_text())
    assert manifest and all(size > 0 and digest is None for size, digest in manifest.values())
    largest = _largest_file(tmp_path / "checkpoints" / "1")
    size = largest.stat().st_size
    largest.write_bytes(largest.read_bytes()[: size // 2])
    assert store.check(1) == f"file {largest} has {size // 2} bytes, expected {size}"
    largest.unlink()
    assert store.check(1) == f"file {largest} is missing"
    store.close()


def test_a_flipped_byte_is_caught_with_checksums_and_passes_the_size_check_without(tmp_path):
    hashed = CheckpointStore(tmp_path, async_save=False, checksums=True)
    hashed.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    hashed.wait()
    manifest = json.loads((tmp_path / "checkpoint_manifests" / "1.json").read_text())
    assert all(len(digest) == 64 for _, digest in manifest.values())
    largest = _largest_file(tmp_path / "checkpoints" / "1")
    data = bytearray(largest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    largest.write_bytes(bytes(data))
    manifest_path = tmp_path / "checkpoint_manifests" / "1.json"
    assert hashed.check(1) == f"file {largest} does not match its sha256 in {manifest_path}"
    hashed.close()
    unhashed = CheckpointStore(tmp_path, async_save=False)  # the same step, hashing off: sizes still agree
    assert unhashed.check(1) is None
    unhashed.close()


def test_a_corrupt_latest_step_is_moved_aside_and_the_previous_one_restored(tmp_path):
    store = CheckpointStore(tmp_path, max_to_keep=3, keep_best=0)
    for step in (1, 2):
        store.save(step, fake_state(step), {"epoch": 0, "step": step}, {"note": step})
    store.wait()
    largest = _largest_file(tmp_path / "checkpoints" / "2")
    largest.write_bytes(largest.read_bytes()[:-1])  # truncated: the cheap check sees it
    restored, problems = store.restore_latest(abstract(fake_state(0)))
    assert restored.step == 1 and restored.meta == {"note": 1}
    chex.assert_trees_all_equal(restored.state, fake_state(1))
    assert [p.step for p in problems] == [2] and "bytes, expected" in problems[0].reason
    (moved,) = (tmp_path / "checkpoints_corrupt").iterdir()
    assert moved.name.startswith("2-") and str(moved) == problems[0].moved_to
    assert store.all_steps() == [1] and not (tmp_path / "checkpoint_manifests" / "2.json").exists()
    store.save(2, fake_state(2), {"epoch": 0, "step": 2}, {})  # the step can be saved again
    store.close()
    assert (tmp_path / "checkpoints" / "2").is_dir()


def test_manifests_are_written_off_the_training_thread(tmp_path, monkeypatch):
    """save() returns while the previous step's manifest is still being computed (a blocked fake hasher)."""
    from tgjax.train import checkpoint as checkpoint_module

    release = threading.Event()
    seen = []

    def slow_manifest(directory, *, hashes):
        seen.append((threading.current_thread().name, release.wait(timeout=30)))
        return {}

    monkeypatch.setattr(checkpoint_module, "directory_manifest", slow_manifest)
    store = CheckpointStore(tmp_path, async_save=True, checksums=True)
    store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    store.save(2, fake_state(2), {"epoch": 0, "step": 2}, {})  # hands step 1 to the manifest thread, returns
    assert not release.is_set()
    release.set()
    store.wait()
    store.close()
    assert len(seen) == 2 and all(name.startswith("tgjax-manifest") and released for name, released in seen)
    assert sorted(p.stem for p in (tmp_path / "checkpoint_manifests").glob("*.json")) == ["1", "2"]
