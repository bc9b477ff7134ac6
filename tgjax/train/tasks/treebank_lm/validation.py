"""The values of a language-model training config, checked key by key before anything starts.

`check_values(config)` raises a `ConfigError` naming the first key whose value
the trainer cannot use and what it expects ("model.sequence_length must be an
integer > 0, got 0"). It reads nothing but the config: no file, device or
thread, so `tgjax train` can refuse a bad value before it opens a checkpoint
manager. What depends on several keys at once (heads dividing d_model, a
model's switches, the optimiser's kwargs) is checked by
`tgjax.train.tasks.treebank_lm.validate_config` with the code that uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tgjax.train.config import UNSET_PATH, ConfigError


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# key -> (test, what a good value is). Keys not listed are checked by what reads them.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {}


def _rule(keys: str, test: Callable[[Any], bool], expected: str) -> None:
    for key in keys.split():
        _RULES[key] = (test, expected)


_rule("model.d_model model.num_layers model.num_heads model.ffw_hidden_size model.sequence_length "
      "model.memory_length training.num_steps training.batch_size evaluation.batch_size "
      "checkpointing.interval_steps checkpointing.max_to_keep logging.interval_steps data.min_word_count",
      lambda v: _is_int(v) and v > 0, "an integer > 0")
_rule("evaluation.interval_steps checkpointing.keep_best data.num_workers model.num_unrestricted_layers",
      lambda v: _is_int(v) and v >= 0, "an integer >= 0")
_rule("model.vocab_size data.num_train_sentences data.num_valid_sentences data.max_actions data.max_words",
      lambda v: v is None or (_is_int(v) and v > 0), "None or an integer > 0")
_rule("model.num_unrestricted_heads", lambda v: v is None or (_is_int(v) and v >= 0), "None or an integer >= 0")
_rule("model.min_relative_position model.max_relative_position training.seed data.corpus_seed",
      _is_int, "an integer")
_rule("model.embedding_dropout model.core_dropout model.core_output_dropout",
      lambda v: _is_number(v) and 0 <= v < 1, "a dropout rate in [0, 1)")
_rule("training.clip_grad_norm", lambda v: v is None or (_is_number(v) and v >= 0),
      "None, 0 (no clipping) or a positive number")
_rule("checkpointing.async_save checkpointing.checksums checkpointing.save_memory logging.tensorboard "
      "distributed.initialize", lambda v: isinstance(v, bool), "true or false")
_rule("mesh.data mesh.model", lambda v: _is_int(v) and (v > 0 or v == -1), "an integer > 0, or -1 (the rest)")
_rule("data.train_path", lambda v: isinstance(v, str) and v != "", "a treebank file or 'builtin'")
_rule("data.valid_path", lambda v: isinstance(v, str), "a treebank file, 'builtin', or '' (no validation)")
_rule("data.vocab_path", lambda v: v is None or (isinstance(v, str) and v != ""), "None or a vocabulary file")

_CHOICES = {
    "data.vocabulary": ("words", "sentencepiece"),
    "data.on_too_long": ("error", "skip"),
    "data.on_bad_tree": ("error", "skip"),
    "data.on_dropped_stack_entries": ("warn", "error"),
}


def _value(config, key: str) -> Any:
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def check_values(config) -> None:
    """Raises `ConfigError` for the first key of `_RULES` / `_CHOICES` whose value is unusable, or an unset path."""
    for key, (test, expected) in _RULES.items():
        value = _value(config, key)
        if not test(value):
            raise ConfigError(f"{key} must be {expected}, got {value!r}")
    for key, choices in _CHOICES.items():
        value = _value(config, key)
        if value not in choices:
            raise ConfigError(f"{key}: expected {' or '.join(repr(c) for c in choices)}, got {value!r}")
    if config.mesh.data == -1 and config.mesh.model == -1:
        raise ConfigError("mesh.data and mesh.model are both -1: at most one of them may be")
    for key in ("train_path", "valid_path"):
        if config.data[key] == UNSET_PATH:
            raise ConfigError(f"data.{key} is not set: give the treebank file with --config.data.{key}=PATH")
