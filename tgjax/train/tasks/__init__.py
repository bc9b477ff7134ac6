"""Training tasks, one module per family; `make_task(config)` picks the one a config names.

A config's top-level `trainer` key names its task ("lm" when absent,
`tgjax.train.config.trainer_of`). A new family adds its module and one line
to `tgjax.train.config.TASKS` (the one registry, which also checks `trainer`);
the trainer (`tgjax.train.loop`) is not edited. The CFL task (`trainer="cfl"`)
is one trial; `tgjax.train.cfl_trials.train_cfl` runs the trials.
"""

from __future__ import annotations

import importlib

from tgjax.train.config import TASKS, trainer_of


def make_task(config):
    """The task object for `config` (not yet set up: the trainer calls its `setup`)."""
    name = trainer_of(config)
    module, cls = TASKS[name].split(":")  # trainer_of has checked the name
    return getattr(importlib.import_module(module), cls)(config)
