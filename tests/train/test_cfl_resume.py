"""The CFL trials on the shared trainer: resume after a stop equals an uninterrupted run, finished trials are
read back, the best checkpoint restores into the model, a NaN loss stops the run, metrics.jsonl has no
duplicate steps after a resume."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from tests.xla_flags import xla_flags
from tgjax import cli
from tgjax.train.cfl import load_model, read_params
from tgjax.train.cfl_trials import train_cfl
from tgjax.train.config import load_config
from tgjax.train.loop import TrainingDiverged, train
from tgjax.train.metrics import MetricsWriter
from tgjax.train.tasks.cfl import CFLTask

from .helpers import read_metrics

CONFIG = "configs/stack_cfl.py"
# One layer, 3 batches of 10 per epoch, 4 epochs; every batch padded to width 88, so one train and one
# score program.
SMALL = ["task=marked_reversal", "model=tf", "architecture.num_layers=1", "training.epochs=4",
         "data.train_size=30", "data.valid_size=20", "data.test_lengths=41,43", "data.test_per_length=10",
         "data.length_bucket=88", "evaluation.batch_size=20", "training.learning_rate=0.1", "training.seed=2",
         "training.lr_patience=1", "training.early_stopping_patience=10", "logging.interval_steps=1",
         "logging.tensorboard=false", "checkpointing.async_save=false"]


# The selection value by epoch, scripted so that the plateau (patience 1) decays after epochs 2 and 3 and
# epoch 4 is the best, whatever the model's numbers; the real Δ is still computed, recorded and compared.
SCRIPTED = {1: 0.5, 2: 0.6, 3: 0.7, 4: 0.4}


@pytest.fixture(scope="module", autouse=True)
def scripted_validation():
    original = CFLTask.evaluate

    def evaluate(self, state, rest):
        evaluation = original(self, state, rest)
        value = SCRIPTED[evaluation.record["epoch"]]
        self.valid_history[-1] = evaluation.values["cross_entropy_difference"] = value
        return evaluation

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CFLTask, "evaluate", evaluate)
        yield


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cfl_whole")
    return train_cfl(load_config(CONFIG, SMALL), workdir, quiet=True)


def test_stop_and_resume_gives_the_uninterrupted_numbers(tmp_path, uninterrupted, capsys):
    whole = uninterrupted.best
    assert whole.valid_history == [0.5, 0.6, 0.7, 0.4] and whole.best_epoch == 4
    assert whole.final_learning_rate == pytest.approx(0.1 * 0.9 * 0.9)  # decays after epochs 2 and 3
    config = load_config(CONFIG, SMALL)
    first = train_cfl(config, tmp_path, quiet=True, stop_after_step=8)  # in epoch 3, after the first decay
    assert not first.complete and first.trials == []
    meta_dir = tmp_path / "trial_0" / "checkpoints"
    assert sorted(int(p.name) for p in meta_dir.iterdir() if p.name.isdigit())[-1] == 8
    second = train_cfl(config, tmp_path, quiet=True)
    assert second.complete
    again = second.best
    # Bit-exact: the same validation numbers per epoch, learning rate, best epoch and test Δ.
    assert again.valid_history == whole.valid_history
    assert (again.best_epoch, again.epochs_run, again.final_learning_rate) == (
        whole.best_epoch, whole.epochs_run, whole.final_learning_rate)
    assert again.test["cross_entropy_difference"] == whole.test["cross_entropy_difference"]
    assert again.valid == whole.valid

    # metrics.jsonl reads as one run: each step once, one validation per epoch, the same losses.
    records = read_metrics(tmp_path / "trial_0")
    reference = read_metrics(whole.workdir)
    train_steps = [r["step"] for r in records if r["split"] == "train"]
    assert train_steps == list(range(1, 13))
    assert [r["step"] for r in records if r["split"] == "valid"] == [3, 6, 9, 12]
    for split in ("train", "valid"):
        mine = [(r["step"], r.get("loss"), r.get("cross_entropy_difference"), r["learning_rate"])
                for r in records if r["split"] == split]
        theirs = [(r["step"], r.get("loss"), r.get("cross_entropy_difference"), r["learning_rate"])
                  for r in reference if r["split"] == split]
        assert mine == theirs, split
    assert sorted(r["step"] for r in records if r["split"] == "test_by_length") == [41, 43]

    # A third call finds the trial finished: read back, nothing trained, the same numbers.
    capsys.readouterr()
    third = train_cfl(config, tmp_path)
    assert "finished earlier: best epoch" in capsys.readouterr().err
    assert third.best.valid_history == whole.valid_history
    assert third.best.test["cross_entropy_difference"] == whole.test["cross_entropy_difference"]
    assert read_metrics(tmp_path / "trial_0") == records  # test records replaced, not repeated

    # Another config in the same workdir is refused, naming what differs.
    with pytest.raises(Exception, match=r"learning_rate: 0\.1 there, 0\.02 now"):
        train_cfl(load_config(CONFIG, [*SMALL, "training.learning_rate=0.02"]), tmp_path, quiet=True)


def test_the_best_checkpoint_restores_into_the_model(tmp_path):
    config = load_config(CONFIG, [*SMALL, "training.epochs=2"])
    params_by_step = {}

    def keep(step, state, metrics):
        params_by_step[step] = jax.tree.map(np.asarray, jax.device_get(state.params))

    task = CFLTask(config)
    result = train(config, tmp_path, task=task, quiet=True, callback=keep)
    assert result.best_step in (3, 6) and sorted(result.valid_losses) == [3, 6]
    restored = read_params(tmp_path, result.best_step, task.model_config)
    flat_restored = jax.tree_util.tree_leaves_with_path(restored)
    flat_kept = dict(jax.tree_util.tree_leaves_with_path(params_by_step[result.best_step]))
    assert len(flat_restored) == len(flat_kept) > 0
    for path, value in flat_restored:
        np.testing.assert_array_equal(np.asarray(value), flat_kept[path])
    # ... and not those of the other validated step (the checkpoint read is the best one's).
    other = dict(jax.tree_util.tree_leaves_with_path(params_by_step[9 - result.best_step]))
    assert any(not np.array_equal(np.asarray(value), other[path]) for path, value in flat_restored)

    # The trial's results.json (written by `finish`) + load_model: the model holds those parameters, also
    # after the directory has moved.
    task.finish(result)
    moved = tmp_path.parent / f"{tmp_path.name}_moved"
    shutil.move(tmp_path, moved)
    model, cfl = load_model(moved)
    loaded = dict(jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param))))
    for path, value in flat_restored:
        np.testing.assert_array_equal(np.asarray(loaded[path]), np.asarray(value))
    assert cfl.name == "marked_reversal"


def test_a_nan_loss_raises_training_diverged(tmp_path, monkeypatch, capsys):
    original = CFLTask.make_train_step

    def poisoned(self):
        step = original(self)

        def nan_at_step_2(state, rest, batch):
            state, metrics = step(state, rest, batch)
            if int(state.step) == 2:
                metrics = {**metrics, "loss": metrics["loss"] * float("nan")}
            return state, metrics

        return nan_at_step_2

    monkeypatch.setattr(CFLTask, "make_train_step", poisoned)
    with pytest.raises(TrainingDiverged, match=r"training loss is nan at step 2; stopped"):
        train_cfl(load_config(CONFIG, SMALL), tmp_path / "a", quiet=True)
    args = ["train", "--config", CONFIG, "--workdir", str(tmp_path / "b"), *[f"--config.{o}" for o in SMALL]]
    assert cli.main(args) == 1
    assert "tgjax: error: training loss is nan at step 2" in capsys.readouterr().err


def test_metrics_writer_drops_records_after_the_resumed_step(tmp_path):
    lines = [{"split": "train", "step": s, "loss": 1.0 / s} for s in (1, 2, 3, 4)]
    lines.insert(3, {"split": "valid", "step": 3, "cross_entropy_difference": 0.5})
    lines.append({"split": "valid", "step": 4, "cross_entropy_difference": 0.4})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    writer = MetricsWriter(tmp_path, start_step=3, tensorboard=False)
    writer.write({"split": "train", "step": 4, "loss": 9.0})
    writer.close()
    records = read_metrics(tmp_path)
    assert [(r["split"], r["step"]) for r in records] == [("train", 1), ("train", 2), ("train", 3), ("valid", 3),
                                                          ("train", 4)]
    assert records[-1]["loss"] == 9.0


def test_an_early_stopped_trial_stays_stopped(tmp_path):
    # Epoch 2 is no better than epoch 1 (scripted), so patience 1 stops the trial after step 6 of 12.
    config = load_config(CONFIG, [*SMALL, "training.early_stopping_patience=1"])
    first = train(config, tmp_path, task=CFLTask(config), quiet=True)
    assert (first.stop_reason, first.final_step, first.best_step) == ("schedule", 6, 3)
    again = train(config, tmp_path, task=CFLTask(config), quiet=True)
    assert (again.stop_reason, again.start_step, again.losses) == ("schedule", 6, {})
    assert again.best_step == 3


_MESH_RUN = """
import json, sys
import jax
from tgjax.train.config import load_config
from tgjax.train.loop import train
from tgjax.train.tasks.cfl import CFLTask

