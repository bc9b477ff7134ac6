"""The CFL task: one trial of a stack-attention language model on a CFL (DuSell & Chiang, ICLR 2024, App. D.3).

What it hands the trainer (`tgjax.train.task`): the config's checks
(`tgjax.train.cfl.check_config`), the trial's fresh training and validation
sample, `StackTransformerLM` parameters (placed on the mesh by their logical
axes, `tgjax.train.params_state`), the resumable shuffled batches (`shuffled_batches`: the same batches
in a new order every epoch, a grain dataset per epoch), the jitted step of `tgjax.train.cfl.make_steps`
(cross-entropy summed over time, mean over strings; the learning rate is an
argument, so a plateau decay recompiles nothing), validation after every
epoch with the cross-entropy difference Δ as the selection (lower is better),
and the `Plateau` schedule (decay by `training.lr_decay`, early stopping).
The learning rate, the plateau's counters and the validation history go into
every checkpoint's meta and come back on resume.

`finish(train_result)` reads the best epoch's parameters back from the
trial's checkpoints, scores the validation split per length bin and writes
the trial's results.json (`TrialResult`); the trials driver
(`tgjax.train.cfl_trials.train_cfl`) tests the best trial.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from tgjax.data.cfl import cfl_task
from tgjax.data.cfl_metric import cross_entropy_difference
from tgjax.models.stack_lm import StackTransformerLM
from tgjax.progress import format_duration
from tgjax.train import cfl
from tgjax.train import sharding as shd
from tgjax.train.cfl import describe_cfl as describe  # noqa: F401  (what `tgjax info` reads of every family module)
from tgjax.train.config import ConfigError, to_json_dict
from tgjax.train.metrics import SummingWindow
from tgjax.train.params_state import params_layout, with_shardings
from tgjax.train.schedules import Plateau
from tgjax.train.step import learning_rate_of
from tgjax.train.task import Evaluation, RunContext, Selection, TrainingDiverged, read_intervals

_MODEL_FIELDS = ("inputs", "targets", "weights")


def _json_value(value):
    """`value` as it reads back from JSON (tuples become lists), for comparing run facts."""
    return json.loads(json.dumps(value))


@dataclasses.dataclass
class TrialResult:
    """One trained model: its settings, history and scores (all also in the trial's results.json)."""

    workdir: Path
    seed: int
    learning_rate: float
    final_learning_rate: float
    epochs_run: int
    best_epoch: int
    best_step: int
    stopped_early: bool  # by early stopping, before training.epochs
    num_parameters: int
    valid_history: list[float]  # validation Δ after each epoch
    valid: dict[str, Any]  # the best epoch's parameters on the validation split: overall and "bins"
    test: dict[str, Any] | None  # ... on the test split (the best trial's; None for the others)
    seconds: float  # training and validation, over every call that ran the trial
    run: dict[str, Any] = dataclasses.field(default_factory=dict)  # the facts a resume checks (CFLTask.run_facts)
    stopped_by_budget: bool = False  # ended by training.max_train_seconds (then stopped_early is True as well)

    @property
    def best_valid_difference(self) -> float:
        return self.valid["cross_entropy_difference"]

    def summary(self) -> dict[str, Any]:
        return {"workdir": str(self.workdir), "seed": self.seed, "learning_rate": self.learning_rate,
                "final_learning_rate": self.final_learning_rate, "epochs_run": self.epochs_run,
                "best_epoch": self.best_epoch, "best_step": self.best_step, "stopped_early": self.stopped_early,
                "stopped_by_budget": self.stopped_by_budget, "seconds": self.seconds,
                "valid_cross_entropy_difference": self.valid["cross_entropy_difference"],
                "test_cross_entropy_difference": None if self.test is None else self.test["cross_entropy_difference"]}

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "num_parameters": self.num_parameters, "valid_history": self.valid_history,
                "valid": self.valid, "test": self.test, "run": self.run}

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> TrialResult:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in saved.items() if k in names}
        return cls(**{**fields, "workdir": Path(saved["workdir"])})


class _BudgetedPlateau(Plateau):
    """`Plateau`, and a stop after the first epoch that ends past `budget_s` seconds of `elapsed()` (None: never).

    `budget_stopped` says whether the budget (not the plateau) ended the trial; `stop_reason` says it in the
    trainer's stop message.
    """

    def __init__(self, *args, budget_s: float | None, elapsed, **kwargs):
        super().__init__(*args, **kwargs)
        self.budget_s, self.elapsed = budget_s, elapsed
        self.budget_stopped = False

    def update(self, value: float) -> tuple[bool, bool, bool]:
        improved, decay, stop = super().update(value)
        if not stop and self.budget_s is not None and self.elapsed() >= self.budget_s:
            self.budget_stopped = stop = True
            self.stop_reason = f"time budget: training.max_train_seconds={self.budget_s:g}"
            decay = False
        return improved, decay, stop


