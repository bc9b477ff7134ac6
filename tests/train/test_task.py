"""The trainer with a task it has never seen: a toy regression plugged in through `tgjax.train.task`.

The toy is small enough to follow by hand: w ∈ R^2 fitted to y = x·(1, −2) by
SGD on batches of 4 of 16 fixed rows (order shuffled per epoch); validation
scores −mse (higher is better), or a score scripted per step. It checks what
the trainer owns for every task: the best by a "max" criterion (records,
result, the keep-best checkpoint), plateau decay (of the rate the
optimiser state holds) and early stopping, the learning rate and plateau
counters carried through a checkpoint, and a resume equal to an
uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tgjax.train.config import apply_overrides, default_config
from tgjax.train.loop import train
from tgjax.train.schedules import Plateau, StepSchedule, plateau_optimizer
from tgjax.train.step import gradient_update, learning_rate_of
from tgjax.train.task import Evaluation, Selection

X = np.random.default_rng(0).normal(size=(16, 2)).astype(np.float32)
Y = X @ np.array([1.0, -2.0], np.float32)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class ToyState:
    w: jax.Array  # [2]
    opt_state: object  # plain SGD's, its learning rate held there (`plateau_optimizer`)
    step: jax.Array  # int32 scalar


class CountingPlateau(Plateau):
    """`Plateau`, counting the decays it asks for."""

    decays = 0

    def update(self, value):
        improved, decay, stop = super().update(value)
        self.decays += decay
        return improved, decay, stop


class _Rows:
    """Batches of 4 rows, each epoch in its own order; position {"epoch", "step"} as the pipelines'."""

    def __init__(self, position):
        self.epoch, self.step = (position["epoch"], position["step"]) if position else (0, 0)

    def __iter__(self):
        return self

    def __next__(self):
        if self.step == 4:
            self.epoch, self.step = self.epoch + 1, 0
        order = np.random.default_rng(self.epoch).permutation(16)[4 * self.step:4 * self.step + 4]
        self.step += 1
        return {"x": X[order], "y": Y[order]}

    def get_state(self):
        return {"epoch": self.epoch, "step": self.step}


class _Window:
    def __init__(self):
        self.losses, self.start = [], time.perf_counter()

    def add(self, metrics):
        self.losses.append(float(metrics["loss"]))

    def record(self, step, metrics):
        return {"split": "train", "step": step, "loss": float(np.mean(self.losses)),
                "learning_rate": float(metrics["learning_rate"]), "steps_per_second": 1.0, "tokens_per_second": 1.0}


class ToyTask:
    name = "toy"
    selection = Selection("score", "max")

    def __init__(self, *, num_steps=24, validation_interval=4, lr=0.05, scores=None, patience=(1, 2)):
        self.num_steps, self.validation_interval = num_steps, validation_interval
        self.checkpoint_interval, self.logging_interval, self.tensorboard = 4, 1, False
        self.tx = plateau_optimizer(optax.identity(), lr)  # SGD: the gradient is the direction
        self.scores = scores  # {step: validation score}, or None: −mse
        self.schedule = CountingPlateau(*patience, mode="max") if patience else StepSchedule()

    def validate_config(self, config):
        pass

    def check_mesh(self, mesh):
        pass

    def setup(self, run):
        self.run = run

    def describe_run(self):
        return ["toy regression"]

    def init_state(self):
        w = jnp.zeros(2, jnp.float32)
        return ToyState(w, self.tx.init(w), jnp.zeros((), jnp.int32)), None

    def abstract_state(self):
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                            self.init_state()[0])

    def restored_rest(self):
        return None

    def checkpoint_meta(self):
        return {"plateau": self.schedule.state_dict()}

    def check_checkpoint(self, meta, step, directory):
        pass

    def resume_from(self, meta):
        self.schedule.load_state_dict(meta["plateau"])

    def batches(self, position):
        return _Rows(position)

    def make_train_step(self):
        @jax.jit
        def step(state, x, y):
            w, opt_state, loss, _, _ = gradient_update(lambda w: (jnp.mean((x @ w - y) ** 2), None), state.w,
                                                       state.opt_state, self.tx)
            return ToyState(w, opt_state, state.step + 1), loss

        def train_step(state, rest, batch):
            new_state, loss = step(state, batch["x"], batch["y"])
            return new_state, {"loss": loss, "learning_rate": learning_rate_of(state.opt_state)}

        return train_step

    def new_window(self):
        return _Window()

    def has_validation(self):
        return True

    def evaluate(self, state, rest):
        w = np.asarray(state.w)
        score = self.scores[int(state.step)] if self.scores is not None else -float(np.mean((X @ w - Y) ** 2))
        return Evaluation({"score": score}, {"score": score}, f"score {score:.4f}")

    def result_fields(self):
        return {}

    def summary(self, result):
        return None