out = {"devices": jax.device_count()}
for data in (1, 2):
    config = load_config("configs/stack_cfl.py", json.loads(sys.argv[2]) + [f"mesh.data={data}"])
    shardings = []
    result = train(config, f"{sys.argv[1]}/{data}", task=CFLTask(config), devices=jax.devices()[:data], quiet=True,
                   callback=lambda step, state, metrics: shardings.append(
                       repr(jax.tree.leaves(state.params)[0].sharding)))
    out[data] = {"losses": [result.losses[s] for s in sorted(result.losses)],
                 "valid": [result.valid_losses[s] for s in sorted(result.valid_losses)], "sharding": shardings[0]}
print(json.dumps(out))
"""


@pytest.mark.slow  # two runs in a fresh process: ~25 s on 2 cores
def test_a_two_device_data_mesh_gives_the_numbers_of_one_device(tmp_path, compilation_cache):
    """Two simulated CPU devices (a subprocess: XLA_FLAGS must be set before JAX starts); the batch's strings
    are split over "data", the parameters replicated over it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XLA_FLAGS": xla_flags("--xla_force_host_platform_device_count=2"),
           **compilation_cache, "PYTHONPATH": str(repo)}
    settings = [*SMALL, "training.epochs=2"]
    done = subprocess.run([sys.executable, "-c", _MESH_RUN, str(tmp_path), json.dumps(settings)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    one, two = runs["1"], runs["2"]
    # Parameters split by their logical axes over "model" (size 1 here), never over "data": each device holds them all.
    spec = two["sharding"].split("spec=")[1]
    assert runs["devices"] == 2 and "'data': 2" in two["sharding"] and "'data'" not in spec
    assert len(one["losses"]) == len(two["losses"]) == 6 and len(one["valid"]) == len(two["valid"]) == 2
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
    np.testing.assert_allclose(two["valid"], one["valid"], rtol=1e-5)
