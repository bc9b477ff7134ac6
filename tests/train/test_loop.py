"""The loop end to end on the built-in data: records, TensorBoard, validation, and bad input."""

import io
import math
from pathlib import Path

import numpy as np
import pytest

from tgjax.data.pipeline import EncodedCorpus
from tgjax.data.vocab import load_vocabulary
from tgjax.syntax import token_types as tt
from tgjax.train import sharding as shd
from tgjax.train.loop import TrainingDiverged, train
from tgjax.train.task import RunContext
from tgjax.train.tasks import make_task
from tgjax.train.tasks.treebank_lm import inputs
from tgjax.workdir import VocabularyMismatch

from .helpers import read_metrics, small_config

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


def config(*overrides: str):
    """The test-sized config with one layer: what these tests check does not depend on the depth."""
    return small_config("model.num_layers=1", *overrides)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """(result, printed output) of one 6-step run of the test-sized config (64 training sentences, memory 16),
    validating every 3 steps, with TensorBoard events; the tests only read its workdir."""
    stream = io.StringIO()
    workdir = tmp_path_factory.mktemp("short_run")
    result = train(config("training.num_steps=6", "evaluation.interval_steps=3", "logging.tensorboard=true"),
                   workdir, stream=stream)
    return result, stream.getvalue()


def test_a_short_run_writes_metrics_tensorboard_vocabulary_and_checkpoints(short_run):
    result, out = short_run
    workdir = result.workdir
    assert result.final_step == 6 and result.start_step == 0
    records = read_metrics(workdir)
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [1, 2, 3, 4, 5, 6]
    for record in train_records:
        assert {"step", "loss", "learning_rate", "tokens_per_second"} <= set(record)
        assert math.isfinite(record["loss"]) and record["tokens_per_second"] > 0
    # The first update uses the warm-up's start, the fourth the peak (warmup_steps=3). optax interpolates in
    # float32 as (start - peak) * (1 - t) + peak: exact up to half a float32 ulp of the peak (tgjax.train.optimizer).
    assert train_records[0]["learning_rate"] == pytest.approx(1e-7, abs=0.003 * 2.0**-24)
    assert train_records[3]["learning_rate"] == pytest.approx(0.003, rel=1e-5)
    # logging.interval_steps=1: the logged loss is the step's own.
    for record in train_records:
        assert record["loss"] == pytest.approx(result.losses[record["step"]], rel=1e-6)
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [3, 6]
    assert valid[1]["loss"] == result.valid_losses[6] and valid[1]["unigram_loss"] == result.facts["unigram_loss"]
    assert valid[1]["loss"] < valid[0]["loss"]
    assert list((workdir / "tensorboard").glob("events.out.tfevents.*"))
    assert load_vocabulary(workdir / "vocab.json").size == result.facts["vocab_size"]
    assert {p.name for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()} == {"2", "3", "4", "6"}
    assert "unigram baseline on validation" in out
    assert "validation loss (nats per prediction event): model" in out and "| unigram" in out
    # Re-running a finished run changes nothing.
    again = train(config("training.num_steps=6"), workdir, quiet=True)
    assert again.start_step == 6 and again.losses == {}


