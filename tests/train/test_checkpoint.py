"""CheckpointStore alone: keep-N plus keep-best retention, manifests, and a state without memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tgjax.train.checkpoint import CheckpointStore
from tgjax.train.state import TrainState


def fake_state(step: int) -> TrainState:
    return TrainState(params={"w": jnp.full((3,), float(step))}, opt_state=(jnp.zeros(()),),
                      step=jnp.asarray(step, jnp.int32), rng=jnp.zeros((2,), jnp.uint32),
                      memory=jnp.ones((1, 2, 4, 3)) * step)


def abstract(state: TrainState) -> TrainState:
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
    np.testing.assert_array_equal(restored.state.params["w"], [5.0, 5.0, 5.0])
    np.testing.assert_array_equal(restored.state.memory, np.full((1, 2, 4, 3), 5.0))


def test_a_state_saved_without_memory_restores_with_empty_memory(tmp_path):
    store = CheckpointStore(tmp_path, save_memory=False, async_save=False)
    store.save(7, fake_state(7), {"epoch": 1, "step": 0}, {})
    restored, _ = store.restore_latest(abstract(fake_state(0)))
    store.close()
    assert restored.step == 7 and float(restored.state.params["w"][0]) == 7.0
    np.testing.assert_array_equal(restored.state.memory, np.zeros((1, 2, 4, 3)))


def test_check_names_the_file_that_changed(tmp_path):
    store = CheckpointStore(tmp_path, async_save=False)
    store.save(1, fake_state(1), {"epoch": 0, "step": 1}, {})
    store.wait()
    assert store.check(1) is None
    metadata = tmp_path / "checkpoints" / "1" / "pipeline" / "metadata"
    metadata.write_text(metadata.read_text() + " ")
    assert store.check(1) == f"file {metadata} has {metadata.stat().st_size} bytes, expected {metadata.stat().st_size - 1}"
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


def test_a_url_workdir_is_refused_not_turned_into_a_local_directory(tmp_path, monkeypatch):
    """pathlib reads gs://bucket/run as the relative directory gs:/bucket/run: refuse it and say what to do."""
    from tgjax.infer.loading import resolve_step
    from tgjax.workdir import local_workdir

    monkeypatch.chdir(tmp_path)
    for call in (lambda: local_workdir("gs://bucket/run"), lambda: CheckpointStore("gs://bucket/run"),
                 lambda: resolve_step("gs://bucket/run")):
        with pytest.raises(ValueError, match=r"'gs://bucket/run' is a URL.*gcsfuse"):
            call()
    assert not (tmp_path / "gs:").exists()
    assert local_workdir("runs/x") == tmp_path / "runs" / "x"
