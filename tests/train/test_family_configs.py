"""Every family's config goes one way: a file merged over its family's defaults, unknown or mistyped keys refused."""

import subprocess
import sys
from pathlib import Path

import pytest

from tgjax.train.config import (
    TRAINERS,
    ConfigError,
    check_choice,
    check_positive_int,
    check_range,
    default_config,
    family_defaults,
    load_config,
    shared_sections,
    trainer_of,
)
from tgjax.train.tasks import task_class

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.stem for p in (REPO / "configs").glob("*.py"))

# Loads a shipped config and adds one key to its `training` section, as a user's edited copy would.
WITH_EXTRA_KEY = """\
import importlib.util

spec = importlib.util.spec_from_file_location("original", {path!r})
original = importlib.util.module_from_spec(spec)
spec.loader.exec_module(original)


def get_config():
    config = original.get_config().to_dict()
    config.setdefault("training", {{}})["warmup_stepz"] = 100
    return config
"""


def only_trainer(tmp_path: Path, trainer: str) -> str:
    """A config file that names its family and nothing else."""
    path = tmp_path / f"only_{trainer}.py"
    path.write_text(f"def get_config():\n    return {{'trainer': {trainer!r}}}\n")
    return str(path)


def a_training_key(trainer: str) -> str:
    """A key of the family's `training` section whose default is a whole number."""
    training = family_defaults(trainer).training
    return next(k for k in sorted(training) if type(training[k]) is int)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_file_naming_only_its_family_resolves_to_the_family_defaults(tmp_path, trainer):
    config = load_config(only_trainer(tmp_path, trainer))
    assert trainer_of(config) == trainer
    assert config.to_dict() == task_class(trainer).default_config().to_dict()


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_family_has_the_shared_sections(trainer):
    defaults = family_defaults(trainer)
    for name, section in shared_sections().items():
        assert set(section) <= set(defaults[name]), (trainer, name)


def test_lm_defaults_are_the_config_modules():
    assert family_defaults("lm").to_dict() == default_config().to_dict()


@pytest.mark.parametrize("name", CONFIGS)
def test_a_config_copy_with_an_unknown_training_key_is_refused(tmp_path, name):
    path = tmp_path / f"{name}_copy.py"
    path.write_text(WITH_EXTRA_KEY.format(path=str(REPO / "configs" / f"{name}.py")))
    with pytest.raises(ConfigError, match=r"config key 'training.warmup_stepz' does not exist") as error:
        load_config(str(path))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_an_unknown_override_is_refused_with_the_closest_key(tmp_path, trainer):
    key = a_training_key(trainer)
    with pytest.raises(ConfigError, match=rf"'training.{key}x' does not exist \(did you mean 'training.{key}'\?\)"):
        load_config(only_trainer(tmp_path, trainer), [f"training.{key}x=3"])


@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_wrongly_typed_override_is_refused(tmp_path, trainer):
    key = a_training_key(trainer)
    with pytest.raises(ConfigError, match=rf"config key 'training.{key}': cannot use 'abc', expected an integer"):
        load_config(only_trainer(tmp_path, trainer), [f"training.{key}=abc"])
    # training.num_steps where the family has it, a None default of a declared type included (onlstm_lm).
    if "num_steps" in family_defaults(trainer).training:
        with pytest.raises(ConfigError, match=r"'training.num_steps': cannot use 'abc', expected an integer"):
            load_config(only_trainer(tmp_path, trainer), ["training.num_steps=abc"])


@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_wrongly_typed_value_in_a_file_is_refused(tmp_path, trainer):
    key = a_training_key(trainer)
    path = tmp_path / "typed.py"
    path.write_text(f"def get_config():\n    return {{'trainer': {trainer!r}, 'training': {{{key!r}: 'many'}}}}\n")
    with pytest.raises(ConfigError, match=rf"config key 'training.{key}': expected int .*got 'many'"):
        load_config(str(path))


def test_a_none_default_of_a_declared_type_takes_that_type_or_none(tmp_path):
    config = load_config(only_trainer(tmp_path, "onlstm_lm"), ["training.num_steps=1e3", "training.num_epochs=7"])
    assert config.training.num_steps == 1000 and isinstance(config.training.num_steps, int)
    config = load_config(only_trainer(tmp_path, "cfl"), ["training.learning_rate=5e-3", "data.seed=None",
                                                         "data.test_lengths=40,60"])
    assert (config.training.learning_rate, config.data.seed, config.data.test_lengths) == (5e-3, None, (40, 60))
    with pytest.raises(ConfigError, match=r"'architecture.d_model': cannot use 'wide', expected an integer \(or None"):
        load_config(only_trainer(tmp_path, "cfl"), ["architecture.d_model=wide"])


def test_lm_named_explicitly_is_the_default_family(tmp_path):
    config = load_config(only_trainer(tmp_path, "lm"))
    assert config.to_dict() == default_config().to_dict() and "trainer" not in config


def test_the_resolved_config_is_locked():
    config = load_config("udgn_tiny")
    with pytest.raises(AttributeError):
        config.training.warmup_steps = 100
    config.training.num_steps = 5  # an existing key may still change


def test_value_checks_name_the_key():
    config = load_config("udgn_tiny", ["training.num_steps=0", "training.mask_rate=1.0", "data.source=web"])
    with pytest.raises(ConfigError, match=r"config key 'training.num_steps' must be an integer >= 1, got 0"):
        check_positive_int(config, "training.num_steps")
    with pytest.raises(ConfigError, match=r"config key 'training.mask_rate' must be in \(0, 1\), got 1.0"):
        check_range(config, "training.mask_rate", 0, 1, low_open=True, high_open=True)
    with pytest.raises(ConfigError, match=r"config key 'data.source': unknown 'web'; expected one of 'text'"):
        check_choice(config, "data.source", ("text", "builtin"))


def test_tgjax_info_refuses_an_unknown_key_in_one_line(tmp_path):
    original = (REPO / "configs" / "udgn_tiny.py").read_text()
    edited = original.replace("training=dict(num_steps=600,", "training=dict(warmup_steps=100, num_steps=600,")
    assert edited != original
    path = tmp_path / "udgn_copy.py"
    path.write_text(edited)
    result = subprocess.run([sys.executable, "-m", "tgjax.cli", "info", "--config", str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config key 'training.warmup_steps' does not exist" in lines[0], result.stderr
