"""A model family as a small plug-in, and the trainer's task made of it.

A family says what its model, loss, data and evaluation are; the trainer
(`tgjax.train.loop`) does the rest: the state on the mesh (parameters placed
by their logical axes, `tgjax.train.params_state`), the one train step
(`tgjax.train.step`), the optimiser and its learning rate, orbax checkpoints
with the data position, bit-exact resume, NaN and preemption handling,
metrics, TensorBoard, progress, and the best checkpoint:

    class BigramMLP:
        name = "bigram_mlp"
        selection = Selection("valid_loss", "min")   # which evaluate() number ranks checkpoints

        @staticmethod
        def default_config() -> ml_collections.ConfigDict:
            # The family's own sections and keys; the trainer adds its `training`, `evaluation`,
            # `checkpointing`, `logging`, `mesh` and `distributed` keys (`plugin_defaults`).
            return ml_collections.ConfigDict(dict(model=dict(hidden=64), data=dict(num_sentences=500)))

        def build_model(self, config, rngs: nnx.Rngs) -> nnx.Module: ...
        def loss(self, model, batch, rngs) -> tuple[jax.Array, dict]: ...   # scalar loss, {name: scalar}
        def train_batches(self, config, shard: Shard) -> grain.MapDataset: ...
            # item i: the batch of step i + 1, this process's rows (dict of NumPy arrays [rows, ...])
        def evaluate(self, model, config) -> dict[str, float]: ...          # includes selection.name

An installed package registers it under the entry-point group
`tgjax.families` (`tgjax.train.config.registered_families`); `tgjax train`,
`tgjax info` and resuming then work with no file of tgjax changed. Optional:
`describe(config) -> list[str]` (opening lines) and `validate_config(config)`
(checks before anything starts; raise `tgjax.train.config.ConfigError`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

import jax
import ml_collections
import numpy as np
import optax
from flax import nnx

from tgjax.train import sharding as shd
from tgjax.train.config import (
    ConfigError,
    check_positive_int,
    check_range,
    family_config,
    to_json_dict,
)
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.params_state import ParamsStateTask, params_layout
from tgjax.train.schedules import StepSchedule
from tgjax.train.step import make_train_step, merged_model
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals


@dataclasses.dataclass(frozen=True)
class Shard:
    """Which rows of each global batch this process feeds: `rows` of `batch_size`, starting at `offset`."""

    process_index: int
    process_count: int
    batch_size: int  # global rows per step

    @property
    def rows(self) -> int:
        return self.batch_size // self.process_count

    @property
    def offset(self) -> int:
        return self.process_index * self.rows


class Family(Protocol):
    """See the module docstring."""

    name: str
    selection: Selection

    @staticmethod
    def default_config() -> ml_collections.ConfigDict: ...

    def build_model(self, config, rngs: nnx.Rngs) -> nnx.Module: ...

    def loss(self, model: nnx.Module, batch: dict, rngs: nnx.Rngs) -> tuple[jax.Array, dict]: ...

    def train_batches(self, config, shard: Shard) -> Any: ...

    def evaluate(self, model: nnx.Module, config) -> dict[str, float]: ...


def is_plugin_family(cls: type) -> bool:
    """Whether a registered class is a small family (this module) rather than a full trainer task."""
    return all(hasattr(cls, name) for name in ("build_model", "loss", "train_batches")) and not hasattr(
        cls, "make_train_step")


def trainer_sections() -> dict[str, dict]:
    """The keys the trainer reads for a plug-in family, besides the shared sections."""
    return dict(
        training=dict(
            num_steps=1000,
            batch_size=32,  # global rows per step (all processes)
            learning_rate=1e-3,  # Adam's, after `warmup_steps` of linear warm-up from 0
            warmup_steps=0,
            clip_grad_norm=1.0,  # 0: no clipping
            weight_decay=0.0,  # decoupled (AdamW) when > 0
            seed=1,
        ),
        evaluation=dict(interval_steps=200),
    )


def plugin_defaults(family: type) -> ml_collections.ConfigDict:
    """The trainer's sections with the family's own (`family.default_config()`) set over them."""
    sections = trainer_sections()
    own = family.default_config()
    own = own.to_dict() if isinstance(own, ml_collections.ConfigDict) else dict(own)
    for name, keys in own.items():
        if name in sections and isinstance(keys, dict):
            sections[name].update(keys)  # the family adds keys to (or changes defaults of) a trainer section
        else:
            sections[name] = keys
    config = family_config(sections)
    with config.unlocked():
        config.trainer = getattr(family, "name", "")
    return config


def make_optimizer(training) -> optax.GradientTransformation:
    """Clipping (when > 0), then Adam (AdamW with weight decay) whose rate the optimiser state holds."""
    def schedule(count):
        if training.warmup_steps <= 0:
            return training.learning_rate
        return training.learning_rate * jax.numpy.minimum(1.0, (count + 1) / training.warmup_steps)

    adam = optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, weight_decay=training.weight_decay)
    clip = [optax.clip_by_global_norm(training.clip_grad_norm)] if training.clip_grad_norm > 0 else []
    return optax.chain(*clip, adam)


class StepBatches:
    """Step-indexed batches of a `grain.MapDataset` (or any sequence), resumable: `get_state()` is the number
    of batches consumed, and a restored iterator starts there (grain's random access: nothing is replayed)."""

    def __init__(self, dataset, position: dict | None):
        self.dataset = dataset
        self.consumed = int(position["step"]) if position else 0

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self.consumed >= len(self.dataset):
            raise ConfigError(f"the training data ran out after {self.consumed} batches: give more data, fewer "
                              "training.num_steps, or a dataset that repeats (grain's .repeat())")
        batch = self.dataset[self.consumed]
        self.consumed += 1
        return {name: np.asarray(value) for name, value in batch.items()}

    def get_state(self) -> dict[str, int]:
        return {"epoch": 0, "step": self.consumed}  # the checkpoint's data position (one pass: epoch 0)


class FamilyTask(ParamsStateTask):
    """The trainer's task (`tgjax.train.task.Task`) for a plug-in family: everything but the family's own parts."""

    family_class: type  # set by `task_for`

    def __init__(self, config):
        self.config = config
        self.family = self.family_class()
        self.name = self.family.name
        self.selection = self.family.selection
        self.schedule = StepSchedule()
        read_intervals(self, config)

    @classmethod
    def default_config(cls) -> ml_collections.ConfigDict:
        return plugin_defaults(cls.family_class)

    @classmethod
    def describe(cls, config) -> ModelInfo:
        """What `tgjax info` prints."""
        family = cls.family_class()
        return ModelInfo(family.name, config.model.get("vocab_size", 0) or 0, f"the {family.name} family",
                         config.model.to_dict(), lambda rngs: family.build_model(config, rngs))

    # -- checks and setup

    def validate_config(self, config) -> None:
        for key in ("training.num_steps", "training.batch_size", "evaluation.interval_steps"):
            check_positive_int(config, key)
        check_range(config, "training.learning_rate", low=0, low_open=True)
        check_range(config, "training.clip_grad_norm", low=0)
        if hasattr(self.family, "validate_config"):
            self.family.validate_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.config.training.batch_size, mesh, "training.batch_size")

    def _build(self, rngs: nnx.Rngs) -> nnx.Module:
        return self.family.build_model(self.config, rngs)

    def setup(self, run: RunContext) -> None:
        self.run = run
        t = self.config.training
        if t.batch_size % run.process_count:
            raise ConfigError(f"training.batch_size={t.batch_size} does not divide over {run.process_count} processes")
        abstract = nnx.eval_shape(lambda: self._build(nnx.Rngs(params=0, dropout=0)))
        self.graphdef = nnx.split(abstract, nnx.Param, ...)[0]
        self.layout = params_layout(self._build, run.mesh, shd.config_rules(self.config))
        self.tx = make_optimizer(t)
        self.replicated = shd.replicated(run.mesh)
        shard = Shard(run.process_index, run.process_count, t.batch_size)
        self.dataset = self.family.train_batches(self.config, shard)
        family_loss = self.family.loss
        step = make_train_step(self.graphdef, lambda model, batch, key: family_loss(model, batch,
                                                                                    nnx.Rngs(dropout=key)), self.tx)
        self._train_step = jax.jit(step, donate_argnums=(0,),
                                   out_shardings=(self.layout.state_shardings(self.tx), self.replicated))

    def describe_run(self) -> list[str]:
        lines = [f"{self.name}: {self.layout.num_parameters:,} parameters"]
        describe = getattr(self.family, "describe", None)
        return lines + (list(describe(self.config)) if describe is not None else [])

    # -- state and checkpoints

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"family": self.name, "num_parameters": self.layout.num_parameters,
                "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        if meta.get("family") != self.name:
            raise ConfigError(f"checkpoint step {step} in {directory} is of the family {meta.get('family')!r}, "
                              f"not {self.name!r}: use a new --workdir")
        if meta.get("num_parameters") != self.layout.num_parameters:
            raise ConfigError(f"checkpoint step {step} in {directory} has {meta.get('num_parameters')} parameters, "
                              f"this config {self.layout.num_parameters}: use the original config or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        pass

    # -- steps, validation

    def batches(self, position: dict | None) -> StepBatches:
        return StepBatches(self.dataset, position)

    def make_train_step(self):
        return lambda state, rest, batch: self._train_step(state, rest, batch)

    def new_window(self) -> SummingWindow:
        return SummingWindow(ratios={"loss": ("loss", None)}, tokens="rows")

    def has_validation(self) -> bool:
        return hasattr(self.family, "evaluate")

    def evaluate(self, state, rest) -> Evaluation:
        model = merged_model(self.graphdef, state.params, rest)
        model.eval()
        values = {name: float(value) for name, value in self.family.evaluate(model, self.config).items()}
        if self.selection.name not in values:
            raise ConfigError(f"the {self.name} family's evaluate() gave {sorted(values)}, without its selection "
                              f"value {self.selection.name!r}")
        message = ", ".join(f"{name} {value:.4f}" for name, value in values.items())
        return Evaluation(values, dict(values), message)


    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.layout.num_parameters}

    def summary(self, result) -> str | None:
        return None


def task_for(family: type) -> type:
    """The `FamilyTask` class of a plug-in family class."""
    return type(f"{family.__name__}Task", (FamilyTask,), {"family_class": family})


__all__ = ["Family", "FamilyTask", "Shard", "StepBatches", "is_plugin_family", "plugin_defaults", "task_for",
           "trainer_sections"]
