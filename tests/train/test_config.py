"""Config files, command-line overrides and their errors."""

from pathlib import Path

import pytest

from tgjax.data.pipeline import Pipeline, PipelineConfig
from tgjax.train.config import (
    UNSET_PATH,
    ConfigError,
    apply_overrides,
    default_config,
    load_config,
    parse_override_args,
    trainer_of,
)
from tgjax.train.tasks import make_task
from tgjax.train.tasks.treebank_lm import resolve_model_config, validate_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.stem for p in (REPO / "configs").glob("*.py"))


def test_the_issue_configs_exist():
    assert {"tiny", "tg_ptb", "txl_cc_ptb", "txl_terminals_ptb", "tg_bllip", "txl_cc_bllip",
            "txl_terminals_bllip"} <= set(CONFIGS)


LM_CONFIGS = [n for n in CONFIGS if trainer_of(load_config(str(REPO / "configs" / f"{n}.py"))) == "lm"]


def test_every_config_is_validated_by_its_own_task():
    """Each config names a trainer with a task, and that task accepts it (LM configs once given treebanks)."""
    for name in CONFIGS:
        config = load_config(str(REPO / "configs" / f"{name}.py"))
        if trainer_of(config) == "lm":
            config = apply_overrides(config, ["data.train_path=builtin", "data.valid_path=builtin"])
        make_task(config).validate_config(config)
    assert {"tiny", "tg_ptb"} <= set(LM_CONFIGS) and "stack_cfl" not in LM_CONFIGS


@pytest.mark.parametrize("name", LM_CONFIGS)  # the other families' configs: their tasks' own tests
def test_every_lm_config_loads_and_resolves(name):
    config = load_config(str(REPO / "configs" / f"{name}.py"))
    model = resolve_model_config(config, config.model.vocab_size or 100)
    assert model.d_model == config.model.d_model and model.final_dropout == config.model.core_output_dropout
    kwargs = config.training.lr_schedule.kwargs
    # Every config's cosine ends exactly at its last step.
    assert kwargs.warmup_steps + kwargs.cosine_cycle_length == config.training.num_steps
    # And it passes the trainer's checks once its treebanks are given.
    validate_config(apply_overrides(config, ["data.train_path=builtin", "data.valid_path=builtin"]))


def test_paper_sizes():
    for name, length in (("tg_ptb", 192), ("txl_cc_ptb", 192), ("txl_terminals_ptb", 80)):
        m = load_config(name).model
        assert (m.num_layers, m.d_model, m.ffw_hidden_size, m.num_heads) == (16, 192, 768, 8)
        assert m.sequence_length == m.memory_length == length
    for name in ("tg_bllip", "txl_cc_bllip", "txl_terminals_bllip"):
        m = load_config(name).model
        assert (m.num_layers, m.d_model, m.ffw_hidden_size, m.num_heads, m.sequence_length) == (16, 1024, 4096, 8, 256)


def test_data_paths_as_config_arguments(tmp_path):
    config = load_config("tg_ptb:/data/ptb/train.txt,/data/ptb/valid.txt")
    assert (config.data.train_path, config.data.valid_path) == ("/data/ptb/train.txt", "/data/ptb/valid.txt")
    unset = load_config("tg_ptb")
    assert unset.data.train_path == UNSET_PATH
    with pytest.raises(ConfigError, match=r"data.train_path is not set: give the treebank file with "
                                          r"--config.data.train_path=PATH"):
        validate_config(unset)
    with pytest.raises(ConfigError, match="expected TRAIN_FILE,VALID_FILE"):
        load_config("tg_ptb:only_one.txt")


def test_overrides_are_parsed_to_the_type_they_replace():
    config = apply_overrides(default_config(), [
        "training.num_steps=1_000", "training.lr_schedule.kwargs.max_lr=3e-4", "training.clip_grad_norm=1",
        "checkpointing.async_save=False", "model.vocab_size=512", "data.vocab_path=/tmp/v.json",
        "mesh.logical_axis_rules=(('vocab', None), ('mlp', 'model'))", "model.num_unrestricted_heads=None",
        "training.num_steps=2e3",
    ])
    assert config.training.num_steps == 2000 and isinstance(config.training.num_steps, int)
    assert config.training.lr_schedule.kwargs.max_lr == 3e-4
    assert config.training.clip_grad_norm == 1.0 and isinstance(config.training.clip_grad_norm, float)
    assert config.checkpointing.async_save is False
    assert config.model.vocab_size == 512
    assert config.data.vocab_path == "/tmp/v.json"
    assert config.mesh.logical_axis_rules == (("vocab", None), ("mlp", "model"))
    assert config.model.num_unrestricted_heads is None


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"config key 'training.num_stepz' does not exist \(did you mean "
                                          r"'training.num_steps'\?\); training has: batch_size, clip_grad_norm"):
        apply_overrides(default_config(), ["training.num_stepz=3"])
    with pytest.raises(ConfigError, match=r"config key 'trainng.num_steps' does not exist \(did you mean 'training'"):
        apply_overrides(default_config(), ["trainng.num_steps=3"])
    with pytest.raises(ConfigError, match=r"'training.lr_schedule' is a section; set one of its keys"):
        apply_overrides(default_config(), ["training.lr_schedule=3"])