def _config(*overrides):
    return apply_overrides(default_config(), ["checkpointing.max_to_keep=1", "checkpointing.async_save=false",
                                              *overrides])


def _records(workdir, split):
    return [r for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines()) if r["split"] == split]


def test_best_by_max_plateau_decay_and_early_stopping(tmp_path):
    # Scores after steps 4, 8, 12, 16: better, better, worse (decay: lr_patience 1), worse (stop: patience 2).
    task = ToyTask(scores={4: 0.5, 8: 0.7, 12: 0.6, 16: 0.65, 20: 0.9, 24: 0.9})
    result = train(_config(), tmp_path, task=task, quiet=True)
    valid = _records(tmp_path, "valid")
    assert [(r["step"], r["score"], r["best"]) for r in valid] == [
        (4, 0.5, True), (8, 0.7, True), (12, 0.6, False), (16, 0.65, False)]
    assert result.stopped_early and result.final_step == 16
    assert (result.best_step, result.best_valid_loss) == (8, 0.7)
    assert task.schedule.decays == 1
    rates = {r["step"]: r["learning_rate"] for r in _records(tmp_path, "train")}
    assert rates[12] == np.float32(0.05) and rates[13] == rates[16] == np.float32(0.05) * np.float32(0.5)
    assert result.final_learning_rate == rates[16]
    # max_to_keep=1 keeps the latest (16); keep-best by the highest score keeps 8, not 4 or 12.
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [8, 16]


def test_resume_continues_as_an_uninterrupted_run(tmp_path):
    # Worse scores at steps 8 and 16 decay the rate (once before the stop at 13, once after).
    scores = {4: 0.5, 8: 0.4, 12: 0.6, 16: 0.55, 20: 0.7, 24: 0.8}
    whole = ToyTask(lr=0.2, scores=scores, patience=(1, 100))
    states = {}
    whole_result = train(_config(), tmp_path / "whole", task=whole, quiet=True,
                         callback=lambda step, state, m: states.__setitem__(step, np.asarray(state.w)))
    first = ToyTask(lr=0.2, scores=scores, patience=(1, 100))
    train(_config(), tmp_path / "split", task=first, quiet=True, stop_after_step=13)
    second = ToyTask(lr=0.2, scores=scores, patience=(1, 100))
    resumed = {}
    result = train(_config(), tmp_path / "split", task=second, quiet=True,
                   callback=lambda step, state, m: resumed.__setitem__(step, np.asarray(state.w)))
    assert result.start_step == 13 and min(resumed) == 14
    assert (whole.schedule.decays, first.schedule.decays, second.schedule.decays) == (2, 1, 1)
    # the first decay came through the checkpoint's optimiser state
    assert result.final_learning_rate == whole_result.final_learning_rate == (
        np.float32(0.2) * np.float32(0.5) * np.float32(0.5))
    for step in range(14, 25):
        np.testing.assert_array_equal(resumed[step], states[step])
    assert np.abs(states[24] - [1.0, -2.0]).max() < np.abs(states[1] - [1.0, -2.0]).max() / 2  # it learns


@pytest.mark.parametrize("mode, values, best", [("min", [3.0, 1.0, 2.0], 1.0), ("max", [3.0, 1.0, 4.0], 4.0)])
def test_selection_and_plateau_modes(mode, values, best):
    selection, plateau, kept = Selection("v", mode), Plateau(5, 5, mode=mode), None
    for v in values:
        if selection.improves(v, kept):
            kept = v
        plateau.update(v)
    assert kept == best and plateau.best == best
    with pytest.raises(ValueError, match="'min' or 'max'"):
        Selection("v", "lowest")


