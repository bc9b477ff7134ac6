"""A bad config value is refused before training starts: one line naming the key and what it expects, status 2.

The whole config is checked before the trainer opens a checkpoint manager
(whose threads printed a traceback after the error when the process exited),
reads data or touches a device.
"""

import subprocess
import sys

import pytest

from tgjax.train.config import ConfigError, apply_overrides, default_config
from tgjax.train.tasks.treebank_lm import validate_config

from .helpers import TEST_OVERRIDES

# override -> what the error line must say (the key and what was expected).
BAD_VALUES = {
    "model.sequence_length=0": "model.sequence_length must be an integer > 0, got 0",
    "model.memory_length=-1": "model.memory_length must be an integer > 0, got -1",
    "model.d_model=-32": "model.d_model must be an integer > 0, got -32",
    "model.num_heads=0": "model.num_heads must be an integer > 0, got 0",
    "model.d_model=30": "model.d_model=30 is not divisible by model.num_heads=4",
    "model.name=tgx": "model.name: unknown 'tgx'; expected one of ('tg',",
    "model.max_relative_position=-5": "model.min_relative_position=-1 is above model.max_relative_position=-5",
    "model.sequence_length=40000": "model.sequence_length + model.memory_length = 40016: expected at most 32767",
    "model.num_unrestricted_layers=1": "model.num_unrestricted_layers=1 is not a switch of model 'tg'; "
                                       "the registered model with it is 'tg_layer_hybrid'",
    "model.core_dropout=1.0": "model.core_dropout must be a dropout rate in [0, 1), got 1.0",
    "model.vocab_size=0": "model.vocab_size must be None or an integer > 0, got 0",
    "training.batch_size=-8": "training.batch_size must be an integer > 0, got -8",
    "training.clip_grad_norm=-1": "training.clip_grad_norm must be None, 0 (no clipping) or a positive number",
    "training.lr_schedule.name=cosine": "training.lr_schedule.name: unknown 'cosine'",
    "training.optimizer.name=sgd": "training.optimizer.name: unknown 'sgd'",
    "evaluation.interval_steps=-1": "evaluation.interval_steps must be an integer >= 0, got -1",
    "checkpointing.max_to_keep=0": "checkpointing.max_to_keep must be an integer > 0, got 0",
    "data.max_actions=0": "data.max_actions must be None or an integer > 0, got 0",
    "data.on_too_long=truncate": "data.on_too_long: expected 'error' or 'skip', got 'truncate'",
    "data.num_workers=-1": "data.num_workers must be an integer >= 0, got -1",
    "data.train_path=": "data.train_path must be a treebank file or 'builtin', got ''",
    "mesh.model=0": "mesh.model must be an integer > 0, or -1 (the rest), got 0",
    "mesh.model=-1": "mesh.data and mesh.model are both -1",
}


@pytest.mark.parametrize("override", BAD_VALUES)
def test_validate_config_names_the_key(override):
    config = apply_overrides(default_config(), [*TEST_OVERRIDES, override])
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert BAD_VALUES[override] in str(error.value)
    assert "\n" not in str(error.value)


def test_the_test_config_itself_is_valid():
    validate_config(apply_overrides(default_config(), TEST_OVERRIDES))
    validate_config(apply_overrides(default_config(), [*TEST_OVERRIDES, "model.name=tg_layer_hybrid",
                                                       "model.num_unrestricted_layers=2", "mesh.data=-1"]))


def run_train(workdir, *overrides):
    return subprocess.run([sys.executable, "-m", "tgjax.cli", "train", "--workdir", str(workdir),
                           *(f"--config.{o}" for o in [*TEST_OVERRIDES, *overrides])],
                          capture_output=True, text=True, timeout=300)


REFUSED = ["model.sequence_length=0", "model.memory_length=-1", "model.name=tgx", "model.d_model=30"]


# A fresh process each (its exit is where the checkpoint manager's threads printed): the first in CI, every one with
# -m slow; test_tgjax_train_refuses_in_this_process runs the command for each in CI.
@pytest.mark.parametrize("override", [REFUSED[0], *(pytest.param(o, marks=pytest.mark.slow) for o in REFUSED[1:])])
def test_tgjax_train_refuses_before_starting(tmp_path, override):
    """Through the command: one error line, status 2, no traceback, and nothing written to the workdir."""
    workdir = tmp_path / "run"
    result = run_train(workdir, override)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tgjax: error: "), result.stderr
    assert BAD_VALUES[override] in lines[0]
    assert not workdir.exists()  # no checkpoint manager was opened


@pytest.mark.parametrize("override", REFUSED)
def test_tgjax_train_refuses_in_this_process(tmp_path, capsys, override):
    """`tgjax train` (`tgjax.cli.main`, in this process): status 2, one error line, nothing written to the workdir."""
    from tgjax import cli

    workdir = tmp_path / "run"
    code = cli.main(["train", "--workdir", str(workdir), *(f"--config.{o}" for o in [*TEST_OVERRIDES, override])])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tgjax: error: "), err
    assert BAD_VALUES[override] in lines[0]
    assert not workdir.exists()  # no checkpoint manager was opened
