"""Training: one trainer for every model family, and the parts it is made of.

    from tgjax.train import load_config, train
    result = train(load_config("tiny", ["training.num_steps=200"]), "runs/tiny")

The trainer's core, one concern per module: `config` (ml_collections files,
overrides, each family's defaults, locked), `family` (a model family as a
small plug-in), `step` (the one train step: gradients, the optax update and
the families' named hooks), `params_state` (the state on the mesh),
`sharding` (mesh ("data", "model"), logical-axis rules), `checkpoint`
(orbax, integrity, fallback), `metrics` (metrics.jsonl, TensorBoard,
progress line), `schedules` (step-based; plateau decay and early stopping),
`optimizer` (Adam, warm-up + cosine, clipping), `task` (what a task hands the
trainer), `loop` (the trainer). The core imports no model family.

The families: `tasks` (one module or package each: `treebank_lm` for TG and
the TXL baselines, `pushdown_lm`, `onlstm_lm`, `mlm`, `classification`,
`craft_bc`, the PPO tasks, `cfl`), found through the `tgjax.families`
entry points. `cfl` holds the CFL experiments' pieces (batches, steps, plot,
`load_model`); `cfl_trials` runs the trials (each a run of the trainer with
`tasks.cfl`) and tests the best.
"""

from tgjax.train.checkpoint import CheckpointStore
from tgjax.train.config import ConfigError, apply_overrides, default_config, load_config
from tgjax.train.loop import Trainer, TrainingDiverged, TrainResult, train
from tgjax.train.optimizer import linear_warmup_then_cosine_anneal, make_optimizer, make_schedule
from tgjax.train.params_state import ParamsState
from tgjax.train.sharding import logical_to_spec, make_mesh, param_shardings
from tgjax.train.step import make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, Task

__all__ = [
    "CheckpointStore", "ConfigError", "Evaluation", "ParamsState", "RunContext", "Selection", "Task", "TrainResult",
    "Trainer", "TrainingDiverged",
    "apply_overrides", "default_config", "linear_warmup_then_cosine_anneal",
    "load_config", "logical_to_spec", "make_mesh", "make_optimizer", "make_schedule",
    "make_train_step", "param_shardings", "train",
]