def read_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from TensorBoard event files (TFRecord framing, tensorboardX's protos)."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars: dict[str, list] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4  # length, its crc, the record, its crc
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_events_hold_train_and_valid_loss(short_run):
    result, _ = short_run
    scalars = read_scalars(result.workdir / "tensorboard")
    assert {"train/loss", "train/learning_rate", "train/tokens_per_second", "valid/loss"} <= set(scalars)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert [step for step, _ in scalars["valid/loss"]] == [3, 6]
    assert scalars["valid/loss"][1][1] == pytest.approx(result.valid_losses[6], rel=1e-6)


def test_unigram_baseline_by_hand():
    def corpus(labels):
        labels = np.array(labels + [0], np.int32)
        types = np.array([tt.TERMINAL] * (len(labels) - 1) + [tt.PAD], np.int32)
        return EncodedCorpus([(labels, types, labels, types)], np.array([0]))

    # Train labels a a b (ids 1, 1, 2), vocabulary of 3: p(a) = 3/6, p(b) = 2/6, p(c) = 1/6.
    value = inputs.unigram_cross_entropy(corpus([1, 1, 2]), corpus([1, 2]), vocab_size=3)
    assert value == pytest.approx(-(np.log(3 / 6) + np.log(2 / 6)) / 2)


def test_nan_loss_stops_naming_the_step_and_keeps_the_good_checkpoints(tmp_path):
    # The learning rate explodes after the first updates: the loss becomes NaN a few steps in.
    exploding = config("training.lr_schedule.kwargs.start_lr=0.001", "training.lr_schedule.kwargs.max_lr=1e35",
                       "training.lr_schedule.kwargs.warmup_steps=4", "training.clip_grad_norm=0.0",
                       "checkpointing.interval_steps=1")
    with pytest.raises(TrainingDiverged, match=r"training loss is (nan|inf) at step (\d+); stopped, and the last "
                                               r"good checkpoint is step (\d+)") as caught:
        train(exploding, tmp_path, quiet=True)
    message = str(caught.value)
    bad_step = int(message.split(" at step ")[1].split(";")[0])
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == list(range(1, bad_step))
    assert f"is step {bad_step - 1} in " in message
    assert max(r["step"] for r in read_metrics(tmp_path)) == bad_step - 1


def test_a_sigterm_its_caller_recorded_stops_a_run_before_or_after_its_first_step(tmp_path):
    """`tgjax reproduce` records SIGTERM between chunks in a `SigtermFlag`: a run that starts then trains nothing
    (no step compiled); one whose loop it reaches trains one step, saves it and stops; either way the caller's
    flag holds the signal."""
    import os
    import signal

    from tgjax.train.loop import SigtermFlag, Trainer

    run = config("training.num_steps=6", "checkpointing.interval_steps=6", "evaluation.interval_steps=6")
    flag = SigtermFlag()
    with flag.installed():
        os.kill(os.getpid(), signal.SIGTERM)  # recorded, not fatal
        assert flag.signalled
        trainer = Trainer(run, tmp_path / "before", quiet=True)
        try:
            result = trainer.run()
        finally:
            trainer.close()
    assert (result.stop_reason, result.final_step) == ("sigterm", 0)
    assert not (tmp_path / "before" / "metrics.jsonl").exists() or not read_metrics(tmp_path / "before")
    # The signal inside the loop (after the step function exists): one step, saved, and the flag told.
    flag = SigtermFlag()
    with flag.installed():
        trainer = Trainer(run, tmp_path / "during", quiet=True)
        try:
            result = trainer.run(callback=lambda step, state, metrics: os.kill(os.getpid(), signal.SIGTERM))
        finally:
            trainer.close()
    assert (result.stop_reason, result.final_step) == ("sigterm", 1) and flag.signalled
    assert sorted(int(p.name) for p in (tmp_path / "during" / "checkpoints").iterdir() if p.name.isdigit()) == [1]


def test_vocabulary_that_does_not_match_the_checkpoint_is_refused(tmp_path, short_run):
    forty = "data.num_train_sentences=40"
    # Checkpoints of a run on 40 training sentences (not validated: the refusals compare vocabularies only).
    train(config("training.num_steps=2", forty, "evaluation.interval_steps=0", "data.valid_path="), tmp_path,
          quiet=True)
    # Other training sentences give another word dictionary.
    with pytest.raises(VocabularyMismatch, match=r"does not match .*vocab\.json .* the vocabulary the "
                                                        r"checkpoints in .* were trained with"):
        train(config("training.num_steps=4", "data.num_train_sentences=80"), tmp_path, quiet=True)
    # So does an explicit vocabulary file: the short run's, of the test-sized config's 64 training sentences.
    other = short_run[0].workdir
    with pytest.raises(VocabularyMismatch, match=r"data.vocab_path="):
        train(config("training.num_steps=4", forty, f"data.vocab_path={other / 'vocab.json'}"), tmp_path,
              quiet=True)
    # A replaced vocabulary file in the workdir (the one the data gives) is caught by the checkpoint's fingerprint.
    (tmp_path / "vocab.json").write_bytes((other / "vocab.json").read_bytes())
    with pytest.raises(VocabularyMismatch, match=r"fingerprints differ"):
        train(config("training.num_steps=4"), tmp_path, quiet=True)


def test_missing_and_empty_data_files_are_named(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=rf"data.train_path: no such treebank file '{missing}'"):
        train(config(f"data.train_path={missing}"), tmp_path / "run", quiet=True)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=rf"data.valid_path: treebank file '{empty}' is empty"):
        train(config(f"data.valid_path={empty}"), tmp_path / "run", quiet=True)


def test_treebank_files_train(tmp_path):
    from tgjax.data import corpora

    for split, n in (("train", 40), ("valid", 10)):
        corpora.write_treebank(tmp_path / f"{split}.txt", corpora.get_corpus("builtin", split, num_sentences=n))
    result = train(config("training.num_steps=2", f"data.train_path={tmp_path / 'train.txt'}",
                          f"data.valid_path={tmp_path / 'valid.txt'}"), tmp_path / "run", quiet=True)
    assert math.isfinite(result.valid_losses[2])


def test_memory_shorter_than_the_stack_is_counted_and_reported(tmp_path, short_run):
    # The test-sized config's memory (16 rows) is shorter than a few of its training sentences' stacks.
    result, out = short_run
    memory = config().model.memory_length
    train_report = result.facts["dropped_stack"][0]
    assert train_report.split == "train" and train_report.dropped_stack_entries > 0
    assert 0 < train_report.sequences_with_dropped_entries <= train_report.sequences == 64
    assert (f"warning: memory too short: train: {train_report.dropped_stack_entries} stack entries in "
            f"{train_report.sequences_with_dropped_entries} of 64 sequences did not fit in "
            f"model.memory_length={memory}" in out)
    with pytest.raises(ValueError, match=r"memory too short: train: \d+ stack entries .* "
                                         r"\(data.on_dropped_stack_entries='error'"):
        train(config("training.num_steps=1", "model.memory_length=3", "data.on_dropped_stack_entries=error"),
              tmp_path / "error", quiet=True)
    # The count is the task's setup's (what `train` reports as `facts`): set up alone, nothing compiled.
    roomy_config = config("model.memory_length=64")
    roomy = make_task(roomy_config)
    roomy.validate_config(roomy_config)
    (tmp_path / "roomy").mkdir()
    roomy.setup(RunContext(tmp_path / "roomy", shd.make_mesh(), False, 0, 1, lambda text: None))
    assert all(r.dropped_stack_entries == 0 for r in roomy.result_fields()["dropped_stack"])
