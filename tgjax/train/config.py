"""Training configs: `ml_collections` files in `configs/`, overridable from the command line.

A config file defines `get_config()` (or `get_config(arg)`, called with the
text after a colon: `configs/tg_ptb.py:TRAIN,VALID`) and returns a
`ConfigDict`. Section and key names follow the authors' Transformer Grammars
release where it has them (`training.num_steps`, `training.lr_schedule.kwargs.max_lr`,
`model.d_model`, `evaluation.interval_steps`, ...), so their configs carry
over.

Every family (a config's `trainer`, `registered_families()`) has a
`default_config()` on its task class holding every key it reads, with its default ("lm": this module's
`default_config()`); the sections every family shares come from
`shared_sections()`. `load_config` merges a config file over its family's
defaults, so a file states only what differs; the result is locked. Overrides
are `a.b.c=value` strings (from `--config.a.b.c=value`). In a file or an
override, a key the defaults lack is a `ConfigError` naming it (with the
closest key, and its section's keys), and so is a value of another type than
the default's (an override's text is parsed to that type).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import ml_collections
from ml_collections.config_dict import placeholder

# Where `--config NAME` (no ".py", no path) is looked up: the configs/ directory ships in the wheel as the
# package `tgjax_configs` (setup.py maps it); a source checkout without that mapping uses its configs/ directly.
SHIPPED_CONFIGS_PACKAGE = "tgjax_configs"
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"

# Placeholder for data paths a config cannot know (licensed treebanks).
UNSET_PATH = "<<< set data.train_path / data.valid_path >>>"

# Logical parameter axes -> mesh axes (MaxText style); first matching rule wins.
DEFAULT_LOGICAL_AXIS_RULES = (
    ("vocab", "model"),
    ("mlp", "model"),
    ("heads", "model"),
    ("hidden", "model"),  # a recurrent cell's hidden width (the Craft policies)
    ("embed", None),
    ("kv", None),
)


class ConfigError(ValueError):
    """A config file, key or value that cannot be used; the message names it."""


def shared_sections() -> dict[str, dict]:
    """The sections the trainer (tgjax.train.loop) reads for every family, at their common defaults."""
    return dict(
        checkpointing=dict(
            interval_steps=200,
            max_to_keep=3,  # most recent checkpoints kept
            keep_best=1,  # and the best by the task's validation number
            async_save=True,
            # Every checkpoint gets a manifest of its files' sizes (checked on resume and on load: a truncated or
            # missing file is caught). checksums=True (every family's default) adds sha256 sums, verified on
            # resume and when inference loads the step, so a flipped byte is caught too; they are computed on a
            # background thread, but read every byte (3 GB for tg_bllip with Adam).
            checksums=True,
            # Save the per-row memory of a state that has one (TG / TXL, ON-LSTM): resuming mid-sequence is
            # then bit-identical. A state without memory ignores it.
            save_memory=False,
            # Several hosts without JAX's preemption service agree on a SIGTERM with a collective, which waits
            # for the device: done every this many steps (the stop comes up to this many steps - 1 late).
            preemption_check_steps=10,
        ),
        logging=dict(
            interval_steps=50,
            tensorboard=True,
            # True: fetch each step's metrics as it ends (the host waits for every step). False: they stay on
            # the device until the logging step, or a validation or save, fetches them in one batch (NaN is
            # caught there, naming its step).
            fetch_every_step=False,
        ),
        mesh=dict(
            data=-1,  # -1: whatever the other axis leaves
            model=1,
            logical_axis_rules=DEFAULT_LOGICAL_AXIS_RULES,  # how parameters are laid out on the mesh
            # Fully sharded data parallel: every parameter's "embed" dimension (and its optimiser state's) is
            # split over "data" too (tgjax.train.sharding.FSDP_RULES), each device holding about 1/data of them.
            fsdp=False,
        ),
        distributed=dict(
            # Call jax.distributed.initialize() first (multi-host TPU / GPU); the addresses are
            # detected on Cloud TPU and SLURM when left None.
            initialize=False,
            coordinator_address=placeholder(str),  # placeholder(T): None, or a T (what an override is parsed as)
            num_processes=placeholder(int),
            process_id=placeholder(int),
        ),
    )


def family_config(sections: dict, **shared_changes: dict) -> ml_collections.ConfigDict:
    """A family's defaults: its own `sections` and the shared ones, each updated by `shared_changes[name]`.

    `family_config(dict(model=..., training=...), logging=dict(interval_steps=10))` is a family whose
    logging interval differs from the shared default.
    """
    shared = shared_sections()
    for name, changes in shared_changes.items():
        if name not in shared:
            raise KeyError(f"{name!r} is not a shared section ({', '.join(shared)})")
        shared[name].update(changes)
    return ml_collections.ConfigDict({**sections, **shared})


def default_config() -> ml_collections.ConfigDict:
    """Every key the "lm" trainer reads, with its default (a small TG on the built-in treebank)."""
    sections = dict(
        model=dict(
            # One of tgjax.models.MODEL_NAMES: tg, txl_cc, txl_terminals, tg_* variants.
            name="tg",
            # None: the size of the vocabulary built from (or loaded for) the data. An int is used
            # by `tgjax info` when no data is at hand, and as the SentencePiece target size.
            vocab_size=placeholder(int),
            d_model=64,
            num_layers=2,
            num_heads=4,
            ffw_hidden_size=256,
            sequence_length=64,
            memory_length=64,
            min_relative_position=-1,
            max_relative_position=62,
            # Only the hybrids take these (tg_layer_hybrid, tg_head_hybrid; 0 or None there means 1): a
            # switch of another model is refused, naming the registered model that has it.
            num_unrestricted_layers=0,
            num_unrestricted_heads=placeholder(int),  # the authors' default; None means 0
            embedding_dropout=0.1,
            core_dropout=0.1,
            core_output_dropout=0.1,  # the authors' name for the final-layer dropout
            # Accelerator knobs (the TG / TXL family; README "Accelerator knobs"): compute dtype
            # (float32, bfloat16, float16) over parameters kept in param_dtype; remat names what each layer
            # keeps for the backward pass (tgjax.nn.remat: none, full, dots_saveable,
            # dots_with_no_batch_dims_saveable, everything_saveable; true / false mean full / none);
            # scan_layers stacks the layers under nnx.scan.
            dtype="float32",
            param_dtype="float32",
            remat="none",
            scan_layers=False,
        ),
        data=dict(
            # "builtin" (the synthetic treebank's train / valid split) or a treebank file;
            # valid_path="" trains without validation.
            train_path="builtin",
            valid_path="builtin",
            num_train_sentences=placeholder(int),  # built-in corpus sizes (None: 5000 / 500)
            num_valid_sentences=placeholder(int),
            corpus_seed=0,  # which built-in treebank
            vocabulary="words",  # "words" or "sentencepiece" (trained on the training trees)
            min_word_count=1,  # "words": rarer training words become UNK (so that UNK is trained)
            vocab_path=placeholder(str),  # an existing vocabulary file instead (word-dictionary JSON or SP model)
            max_actions=placeholder(int),
            # Longest sentence of a treebank file, checked while reading (a huge tree is refused before it is
            # built); 25,000 words keep the pipeline within about 1.5 GB. Over it: on_too_long.
            max_words=25000,
            on_too_long="error",  # "error" or "skip" (counted, reported)
            on_bad_tree="error",  # "error" or "skip" (counted, reported)
            # Stack entries that do not fit in model.memory_length: "warn" (count, report) or "error".
            on_dropped_stack_entries="warn",
            num_workers=0,  # grain worker processes for the training batches
        ),
        training=dict(
            num_steps=1000,
            batch_size=16,  # global (all hosts, all devices), rows of the TXL-style stream
            clip_grad_norm=3.0,
            seed=1,
            optimizer=dict(name="adam", kwargs=dict(b1=0.9, b2=0.999, eps=1e-8)),
            lr_schedule=dict(
                name="linear_warmup_then_cosine_anneal",
                kwargs=dict(start_lr=1e-7, max_lr=1e-3, min_lr=3e-7, warmup_steps=100, cosine_cycle_length=900),
            ),
        ),
        evaluation=dict(
            interval_steps=200,
            batch_size=16,  # global rows for the validation pass
        ),
    )
    return family_config(
        sections,
        # sha256 sums (the shared default) read every byte of a checkpoint, 3 GB for tg_bllip with Adam, on the
        # manifest thread: training does not wait, and loading verifies them. The memory [K, B, M, d] is saved so
        # that resuming mid-sequence is bit-identical.
        checkpointing=dict(interval_steps=200, save_memory=True),
        logging=dict(interval_steps=10),
    )


def set_data_paths(config: ml_collections.ConfigDict, arg: str | None) -> ml_collections.ConfigDict:
    """For configs of licensed treebanks: `FILE.py:TRAIN,VALID` sets `data.train_path` and `data.valid_path`.

    Without an argument the paths stay unset; training then asks for them
    (`--config.data.train_path=...` works as well).
    """
    config.data.train_path = config.data.valid_path = UNSET_PATH
    if arg:
        paths = [p.strip() for p in arg.split(",")]
        if len(paths) != 2 or not all(paths):
            raise ConfigError(f"config argument {arg!r}: expected TRAIN_FILE,VALID_FILE")
        config.data.train_path, config.data.valid_path = paths
    return config


# -----------------------------------------------------------------------------
# Loading.


def shipped_config_dir() -> Path:
    """The directory of the configs that ship with tgjax (installed package, else the checkout's configs/)."""
    try:
        spec = importlib.util.find_spec(SHIPPED_CONFIGS_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    return CONFIG_DIR


def shipped_config_names() -> list[str]:
    """Names `--config NAME` accepts (`tiny`, `tg_ptb`, ...)."""
    directory = shipped_config_dir()
    return sorted(p.stem for p in directory.glob("*.py") if not p.name.startswith("_"))


def resolve_config_path(spec: str) -> tuple[Path, str | None]:
    """`"path/x.py[:arg]"` or a shipped config's name (`"tiny"`, `"tg_ptb:TRAIN,VALID"`) -> (file, arg).

    A relative `configs/NAME.py` that does not exist from the current directory
    is the shipped config NAME too, so the README's commands run from anywhere.
    """
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"config {spec!r}: expected a config file path or a name such as 'tiny'")
    path_text, arg = spec, None
    if ":" in spec and not os.path.exists(spec):
        path_text, arg = spec.split(":", 1)
    path = Path(path_text)
    if path.is_file():
        return path, arg
    shipped = shipped_config_dir()
    is_bare_name = path.suffix != ".py" and "/" not in path_text and os.sep not in path_text
    if is_bare_name:
        candidate = shipped / f"{path_text}.py"
    elif not path.is_absolute() and path.parent.name == "configs" and path.suffix == ".py":
        candidate = shipped / path.name  # `configs/tiny.py` typed outside the checkout
    else:
        candidate = None
    if candidate is not None and candidate.is_file():
        return candidate, arg
    names = shipped_config_names()
    close = difflib.get_close_matches(path.stem, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"config file {path_text!r} not found, nor a shipped config of that name{hint}; "
                      f"give a path to a .py config or one of: {', '.join(names) or '(none found)'} (in {shipped})")


def load_config(spec: str, overrides: Iterable[str] = ()) -> ml_collections.ConfigDict:
    """Runs a config file's `get_config([arg])`, then applies `a.b=v` overrides.

    Raises:
      ConfigError: no such file, no `get_config`, an unknown key or a value of the wrong type.
    """
    path, arg = resolve_config_path(spec)
    # An explicit source loader: a config file is Python whatever its name ends in (the suffix-guessing
    # spec_from_file_location gives None for a name without ".py").
    name = f"tgjax_config_{path.stem}"
    module_spec = importlib.util.spec_from_loader(name, importlib.machinery.SourceFileLoader(name, str(path)))
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # a config file is user code: report where it failed
        raise ConfigError(f"config file {path}: {type(e).__name__}: {e}") from e
    if not hasattr(module, "get_config"):
        raise ConfigError(f"config file {path} defines no get_config()")
    try:
        config = module.get_config(arg) if arg is not None else module.get_config()
    except TypeError as e:
        raise ConfigError(f"config file {path}: get_config({'' if arg is None else repr(arg)}) failed: {e}") from e
    if not isinstance(config, (ml_collections.ConfigDict, dict)):
        raise ConfigError(f"config file {path}: get_config() returned {type(config).__name__}, expected a ConfigDict")
    return apply_overrides(merge_into_defaults(config), overrides)


# `trainer` (a top-level key; absent means "lm") picks what `tgjax train` runs and which defaults a config
# file is merged over: "lm" is the TG / TXL task over `default_config()`'s keys; "cfl" is tgjax.train.cfl_trials
# (configs/stack_cfl.py); the others are the trainer (tgjax.train.loop) on their task (tgjax.train.tasks
# imports it on use, so one family's imports do not load the others').
# tgjax's own families: a config's `trainer` key -> "module:class" of its task. They are registered
# under the entry-point group `tgjax.families` (pyproject.toml) like an outside package's would be;
# this table is what a source tree that was not pip-installed falls back to.
BUILTIN_FAMILIES = {
    "lm": "tgjax.train.tasks.treebank_lm:TreebankLMTask",  # TG and the TXL baselines
    "cfl": "tgjax.train.tasks.cfl:CFLTask",  # stack attention on the CFL tasks
    "classification": "tgjax.train.tasks.classification:ClassificationTask",  # Ordered Memory: ListOps, logic
    "onlstm_lm": "tgjax.train.tasks.onlstm_lm:OnLSTMLMTask",  # ON-LSTM with the AWD recipe
    "mlm": "tgjax.train.tasks.mlm:MLMTask",  # UDGN
    "pushdown_lm": "tgjax.train.tasks.pushdown_lm:PushdownLMTask",  # Pushdown Layers
    "craft_bc": "tgjax.train.tasks.craft_bc:CraftBCTask",  # OCN / MoE / LSTM / OMPN behaviour cloning on Craft
    "ppo_options": "tgjax.train.tasks.ppo_options:PPOOptionsTask",  # PPO over frozen Craft options (OCN / MoE)
    "ppo_actions": "tgjax.train.tasks.ppo_actions:PPOActionsTask",  # PPO in action space (LSTM / OMPN baselines)
    "stack_lm": "tgjax.train.tasks.stack_lm:StackLMTask",  # stack attention on sentences of words (§7)
}
TRAINERS = tuple(BUILTIN_FAMILIES)
FAMILY_ENTRY_POINTS = "tgjax.families"


@functools.cache
def registered_families() -> dict[str, str]:
    """Every family a config's `trainer` may name -> "module:class" of its task: tgjax's own and those that
    installed packages register under the entry-point group `tgjax.families` (read once per process).

    A package adds a family with, in its pyproject.toml:

        [project.entry-points."tgjax.families"]
        my_family = "my_package.family:MyFamilyTask"
    """
    families = dict(BUILTIN_FAMILIES)
    for entry in importlib.metadata.entry_points(group=FAMILY_ENTRY_POINTS):
        if families.get(entry.name, entry.value) != entry.value:
            raise ConfigError(f"entry point {FAMILY_ENTRY_POINTS}:{entry.name} = {entry.value!r} (from "
                              f"{entry.dist.name if entry.dist else 'an installed package'}) takes the name of "
                              f"the family {families[entry.name]!r}; register it under another name")
        families[entry.name] = entry.value
    return families


def trainer_of(config: ml_collections.ConfigDict | dict) -> str:
    """The config's `trainer` ("lm" when it has none); raises `ConfigError` for an unknown one."""
    trainer = config.get("trainer", "lm") if hasattr(config, "get") else "lm"
    families = registered_families()
    if trainer not in families:
        close = difflib.get_close_matches(str(trainer), list(families), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"config key 'trainer': unknown {trainer!r}{hint}; expected one of {', '.join(families)} "
                          f"(a package adds one under the entry-point group {FAMILY_ENTRY_POINTS!r})")
    return trainer


# Sections whose keys depend on a `name` beside them: taken whole from a config file, and
# checked by whatever reads them (the optimiser, the schedule).
FREE_FORM_SECTIONS = {("training", "optimizer", "kwargs"), ("training", "lr_schedule", "kwargs")}


def family_defaults(trainer: str) -> ml_collections.ConfigDict:
    """The `default_config()` of the family `trainer` names: every key it reads, with its default."""
    from tgjax.train.tasks import task_class  # imported here: tgjax.train.tasks imports this module

    return task_class(trainer).default_config()


def merge_into_defaults(config: ml_collections.ConfigDict | dict,
                        defaults: ml_collections.ConfigDict | None = None) -> ml_collections.ConfigDict:
    """`defaults` (its family's `default_config()` when None) with the values of `config` set on it, locked.

    A key the defaults lack, or a value of another type than the default's, is a
    `ConfigError`. A config file may therefore set only what differs from its
    family's defaults, and a misspelt key is reported instead of silently ignored.
    """
    if not isinstance(config, ml_collections.ConfigDict):
        config = ml_collections.ConfigDict(config)
    merged = family_defaults(trainer_of(config)) if defaults is None else defaults
    for path in _leaf_paths(config):
        if path == ("trainer",) and "trainer" not in merged:
            continue  # "lm" named explicitly: its defaults leave the key out (absent means "lm")
        value = config
        for key in path:
            value = value[key]
        _set_default(merged, path, value)
    merged.lock()  # a key added later (a typo in code) fails too
    return merged


# Keys that were booleans and now take names: the old values still load, as these names.
FORMER_BOOLEANS = {("model", "remat"): {True: "full", False: "none"}}


def _former_boolean(path: tuple[str, ...], value: Any) -> Any:
    """`value` of a key in `FORMER_BOOLEANS` as its name when it is a boolean (or "true" / "false" text)."""
    names = FORMER_BOOLEANS.get(tuple(path))
    if names is None:
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        value = value.strip().lower() in _TRUE
    return names[value] if isinstance(value, bool) else value


def _set_default(merged: ml_collections.ConfigDict, path: tuple[str, ...], value: Any) -> None:
    """Sets the value of `path` on the defaults, refusing what is not there or of another type."""
    dotted = ".".join(path)
    value = _former_boolean(path, value)
    section = _lookup(merged, path, what="config key")
    default = section[path[-1]]
    if isinstance(default, ml_collections.ConfigDict) and path not in FREE_FORM_SECTIONS:
        raise ConfigError(f"config key {dotted!r} is a section, got the value {value!r}")
    with section.unlocked():
        try:
            section[path[-1]] = value
        except TypeError:
            kind = declared_type(section, path[-1])
            raise ConfigError(f"config key {dotted!r}: expected {kind.__name__ if kind else 'another type'} "
                              f"(the default is {default!r}), got {value!r}") from None


def _leaf_paths(config: ml_collections.ConfigDict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths to every value (free-form sections count as one value)."""
    paths = []
    for key, value in config.items():
        if isinstance(value, ml_collections.ConfigDict) and prefix + (key,) not in FREE_FORM_SECTIONS:
            paths += _leaf_paths(value, prefix + (key,))
        else:
            paths.append(prefix + (key,))
    return paths


def _lookup(config: ml_collections.ConfigDict, path: Sequence[str], *, what: str):
    """The section holding `path[-1]`; raises naming the key and what exists beside it."""
    node = config
    for depth, key in enumerate(path):
        if not isinstance(node, ml_collections.ConfigDict):
            raise ConfigError(f"{what} {'.'.join(path)!r}: {'.'.join(path[:depth])!r} is a value, not a section")
        if key not in node:
            where = ".".join(path[:depth]) or "the top level"
            keys = sorted(node.keys())
            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean {'.'.join(path[:depth] + (close[0],))!r}?)" if close else ""
            raise ConfigError(f"{what} {'.'.join(path)!r} does not exist{hint}; {where} has: {', '.join(keys)}")
        if depth < len(path) - 1:
            node = node[key]
    return node


# -----------------------------------------------------------------------------
# Overrides.


def parse_override_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Splits `--config.a.b=v` / `--config.a.b v` out of argv: (overrides as "a.b=v", the rest)."""
    overrides, rest = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--config."):
            body = arg[len("--config."):]
            if "=" not in body:
                if i + 1 >= len(argv):
                    raise ConfigError(f"{arg}: no value (write {arg}=VALUE)")
                body = f"{body}={argv[i + 1]}"
                i += 1
            overrides.append(body)
        else:
            rest.append(arg)
        i += 1
    return overrides, rest


# Accelerator knobs, `model.<knob>`: a family has them once it implements them (today the "lm" trainer's
# TG / TXL models all four, "pushdown_lm" remat and scan_layers). Setting one on another family names that
# family rather than "no such key".
ACCELERATOR_KNOBS = ("dtype", "param_dtype", "remat", "scan_layers")


def _refuse_unsupported_knob(config: ml_collections.ConfigDict, path: tuple[str, ...]) -> None:
    if len(path) == 2 and path[0] == "model" and path[1] in ACCELERATOR_KNOBS and "model" in config \
            and path[1] not in config.model:
        family = trainer_of(config)
        raise ConfigError(f"config key 'model.{path[1]}': the {family!r} family ({registered_families()[family]}) "
                          f"does not support it yet; the accelerator knobs model.{', model.'.join(ACCELERATOR_KNOBS)} "
                          f"exist for the 'lm' family (TG / TXL models), model.remat and model.scan_layers also "
                          f"for 'pushdown_lm'")


def apply_overrides(config: ml_collections.ConfigDict, overrides: Iterable[str]) -> ml_collections.ConfigDict:
    """Sets each `a.b.c=value`; the value is parsed to the type of the value it replaces."""
    for override in overrides:
        if "=" not in override:
            raise ConfigError(f"override {override!r}: expected KEY=VALUE, e.g. training.num_steps=100")
        dotted, text = override.split("=", 1)
        path = tuple(dotted.split("."))
        if path in FREE_FORM_SECTIONS:  # a whole optimizer / schedule kwargs dict
            value = parse_value(text, None, key=dotted)
            if not isinstance(value, dict):
                raise ConfigError(f"config key {dotted!r}: expected a dict literal like {{'lr': 1e-3}}, got {text!r}")
            section = _lookup(config, path, what="config key")
            with section.unlocked():
                section[path[-1]] = ml_collections.ConfigDict(value)
            continue
        if path[:-1] in FREE_FORM_SECTIONS:  # its keys depend on the name beside it: new ones are allowed
            section = _lookup(config, path[:-1], what="config key")[path[-2]]
            current = section[path[-1]] if path[-1] in section else None
            with section.unlocked():
                section[path[-1]] = parse_value(text, current, key=dotted)
            continue
        _refuse_unsupported_knob(config, path)
        section = _lookup(config, path, what="config key")
        current = section[path[-1]]
        if isinstance(current, ml_collections.ConfigDict):
            raise ConfigError(f"config key {dotted!r} is a section; set one of its keys: "
                              f"{', '.join(f'{dotted}.{k}' for k in sorted(current.keys()))}")
        value = _former_boolean(path, parse_value(text, current, key=dotted, declared=declared_type(section, path[-1])))
        with section.unlocked():
            section[path[-1]] = value
    return config


_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def parse_value(text: str, current: Any, *, key: str = "value", declared: type | None = None) -> Any:
    """`text` as the type of `current` (bool, int, float, str, tuple/list).

    When `current` is None: "None", or `text` as the `declared` type (a None default's placeholder type,
    `ml_collections.config_dict.placeholder(int)`), or without one a Python literal if it is one, else the string.
    """
    def bad(expected: str) -> ConfigError:
        like = f"like the current value {current!r}" if current is not None else "or None"
        return ConfigError(f"config key {key!r}: cannot use {text!r}, expected {expected} ({like})")

    kind = type(current) if current is not None else declared
    if current is None and (kind is None or kind is type(None) or text.strip() == "None"):
        return _literal(text)
    if issubclass(kind, bool):
        lowered = text.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise bad("true or false")
    if issubclass(kind, int):
        try:
            return int(text)
        except ValueError:
            # Allow "1e5" for an int only when it is a whole number.
            try:
                number = float(text)
            except ValueError:
                raise bad("an integer") from None
            if number != int(number):
                raise bad("an integer") from None
            return int(number)
    if issubclass(kind, float):
        try:
            return float(text)
        except ValueError:
            raise bad("a number") from None
    if issubclass(kind, str):
        return text
    if issubclass(kind, (tuple, list)):
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise bad("a Python tuple/list literal") from None
        if not isinstance(value, (tuple, list)):
            raise bad("a tuple/list")
        return tuple(value) if issubclass(kind, tuple) else list(value)
    return _literal(text)


def _literal(text: str) -> Any:
    """A Python literal if `text` is one ("None" included), else the string."""
    if text.strip() == "None":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def declared_type(section: ml_collections.ConfigDict, key: str) -> type | None:
    """The type a key's values must have: its value's, or a None default's placeholder type (None: any)."""
    kind = section.get_type(key)
    return None if kind is type(None) else kind


# -----------------------------------------------------------------------------
# Value checks: presence and type come from the merge over a family's defaults; a task's
# `validate_config` checks what the type alone does not say (a range, a choice) through these.


def config_value(config: ml_collections.ConfigDict, key: str) -> Any:
    """The value of a dotted key ("training.num_steps")."""
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def check_int(config: ml_collections.ConfigDict, key: str, *, minimum: int = 1) -> int:
    """The value of `key`, refused (`ConfigError` naming the key) unless an integer >= minimum (a bool is not)."""
    value = config_value(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"config key {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def check_positive_int(config: ml_collections.ConfigDict, key: str) -> int:
    """The value of `key`, refused unless an integer >= 1."""
    return check_int(config, key, minimum=1)


def check_range(config: ml_collections.ConfigDict, key: str, low: float | None = None, high: float | None = None,
                *, low_open: bool = False, high_open: bool = False) -> float:
    """The value of `key`, refused unless a number within [low, high] (`*_open`: that bound excluded)."""
    value = config_value(config, key)
    if not _is_number(value) or not _within(value, low, high, low_open, high_open):
        raise ConfigError(f"config key {key!r} must be {_interval(low, high, low_open, high_open)}, got {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _within(value: float, low, high, low_open: bool, high_open: bool) -> bool:
    above_low = low is None or (value > low if low_open else value >= low)
    below_high = high is None or (value < high if high_open else value <= high)
    return above_low and below_high


def _interval(low, high, low_open: bool, high_open: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}"
    return f"{'<' if high_open else '<='} {high:g}"


def check_choice(config: ml_collections.ConfigDict, key: str, choices: Sequence[Any]) -> Any:
    """The value of `key`, refused unless one of `choices`."""
    value = config_value(config, key)
    if value not in choices:
        raise ConfigError(f"config key {key!r}: unknown {value!r}; expected one of {', '.join(map(repr, choices))}")
    return value


def to_json_dict(config: ml_collections.ConfigDict) -> dict:
    """A plain dict of the config (tuples as lists), for JSON files and checkpoints."""
    return config.to_dict()