def test_bad_values_are_refused():
    with pytest.raises(ConfigError, match=r"config key 'training.num_steps': cannot use 'many', expected an integer"):
        apply_overrides(default_config(), ["training.num_steps=many"])
    with pytest.raises(ConfigError, match=r"expected an integer"):
        apply_overrides(default_config(), ["training.num_steps=2.5"])
    with pytest.raises(ConfigError, match=r"expected true or false"):
        apply_overrides(default_config(), ["checkpointing.async_save=maybe"])
    with pytest.raises(ConfigError, match=r"expected KEY=VALUE"):
        apply_overrides(default_config(), ["training.num_steps"])


def test_a_config_file_with_an_unknown_key_is_refused(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("def get_config():\n    return {'model': {'d_model': 32, 'dmodel': 4}}\n")
    with pytest.raises(ConfigError, match=r"config key 'model.dmodel' does not exist \(did you mean 'model.d_model'"):
        load_config(str(path))
    # A partial file takes the defaults for everything else.
    path.write_text("def get_config():\n    return {'model': {'d_model': 32}, 'training': {'num_steps': 7}}\n")
    config = load_config(str(path), ["training.batch_size=4"])
    assert (config.model.d_model, config.training.num_steps, config.training.batch_size) == (32, 7, 4)
    assert config.model.num_layers == default_config().model.num_layers
    with pytest.raises(ConfigError, match="config file 'nope.py' not found"):
        load_config("nope.py")


def test_a_config_file_is_python_whatever_its_name_and_anything_else_is_one_error(tmp_path):
    named = tmp_path / "mine.cfg"  # no ".py": still a config file (was a traceback from importlib)
    named.write_text("def get_config():\n    return {'training': {'num_steps': 7}}\n")
    assert load_config(str(named)).training.num_steps == 7
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(ConfigError, match=f"config file {empty} defines no get_config"):
        load_config(str(empty))
    prose = tmp_path / "notes.txt"
    prose.write_text("a few words of prose\n")
    with pytest.raises(ConfigError, match=f"config file {prose}: SyntaxError"):
        load_config(str(prose))


def test_command_line_override_forms():
    overrides, rest = parse_override_args(["train", "--config", "tiny", "--config.training.num_steps=5",
                                           "--config.model.d_model", "32", "--workdir", "w"])
    assert overrides == ["training.num_steps=5", "model.d_model=32"]
    assert rest == ["train", "--config", "tiny", "--workdir", "w"]


def test_value_errors_are_config_errors():
    config = default_config()
    config.model.name = "tgx"
    with pytest.raises(ConfigError, match=r"model.name: unknown 'tgx'"):
        validate_config(config)
    with pytest.raises(ConfigError, match=r"num_unrestricted_layers=9 is not in \[0, num_layers=2\]"):
        resolve_model_config(apply_overrides(default_config(), ["model.name=tg_layer_hybrid",
                                                                "model.num_unrestricted_layers=9"]), 50)


def test_optimizer_and_schedule_kwargs_are_free_form():
    """Their keys depend on the schedule / optimizer name, so they may be replaced whole or extended."""
    config = apply_overrides(default_config(), ["training.lr_schedule.name=constant",
                                                "training.lr_schedule.kwargs={'lr': 0.01}"])
    assert config.training.lr_schedule.kwargs.to_dict() == {"lr": 0.01}
    config = apply_overrides(default_config(), ["training.optimizer.name=adamw",
                                                "training.optimizer.kwargs.weight_decay=0.1"])
    assert config.training.optimizer.kwargs.weight_decay == 0.1
    with pytest.raises(ConfigError, match="expected a dict literal"):
        apply_overrides(default_config(), ["training.lr_schedule.kwargs=3"])


def test_transparency_is_not_a_training_key():
    """Transparent constituents exist in the dense host form only; no model reads them, so no config offers them."""
    with pytest.raises(ConfigError, match=r"config key 'data.transparency_depth' does not exist"):
        apply_overrides(default_config(), ["data.transparency_depth=1"])
    with pytest.raises(ValueError,
                       match=r"transparency_depth=1: transparent constituents exist in the dense form only"):
        PipelineConfig(transparency_depth=1)
    dense = Pipeline(PipelineConfig(num_sentences=4, seq_len=16, mem_len=16, batch_size=2, transparency_depth=1,
                                    compact=False))
    assert "attn_mask" in dense.epoch_source(0)[0]
