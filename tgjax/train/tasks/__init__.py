"""Training tasks, one module per family; `make_task(config)` picks the one a config names.

A config's top-level `trainer` key names its task ("lm" when absent,
`tgjax.train.config.trainer_of`), registered under the entry-point group
`tgjax.families` (`tgjax.train.config.registered_families`): an installed
package adds a family without a change to tgjax. `task_class(name)` is the one way to reach a
family's task class (its `default_config()` included); the trainer
(`tgjax.train.loop`) is not edited for a new family. A family whose training
is more than one run of the trainer says so with a `train_command(config,
workdir, quiet=) -> exit status` in its module, which `tgjax train` runs
instead (`train_command`): the CFL family's task (`trainer="cfl"`) is one
trial, and its command runs the trials and tests the best.
"""

from __future__ import annotations

import importlib

from tgjax.train.config import registered_families, trainer_of
from tgjax.train.model_info import ModelInfo


def task_class(name: str) -> type:
    """The task class registered under the trainer name `name` (imported on use); a small plug-in family
    (`tgjax.train.family`) comes back as the trainer's task made of it."""
    from tgjax.train.family import is_plugin_family, task_for

    registered = getattr(family_module(name), registered_families()[name].split(":")[1])
    return task_for(registered) if is_plugin_family(registered) else registered


def describe(config) -> ModelInfo:
    """What `tgjax info` prints of a config's model (its task class's `describe`, else its module's)."""
    name = trainer_of(config)
    cls = task_class(name)
    return cls.describe(config) if hasattr(cls, "describe") else family_module(name).describe(config)


def family_module(name: str):
    """The module of the task registered under `name`; it also defines `describe(config)` (`tgjax info`)."""
    trainer_of({"trainer": name})  # a ConfigError naming the known trainers for an unknown name
    return importlib.import_module(registered_families()[name].split(":")[0])


def train_command(name: str):
    """The family's own `tgjax train` (a module-level `train_command`), or None: one run of the trainer."""
    return getattr(family_module(name), "train_command", None)


def make_task(config):
    """The task object for `config` (not yet set up: the trainer calls its `setup`)."""
    return task_class(trainer_of(config))(config)
