"""What a training task tells the trainer: the contract between `tgjax.train.loop.Trainer` and a family.

The trainer owns what every run needs: the mesh, the checkpoint store (orbax,
with the data iterator's position), resume, the step loop, metrics.jsonl,
TensorBoard and the progress line, NaN and SIGTERM handling, and keeping the
best checkpoint. A task owns what differs between families:

    validate_config(config)         every key it reads, checked before anything starts (ConfigError)
    check_mesh(mesh)                its batch sizes against the mesh's data axis
    setup(run)                      data, vocabulary, model parts, optimiser, shardings (`RunContext`)
    describe_run()                  the opening lines (model, parameters, data)
    init_state() / abstract_state() / restored_rest()
                                    a fresh state (a registered dataclass of arrays with an int32
                                    `step` field, checkpointed whole), the target a checkpoint
                                    restores into (`jax.ShapeDtypeStruct`s with shardings), and the
                                    non-checkpointed constants (position tables, RNG streams)
    checkpoint_meta() / check_checkpoint(meta, step, directory) / resume_from(meta)
                                    the facts a checkpoint records (JSON), refused on resume if they
                                    differ; host-side state (a decayed learning rate, a plateau's
                                    counters) goes here too and comes back through `resume_from`
    batches(position)               a host iterator of batches (dicts of NumPy arrays, global rows
                                    of this process) with `get_state()`: its position, saved with
                                    each checkpoint; `position=None` starts at the beginning
    make_train_step()               `(state, rest, batch) -> (state, metrics)`, jitted; `metrics`
                                    has `loss` (checked for NaN) and `learning_rate`
    new_window()                    a `MetricsWindow`: the train record of each logging interval
    has_validation()                whether there is a validation split to evaluate
    evaluate(state, rest)           an `Evaluation`: the selection value, the record, a message;
                                    it gets the whole state, so a task that keeps averaged
                                    parameters evaluates those (the averaged-parameters hook)
    result_fields()                 the task's facts for `TrainResult` (parameter count, ...)
    summary(result)                 the closing lines, or None
    validation_message(step, evaluation, best_value, best_step)
                                    optional: the console line of a validation (default:
                                    "validation at step S: <message>, best V at step B")

and plain attributes: `name`, `num_steps`, `validation_interval` (steps
between validations, 0 = only at the end), `checkpoint_interval`,
`logging_interval`, `tensorboard`, `selection` (which validation number
ranks checkpoints, and whether lower or higher is better) and `schedule` (a
`tgjax.train.schedules` policy: step-based, or plateau decay with early
stopping, which the trainer applies after each validation to the rate the
optimiser state holds, `schedules.plateau_optimizer`).

A new family is a module with such a class and a config; the trainer is not
edited (`tgjax.train.tasks` maps a config to its task).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from jax.sharding import Mesh

from tgjax.train.config import ConfigError


class TrainingDiverged(RuntimeError):
    """The loss (or a validation number a task needs finite) became NaN or infinite; the message names the step."""


@dataclasses.dataclass(frozen=True)
class Selection:
    """The validation number that picks the best checkpoint: its `name` in `Evaluation.values`, and `mode`."""

    name: str
    mode: str = "min"  # "min": lower is better; "max": higher is better

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ValueError(f"Selection.mode must be 'min' or 'max', got {self.mode!r}")

    def improves(self, value: float, best: float | None) -> bool:
        """Whether `value` beats `best` (None: nothing yet, so any value does)."""
        if best is None:
            return True
        return value < best if self.mode == "min" else value > best


@dataclasses.dataclass
class Evaluation:
    """One validation: `values[selection.name]` ranks it; `record` goes to metrics.jsonl (the trainer adds
    "split", "step" and "best"); `message` follows "validation at step S: " on the console, before
    the trainer's ", best ... at step ..."."""

    values: dict[str, float]
    record: dict[str, Any]
    message: str


@dataclasses.dataclass
class RunContext:
    """What the trainer hands a task's `setup`."""

    workdir: Path
    mesh: Mesh
    resuming: bool  # the workdir holds checkpoints
    process_index: int
    process_count: int
    say: Callable[[str], None]  # a message for the person running this


def read_intervals(task: Any, config, *, fixed_steps: bool = True) -> None:
    """Sets a task's run lengths from the config keys every family shares (one place reads them).

    Always `logging_interval` (logging.interval_steps) and `tensorboard` (logging.tensorboard); with
    `fixed_steps`, also `num_steps` (training.num_steps), `validation_interval` (evaluation.interval_steps)
    and `checkpoint_interval` (checkpointing.interval_steps). A task that derives those from its data
    (epochs) passes `fixed_steps=False` and sets them itself.
    """
    task.logging_interval = _step_count(config, "logging.interval_steps")
    task.tensorboard = config.logging.tensorboard
    if fixed_steps:
        task.num_steps = _step_count(config, "training.num_steps")
        task.validation_interval = _step_count(config, "evaluation.interval_steps", minimum=0)  # 0: at the end
        task.checkpoint_interval = _step_count(config, "checkpointing.interval_steps")


def _step_count(config, key: str, *, minimum: int = 1) -> int:
    """config[key] (a dotted path) as a step count, or a ConfigError naming the key unless it is an int
    >= minimum (a zero interval would divide by zero in the middle of a run)."""
    value = config
    for part in key.split("."):
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}: expected a whole number of steps >= {minimum}, got {value!r}")
    return value


class MetricsWindow(Protocol):
    """Sums over the steps since the last train record; `start` (perf_counter seconds) is moved forward by
    the trainer over validation and saving, which do not count towards steps/s."""

    start: float

    def add(self, metrics: dict) -> None: ...

    def record(self, step: int, metrics: dict) -> dict[str, Any]:
        """The train record: at least "split", "step", "loss", "learning_rate", "steps_per_second",
        "tokens_per_second" (the progress line's numbers)."""
        ...


class BatchIterator(Protocol):
    def __iter__(self) -> Iterator[dict]: ...

    def __next__(self) -> dict: ...

    def get_state(self) -> dict[str, int]: ...


class Task(Protocol):
    """See the module docstring; `tgjax.train.tasks.treebank_lm.TreebankLMTask` is the worked example."""

    name: str
    num_steps: int
    validation_interval: int
    checkpoint_interval: int
    logging_interval: int
    tensorboard: bool
    selection: Selection
    schedule: Any  # a tgjax.train.schedules policy

    def validate_config(self, config) -> None: ...

    def check_mesh(self, mesh: Mesh) -> None: ...

    def setup(self, run: RunContext) -> None: ...

    def describe_run(self) -> list[str]: ...

    def init_state(self) -> tuple[Any, Any]: ...

    def abstract_state(self) -> Any: ...

    def restored_rest(self) -> Any: ...

    def checkpoint_meta(self) -> dict[str, Any]: ...

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None: ...

    def resume_from(self, meta: dict) -> None: ...

    def batches(self, position: dict | None) -> BatchIterator: ...

    def make_train_step(self) -> Callable: ...

    def new_window(self) -> MetricsWindow: ...

    def has_validation(self) -> bool: ...

    def evaluate(self, state, rest) -> Evaluation: ...

    def result_fields(self) -> dict[str, Any]: ...

    def summary(self, result) -> str | None: ...
