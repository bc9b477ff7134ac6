"""Training tasks, one module per family; `make_task(config)` picks the one a config names.

A config's top-level `trainer` key names its task ("lm" when absent,
`tgjax.train.config.trainer_of`). `task_class(name)` is the one way to reach a
family's task class (its `default_config()` included); the trainer
(`tgjax.train.loop`) is not edited for a new family. The CFL task
(`trainer="cfl"`) is one trial; `tgjax.train.cfl_trials.train_cfl` runs the trials.
"""

from __future__ import annotations

import importlib

from tgjax.train.config import TASKS, trainer_of


def task_class(name: str) -> type:
    """The task class registered under the trainer name `name` (imported on use)."""
    trainer_of({"trainer": name})  # a ConfigError naming the known trainers for an unknown name
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_task(config):
    """The task object for `config` (not yet set up: the trainer calls its `setup`)."""
    return task_class(trainer_of(config))(config)
