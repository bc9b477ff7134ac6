"""The trainer does not wait for each step: metrics stay on the device until a logging, validation or save step.

Oracle: the same run fetching after every step (`logging.fetch_every_step=true`, the trainer's behaviour
before); the losses must be the same floats, and only the number of fetches differs.
"""

import pytest

from tgjax.train import loop
from tgjax.train.config import ConfigError
from tgjax.train.loop import TrainingDiverged, train

from .helpers import read_metrics, small_config

# One layer, 10 steps, a train record every 5, no validation, checkpoints at 5 and 10.
BATCHED = ("model.num_layers=1", "training.num_steps=10", "logging.interval_steps=5",
           "checkpointing.interval_steps=5", "evaluation.interval_steps=0", "data.valid_path=")
EXPLODING = ("model.num_layers=1", "training.lr_schedule.kwargs.start_lr=0.001",
             "training.lr_schedule.kwargs.max_lr=1e35", "training.lr_schedule.kwargs.warmup_steps=4",
             "training.clip_grad_norm=0.0")


@pytest.fixture
def fetches(monkeypatch) -> list[list[int]]:
    """The steps of each batch the trainer fetches, in order."""
    batches = []
    real = loop._fetch_to_host

    def counted(pending):
        batches.append([step for step, _ in pending])
        return real(pending)

    monkeypatch.setattr(loop, "_fetch_to_host", counted)
    return batches


def test_metrics_are_fetched_once_per_logging_interval_and_every_loss_is_kept(tmp_path, fetches):
    batched = train(small_config(*BATCHED), tmp_path / "batched", quiet=True)
    assert fetches == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    fetches.clear()
    every = train(small_config(*BATCHED, "logging.fetch_every_step=true"), tmp_path / "every", quiet=True)
    assert fetches == [[step] for step in range(1, 11)]
    assert sorted(batched.losses) == list(range(1, 11))
    assert batched.losses == every.losses  # the same floats: only when they reach the host differs
    records = [r for r in read_metrics(tmp_path / "batched") if r["split"] == "train"]
    assert [r["step"] for r in records] == [5, 10]
    assert records[0]["loss"] == pytest.approx(sum(batched.losses[s] for s in range(1, 6)) / 5, rel=0.2)


def test_a_nan_inside_a_logging_window_is_named_and_the_next_save_fetches_first(tmp_path, fetches):
    # The loss is NaN from step 3 (the exploding warm-up). Records every 8 steps, checkpoints every 2: step 2
    # is saved; the save of step 4 fetches steps 3-4 first and stops the run, so nothing after step 2 is saved.
    config = small_config(*EXPLODING, "logging.interval_steps=8", "checkpointing.interval_steps=2",
                          "evaluation.interval_steps=0", "data.valid_path=")
    with pytest.raises(TrainingDiverged) as caught:
        train(config, tmp_path, quiet=True)
    assert str(caught.value).startswith("training loss is nan at step 3; stopped, and the last good checkpoint is "
                                        "step 2 in ")
    assert "found when the metrics were fetched at step 4" in str(caught.value)
    assert fetches == [[1, 2], [3, 4]]
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [2]
    assert not (tmp_path / "metrics.jsonl").exists() or read_metrics(tmp_path) == []


def test_a_nan_is_found_at_the_first_logging_step_after_it(tmp_path):
    config = small_config(*EXPLODING, "logging.interval_steps=4", "checkpointing.interval_steps=100",
                          "evaluation.interval_steps=0", "data.valid_path=")
    with pytest.raises(TrainingDiverged, match=r"training loss is nan at step 3; stopped, and no checkpoint was "
                                               r"saved before it .*fetched at step 4\)"):
        train(config, tmp_path, quiet=True)


def test_preemption_check_steps_must_be_a_positive_whole_number(tmp_path):
    with pytest.raises(ConfigError, match=r"checkpointing.preemption_check_steps: expected a whole number of "
                                          r"steps >= 1, got 0"):
        train(small_config("checkpointing.preemption_check_steps=0"), tmp_path, quiet=True)
