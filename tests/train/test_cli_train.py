"""`tgjax train` and `tgjax info` from the command line."""

import json
import time

import pytest

from tgjax import cli

from .helpers import TEST_OVERRIDES, read_metrics

SMALL = [f"--config.{o}" for o in TEST_OVERRIDES] + ["--config.model.num_layers=1"]  # one layer: compiles faster


def test_info_counts_the_paper_bllip_model(capsys):
    assert cli.main(["info", "--config", "configs/tg_bllip.py"]) == 0
    out = capsys.readouterr().out
    assert "tg: 251,887,616 parameters" in out
    assert "vocabulary   32,768 ids (model.vocab_size)" in out
    assert "d_model: 1024" in out and "num_steps: 100000" in out  # the resolved config


def test_info_json_with_overrides(capsys):
    assert cli.main(["info", "--config", "tiny", "--json", "--config.model.num_layers=1"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["model"]["num_layers"] == 1 and info["config"]["model"]["num_layers"] == 1
    assert info["vocab_source"] == "built from builtin" and info["num_parameters"] > 0


def test_train_then_rerun_resumes(tmp_path, capsys):
    workdir = tmp_path / "run"
    assert cli.main(["train", "--workdir", str(workdir), *SMALL, "--config.training.num_steps=3"]) == 0
    err = capsys.readouterr().err
    assert "step 3/3" in err and "steps/s" in err and "tokens/s" in err and "lr " in err and "ETA" in err
    assert cli.main(["train", "--workdir", str(workdir), *SMALL, "--config.training.num_steps=5"]) == 0
    err = capsys.readouterr().err
    assert "resuming from step 3" in err and "step 5/5" in err
    assert [r["step"] for r in read_metrics(workdir) if r["split"] == "train"] == [1, 2, 3, 4, 5]


def test_bad_config_key_and_bad_data_exit_2_with_the_name(tmp_path, capsys):
    assert cli.main(["train", "--workdir", str(tmp_path), "--config.training.num_step=3"]) == 2
    err = capsys.readouterr().err
    assert "config key 'training.num_step' does not exist (did you mean 'training.num_steps'?)" in err
    assert cli.main(["train", "--workdir", str(tmp_path), "--config", "tg_ptb"]) == 2
    assert "data.train_path is not set" in capsys.readouterr().err
    assert cli.main(["train", "--workdir", str(tmp_path), "--config", "tg_ptb:missing.txt,valid.txt"]) == 2
    assert "data.train_path: no such treebank file 'missing.txt'" in capsys.readouterr().err
    assert cli.main(["data", "stats", "--config.training.num_steps=3"]) == 2
    assert "overrides are for train and info" in capsys.readouterr().err


@pytest.mark.parametrize("override, expected", [
    ("logging.interval_steps=0", "logging.interval_steps: expected a whole number of steps >= 1, got 0"),
    ("checkpointing.interval_steps=0", "checkpointing.interval_steps: expected a whole number of steps >= 1"),
    ("evaluation.interval_steps=-1", "evaluation.interval_steps: expected a whole number of steps >= 0, got -1"),
    ("training.num_steps=0", "training.num_steps: expected a whole number of steps >= 1, got 0"),
])
def test_an_interval_that_would_divide_by_zero_is_refused_before_the_run(tmp_path, capsys, override, expected):
    assert cli.main(["train", "--workdir", str(tmp_path / "run"), *SMALL, f"--config.{override}"]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_nan_exits_1_naming_the_step(tmp_path, capsys):
    code = cli.main(["train", "--workdir", str(tmp_path), *SMALL, "--quiet",
                     "--config.training.lr_schedule.name=constant", "--config.training.clip_grad_norm=0",
                     "--config.training.lr_schedule.kwargs={'lr': 1e35}"])
    assert code == 1
    assert "training loss is nan at step 2; stopped" in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_config_trains_below_the_unigram_baseline_in_minutes(tmp_path, capsys):
    started = time.perf_counter()
    assert cli.main(["train", "--config", "tiny", "--workdir", str(tmp_path)]) == 0
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    assert "validation loss (nats per prediction event): model" in err
    final = [r for r in read_metrics(tmp_path) if r["split"] == "valid"][-1]
    print(f"tiny: {seconds:.0f}s, validation loss {final['loss']:.4f} vs unigram {final['unigram_loss']:.4f}")
    assert final["loss"] < final["unigram_loss"] - 1.0
    assert seconds < 600