class CFLTask:
    """One trial of `configs/stack_cfl.py` (`trainer="cfl"`); see the module docstring.

    `trial` k uses seed `training.seed + k` (data, initialisation, dropout,
    batch order, and the learning-rate draw when `training.learning_rate` is None).
    """

    name = "cfl"
    selection = Selection("cross_entropy_difference", "min")
    default_config = staticmethod(cfl.default_config)

    def __init__(self, config, trial: int = 0):
        self.config = config
        self.trial = trial
        t = config.training
        self.seed = int(t.seed) + trial
        self.label = f"[trial {trial + 1}/{t.num_trials}] " if t.num_trials > 1 else ""
        self.initial_learning_rate = cfl.initial_learning_rate(t, self.seed)
        # threshold_offset: the validation split's true cross-entropy, set at the first validation (a constant).
        budget = t.get("max_train_seconds")
        self.schedule = _BudgetedPlateau(t.lr_patience, t.early_stopping_patience, factor=t.lr_decay,
                                         threshold=t.get("lr_threshold", 0.0),
                                         budget_s=None if budget is None else float(budget),
                                         elapsed=self.training_seconds)
        self.valid_history: list[float] = []
        read_intervals(self, config, fixed_steps=False)
        self.num_steps = self.validation_interval = self.checkpoint_interval = 0  # set by `setup` (the data's)
        self.seconds_before = 0.0  # training time of earlier calls (from the checkpoint's meta)
        self.started = time.perf_counter()  # reset by `setup`, once the data is ready

    def training_seconds(self) -> float:
        """Seconds this trial has trained so far (earlier calls included; data preparation excluded)."""
        return self.seconds_before + time.perf_counter() - self.started

    # -- before anything runs ----------------------------------------------------------------

    def validate_config(self, config) -> None:
        self.task_name, self.model_name = cfl.check_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.config.training.batch_size, mesh, "training.batch_size")

    def run_facts(self) -> dict[str, Any]:
        """What a checkpoint or a finished trial must share with this config to be resumed or read back."""
        config, t, d = self.config, self.config.training, self.config.data
        task_name, model_name = cfl.check_config(config)
        task = cfl_task(task_name)
        return _json_value({
            "task": task_name, "model": model_name, "trial": self.trial, "seed": self.seed,
            "data_seed": self._data_seed(), "train_size": d.train_size, "valid_size": d.valid_size,
            "length_bucket": d.length_bucket, "batch_size": t.batch_size, "learning_rate": self.initial_learning_rate,
            "lr_decay": t.lr_decay, "lr_patience": t.lr_patience, "early_stopping_patience": t.early_stopping_patience,
            "epochs": t.epochs, "max_train_seconds": t.get("max_train_seconds"),
            "clip_grad_norm": t.clip_grad_norm, "adam": t.adam.to_dict(),
            "model_config": dataclasses.asdict(cfl.resolve_model_config(config, task.vocabulary.size)),
        })

    def _data_seed(self) -> int:
        d, t = self.config.data, self.config.training
        return self.seed if d.seed is None else int(d.seed) + (self.seed - int(t.seed))

    def setup(self, run: RunContext) -> None:
        """The trial's data (sampled from its seed), the true validation probabilities, steps, shardings."""
        config, t, d, e = self.config, self.config.training, self.config.data, self.config.evaluation
        self.run = run
        self.task = cfl_task(self.task_name)
        self.model_config = cfl.resolve_model_config(config, self.task.vocabulary.size)
        self.num_parameters = cfl.count_stack_lm_parameters(self.model_config)
        self.facts = self.run_facts()
        data_seed = self._data_seed()
        run.say(f"{self.label}sampling {d.train_size} training and {d.valid_size} validation strings of "
                f"{self.task.name} (seed {data_seed})")
        train_strings = self.task.sample_split("train", seed=data_seed, size=d.train_size)
        self.valid_strings = self.task.sample_split("valid", seed=data_seed, size=d.valid_size)
        self.train_batches = cfl.make_batches(self.task, train_strings, t.batch_size, length_bucket=d.length_bucket)
        self.valid_batches = cfl.make_batches(self.task, self.valid_strings, e.batch_size,
                                              length_bucket=d.length_bucket, same_length=False)
        run.say(f"{self.label}computing the true probabilities of the validation strings (inside algorithm)")
        self.task.log_probs_true(self.valid_strings, "valid")  # cached on the task: every epoch's Δ is then cheap
        self.steps_per_epoch = len(self.train_batches)
        self.num_steps = t.epochs * self.steps_per_epoch
        self.validation_interval = self.steps_per_epoch
        interval = config.checkpointing.interval_steps
        self.checkpoint_interval = int(interval) if interval else self.steps_per_epoch
        self.steps = cfl.make_steps(self.model_config, t)
        self.tx = cfl.make_optimizer(t, self.initial_learning_rate)
        self.replicated = shd.replicated(run.mesh)
        self.layout = params_layout(lambda rngs: StackTransformerLM(self.model_config, rngs=rngs), run.mesh,
                                    shd.config_rules(config))
        self.started = time.perf_counter()

    def describe_run(self) -> list[str]:
        c, t = self.model_config, self.config.training
        return [f"{self.label}{self.task.display_name} {cfl.DISPLAY_NAMES[self.model_name]}: "
                f"{self.num_parameters:,} parameters (d_model {c.d_model}, {c.num_layers} layers, stack {c.stack}"
                + (f", m {c.stack_embedding_size}" if c.stack != "none" else "")
                + (f", |Q| {c.num_states}, |Γ| {c.stack_alphabet_size}" if c.stack == "nondeterministic" else "")
                + f"); {self.steps_per_epoch} batches of {t.batch_size} per epoch; learning rate "
                f"{self.initial_learning_rate:.3g}" + (" (log-uniform draw)" if t.learning_rate is None else "")]

    # -- state and checkpoints ---------------------------------------------------------------

    def _fresh(self) -> tuple[cfl.CFLState, Any]:
        params, rest, dropout_key = cfl.init_model(self.model_config, self.seed)
        state = cfl.CFLState(params=params, opt_state=self.tx.init(params), step=jnp.zeros((), jnp.int32),
                             rng=jax.random.key_data(dropout_key))
        return state, rest

    def _shardings(self) -> cfl.CFLState:
        return cfl.CFLState(self.layout.shardings, self.layout.opt_state_shardings(self.tx), self.replicated,
                            self.replicated)

    def init_state(self):
        state, rest = self._fresh()
        return jax.device_put(state, self._shardings()), jax.device_put(rest, self.replicated)

    def abstract_state(self):
        return with_shardings(jax.eval_shape(lambda: self._fresh()[0]), self._shardings())

    def restored_rest(self):
        # The parameters come from the checkpoint; the rest (dropout streams, reseeded every step) is the seed's.
        return jax.device_put(cfl.init_model(self.model_config, self.seed)[1], self.replicated)

    def checkpoint_meta(self) -> dict[str, Any]:
        plateau = self.schedule.state_dict()
        if not math.isfinite(plateau["best"]):
            plateau["best"] = None  # before the first validation (JSON has no infinity)
        return {"run": self.facts, "plateau": plateau,
                "valid_history": list(self.valid_history),
                "seconds": self.training_seconds(),
                "model": dataclasses.asdict(self.model_config), "config": to_json_dict(self.config)}

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        saved = meta.get("run", {})
        changed = [f"{k}: {saved.get(k)!r} in the checkpoint, {v!r} now" for k, v in self.facts.items()
                   if saved.get(k) != v]
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another trial or run: "
                              + "; ".join(changed) + ". Use the original config or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        plateau = dict(meta["plateau"])
        if plateau["best"] is None:
            plateau["best"] = math.inf
        self.schedule.load_state_dict(plateau)
        self.valid_history = [float(v) for v in meta["valid_history"]]
        self.seconds_before = float(meta.get("seconds", 0.0))

    # -- steps ---------------------------------------------------------------------------------

    def batches(self, position: dict | None):
        """The trial's shuffled batches (`tgjax.train.cfl.shuffled_batches`): this process's rows of the model's
        fields."""
        return cfl.shuffled_batches(self.train_batches, self.seed, position, fields=_MODEL_FIELDS,
                                    process_index=self.run.process_index, process_count=self.run.process_count)

    def make_train_step(self):
        step = self.steps.train

        def train_step(state, rest, batch):
            return step(state, rest, batch["inputs"], batch["targets"], batch["weights"])

        return train_step

    def new_window(self) -> SummingWindow:
        # nats per symbol over the window; the symbols are the "tokens" of tokens/s
        return SummingWindow(ratios={"loss": ("sum_nll", "num_symbols")}, tokens="num_symbols",
                             steps_per_epoch=self.steps_per_epoch)

    # -- validation ----------------------------------------------------------------------------

    def has_validation(self) -> bool:
        return True

    def evaluate(self, state, rest) -> Evaluation:
        """Δ on the validation split after an epoch (cross-entropy per symbol, EOS included, minus the true one)."""
        epoch = -(-int(state.step) // self.steps_per_epoch)
        model_lp = cfl.string_log_probs_of(self.steps, state.params, rest, self.valid_batches,
                                           len(self.valid_strings))
        valid = cross_entropy_difference(model_lp, self.valid_strings, self.task, "valid")
        difference = valid.difference
        if not math.isfinite(difference):
            raise TrainingDiverged(f"{self.label}validation cross-entropy is {valid.overall.model_cross_entropy} "
                                   f"after epoch {epoch} (step {int(state.step)})")
        self.valid_history.append(difference)
        # The release's relative threshold is on the model's cross-entropy = Δ + the (fixed) true one.
        self.schedule.threshold_offset = valid.overall.true_cross_entropy
        return Evaluation(
            values={"cross_entropy_difference": difference},
            record={"epoch": epoch, "cross_entropy_difference": difference,
                    "cross_entropy": valid.overall.model_cross_entropy,
                    "true_cross_entropy": valid.overall.true_cross_entropy,
                    "learning_rate": float(learning_rate_of(state.opt_state))},
            message=(f"epoch {epoch}: validation cross-entropy difference {difference:.4f} (model "
                     f"{valid.overall.model_cross_entropy:.4f}, true {valid.overall.true_cross_entropy:.4f} "
                     f"nats/symbol)"))

    def validation_message(self, step: int, evaluation: Evaluation, best_value: float, best_step: int) -> str:
        """The per-epoch console line: the evaluation's message and the best epoch so far."""
        return (f"{self.label}{evaluation.message}; best {best_value:.4f} at epoch "
                f"{-(-best_step // self.steps_per_epoch)}")

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.task.vocabulary.size}

    def summary(self, result) -> str | None:
        return None  # `finish` (after the trainer has closed its checkpoints) reports the trial

    # -- after training ------------------------------------------------------------------------

    def finish(self, result) -> TrialResult:
        """The trial's result: the best epoch's parameters (from its checkpoint) on validation, per length bin;
        written to the trial's results.json. `result` is the trainer's `TrainResult` of a finished trial."""
        e = self.config.evaluation
        if result.best_step is None:
            raise RuntimeError(f"{self.run.workdir}: the trial finished without a validation")
        params = cfl.read_params(self.run.workdir, result.best_step, self.model_config)
        valid = cross_entropy_difference(
            cfl.string_log_probs_of(self.steps, params, self.restored_rest(), self.valid_batches,
                                    len(self.valid_strings)),
            self.valid_strings, self.task, "valid", bin_width=e.bin_width,
            bins_condition_on_length=e.bins_condition_on_length)
        epochs_run = len(self.valid_history)
        stopped_early = result.stop_reason == "schedule" and epochs_run < self.config.training.epochs
        # The plateau's counters come back on resume, so this holds for a trial stopped in an earlier call too.
        by_budget = stopped_early and self.schedule.since_best < self.schedule.early_stopping_patience
        trial = TrialResult(
            workdir=self.run.workdir, seed=self.seed, learning_rate=self.initial_learning_rate,
            final_learning_rate=result.final_learning_rate, epochs_run=epochs_run,
            best_epoch=-(-result.best_step // self.steps_per_epoch), best_step=result.best_step,
            stopped_early=stopped_early, stopped_by_budget=by_budget,
            num_parameters=self.num_parameters, valid_history=list(self.valid_history),
            valid=cfl.difference_dict(valid, self.valid_strings), test=None,
            seconds=self.seconds_before + (time.perf_counter() - self.started if result.final_step > result.start_step
                                           else 0.0),
            run=self.facts)
        if self.run.process_index == 0:
            cfl.write_json(self.run.workdir / "results.json", trial.to_json())
        self.run.say(f"{self.label}best epoch {trial.best_epoch} of {epochs_run}"
                     + (" (time budget reached)" if by_budget else "") + ": cross-entropy difference "
                     f"validation {valid.difference:.4f} nats/symbol ({format_duration(trial.seconds)})")
        return trial


def train_command(config, workdir, *, quiet: bool = False) -> int:
    """What `tgjax train` runs for this family: the trials (`tgjax.train.cfl_trials.train_command`), not one run
    of the trainer (`tgjax.train.tasks.train_command`)."""
    from tgjax.train import cfl_trials  # imported here: cfl_trials imports this module

    return cfl_trials.train_command(config, workdir, quiet=quiet)
