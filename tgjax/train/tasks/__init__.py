"""Training tasks, one module per family; `make_task(config)` picks the one a config names.

A config's top-level `trainer` key names its task ("lm" when absent,
`tgjax.train.config.trainer_of`). A new family adds its module and one line
to `_TASKS`; the trainer (`tgjax.train.loop`) is not edited. The CFL task
(`trainer="cfl"`) is one trial; `tgjax.train.cfl_trials.train_cfl` runs the trials.
"""

from __future__ import annotations

import importlib

from tgjax.train.config import trainer_of

# trainer name -> "module:class" (imported on use, so one family's imports do not load the others').
_TASKS = {
    "lm": "tgjax.train.tasks.treebank_lm:TreebankLMTask",
    "cfl": "tgjax.train.tasks.cfl:CFLTask",
    "classification": "tgjax.train.tasks.classification:ClassificationTask",
    "onlstm_lm": "tgjax.train.tasks.onlstm_lm:OnLSTMLMTask",
    "mlm": "tgjax.train.tasks.mlm:MLMTask",
    "pushdown_lm": "tgjax.train.tasks.pushdown_lm:PushdownLMTask",
}


def make_task(config):
    """The task object for `config` (not yet set up: the trainer calls its `setup`)."""
    name = trainer_of(config)
    if name not in _TASKS:
        raise ValueError(f"trainer {name!r} has no task on the shared trainer (tgjax.train.tasks); "
                         f"known: {', '.join(_TASKS)}")
    module, cls = _TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)(config)