def test_plateau_relative_threshold_counts_only_large_enough_improvements():
    """PyTorch's rel threshold: an improvement must beat best * (1 - threshold); with an offset, (best + offset)."""
    plain, strict = Plateau(1, 10), Plateau(1, 10, threshold=0.1)
    # 10 -> 9.5 is better, but not by 10% of 10.
    assert plain.update(10.0) == strict.update(10.0) == (True, False, False)
    assert plain.update(9.5) == (True, False, False)
    assert strict.update(9.5) == (False, True, False)  # not an improvement: decays after lr_patience=1
    assert strict.update(8.9) == (True, False, False)  # below 10 - 1.0
    assert strict.best == 8.9
    # The CFL's Δ = cross-entropy - true: the threshold is on Δ + true (here 1 + 9 = 10: margin 1).
    shifted = Plateau(1, 10, threshold=0.1, threshold_offset=9.0)
    shifted.update(1.0)
    assert shifted.update(0.05)[0] is False and shifted.update(-0.01)[0] is True
    rising = Plateau(1, 10, mode="max", threshold=0.1)
    rising.update(10.0)
    assert rising.update(10.5)[0] is False and rising.update(11.5)[0] is True
    with pytest.raises(ValueError, match="threshold"):
        Plateau(1, 1, threshold=-0.1)


class _StopReasonPlateau(Plateau):
    """A plateau that names why it stopped, as the CFL trials' time budget does."""

    stop_reason = "time budget: training.max_train_seconds=1"


def test_first_step_compile_is_not_counted_in_steps_per_second_and_stop_reason_is_the_schedules(
        tmp_path, monkeypatch):
    # A fake clock: every step takes 1 s, and the first call also "compiles" for 1000 s. The first logged
    # interval (4 steps) must not spread the compile over its steps (4 / 1004 steps/s, an ETA of hours);
    # the first step's own second is counted as compile, so the rate is 4 steps / 3 s.
    import io
    import types

    import tgjax.train.loop as loop_module

    clock = types.SimpleNamespace(now=0.0)
    fake_time = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    fake_time.perf_counter = lambda: clock.now
    monkeypatch.setattr(loop_module, "time", fake_time)

    class ClockWindow(_Window):
        def __init__(self):
            self.losses, self.steps, self.start = [], 0, clock.now

        def add(self, metrics):
            super().add(metrics)
            self.steps += 1

        def record(self, step, metrics):
            return {**super().record(step, metrics), "steps_per_second": self.steps / (clock.now - self.start)}

    task = ToyTask(num_steps=8, validation_interval=8, scores={8: 1.0}, patience=None)
    task.logging_interval, task.new_window = 4, ClockWindow
    task.schedule = _StopReasonPlateau(1, 1, mode="max")
    plain_step = task.make_train_step()
    calls = []

    def timed_step(state, rest, batch):
        clock.now += 1000.0 * (not calls) + 1.0
        calls.append(1)
        return plain_step(state, rest, batch)

    task.make_train_step = lambda: timed_step
    stream = io.StringIO()
    train(_config(), tmp_path, task=task, stream=stream)
    rates = {r["step"]: r["steps_per_second"] for r in _records(tmp_path, "train")}
    assert rates == {4: pytest.approx(4 / 3), 8: pytest.approx(1.0)}
    assert "first step (compiling included) took 1001.0 s" in stream.getvalue()

    # A schedule's own stop_reason replaces "no improvement" in the stop message.
    task = ToyTask(num_steps=24, scores={4: 0.5, 8: 0.4, 12: 0.3}, patience=None)
    task.schedule = _StopReasonPlateau(1, 2, mode="max")
    stream = io.StringIO()
    train(_config(), tmp_path / "stopped", task=task, stream=stream)
    assert "stopped after step 12 (time budget: training.max_train_seconds=1)" in stream.getvalue()


@pytest.mark.parametrize("stop_after_step", [8, 9])
def test_a_stop_at_or_after_the_last_step_is_a_finished_run(tmp_path, stop_after_step):
    # The reproduction runner keeps a run unfinished unless stop_reason is None or "schedule": a chunk that
    # ends exactly at num_steps must read as finished, not as stopped early.
    task = ToyTask(num_steps=8, validation_interval=4, patience=(1, 100))
    result = train(_config(), tmp_path, task=task, quiet=True, stop_after_step=stop_after_step)
    assert result.final_step == 8
    assert (result.stopped_early, result.stop_reason) == (False, None)
    stopped = train(_config(), tmp_path / "early", task=ToyTask(num_steps=8, validation_interval=4, patience=(1, 100)),
                    quiet=True, stop_after_step=7)
    assert (stopped.final_step, stopped.stopped_early, stopped.stop_reason) == (7, True, "stop_after_step")
