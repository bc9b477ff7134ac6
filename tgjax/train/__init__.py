"""Training: configs, optimiser and schedule, mesh and shardings, train state, checkpoints, the loop.

    from tgjax.train import load_config, train
    result = train(load_config("tiny", ["training.num_steps=200"]), "runs/tiny")

Modules, one concern each: `config` (ml_collections files and overrides),
`optimizer` (Adam, warm-up + cosine, clipping), `sharding` (mesh ("data",
"model"), logical-axis rules), `state` (TrainState, jitted steps), `checkpoint`
(orbax, integrity, fallback), `inputs` (pipelines, vocabulary checks, unigram
baseline), `metrics` (metrics.jsonl, TensorBoard, progress line), `schedules`
(step-based; plateau decay and early stopping), `task` (what a task hands the
trainer), `tasks` (one module per family: `treebank_lm`, `cfl`, ...), `loop` (the trainer).
`cfl` holds the CFL experiments' pieces (batches, steps, plot, `load_model`); `cfl_trials` runs the
trials (each a run of the trainer with `tasks.cfl`) and tests the best.
"""

from tgjax.train.checkpoint import CheckpointStore
from tgjax.train.config import ConfigError, apply_overrides, default_config, load_config
from tgjax.train.loop import Trainer, TrainingDiverged, TrainResult, train
from tgjax.train.optimizer import linear_warmup_then_cosine_anneal, make_optimizer, make_schedule
from tgjax.train.sharding import logical_to_spec, make_mesh, param_shardings
from tgjax.train.state import TrainState, make_eval_step, make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, Task
from tgjax.train.tasks.treebank_lm import describe

__all__ = [
    "CheckpointStore", "ConfigError", "Evaluation", "RunContext", "Selection", "Task", "TrainResult", "TrainState",
    "Trainer", "TrainingDiverged",
    "apply_overrides", "default_config", "describe", "linear_warmup_then_cosine_anneal",
    "load_config", "logical_to_spec", "make_eval_step", "make_mesh", "make_optimizer", "make_schedule",
    "make_train_step", "param_shardings", "train",
]
