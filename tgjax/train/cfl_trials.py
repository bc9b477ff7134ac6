"""Stack attention on the CFL tasks (DuSell & Chiang, ICLR 2024, §6, Appendix D): the trials, then the test.

    tgjax train --config configs/stack_cfl.py --config.task=dyck --config.model=tf_nd --workdir runs/dyck_nd

    from tgjax.train.config import load_config
    from tgjax.train.cfl_trials import train_cfl
    result = train_cfl(load_config("configs/stack_cfl.py", ["task=dyck", "model=tf_nd"]), "runs/dyck_nd")

One trial (Appendix D.3) is one run of the shared trainer (`tgjax.train.loop`)
with the CFL task (`tgjax.train.tasks.cfl`): a fresh training and validation
sample, minibatches of `training.batch_size` strings of one length made once
and shuffled every epoch, Adam on the cross-entropy summed over time (mean
over the batch's strings) after clipping the gradient norm, validation Δ
(`tgjax.data.cfl_metric.cross_entropy_difference`) after every epoch, the
learning rate times `lr_decay` after `lr_patience` epochs without improvement,
early stopping after `early_stopping_patience`. The trainer keeps orbax
checkpoints (the best epoch's by validation Δ among them), so a trial resumes
where it stopped, bit for bit.

This module drives the trials (`training.num_trials`, the paper: 10, each its
own seed, data and, unless fixed, learning rate): trial k runs in
`WORKDIR/trial_<k>/`; a trial whose `results.json` exists is finished and read
back, the first unfinished one resumes from its checkpoints. Then the best
trial by validation Δ is scored on the test set, per length.

Writes:
  trial_<k>/checkpoints/          orbax, every epoch (the newest `checkpointing.max_to_keep` and the best)
  trial_<k>/metrics.jsonl         {"split": "train", "step", "epoch", "loss" (nats per symbol), "learning_rate",
                                   "steps_per_second", "tokens_per_second", "grad_norm"} every
                                  `logging.interval_steps`; {"split": "valid", "step", "epoch",
                                  "cross_entropy_difference", "cross_entropy", "true_cross_entropy",
                                  "learning_rate", "best"} every epoch; in the best trial
                                  {"split": "test_by_length", "step": LENGTH, "cross_entropy_difference", ...}
                                  (TensorBoard then draws Δ against length) and {"split": "test", ...}
  trial_<k>/results.json          the trial: settings, validation history, the best epoch per bin
  results.json                    the best trial's numbers on validation and test, overall and per bin, and
                                  every trial's summary (`tgjax.train.cfl.load_model(WORKDIR)` rebuilds the
                                  best model)
  cross_entropy_difference.png    validation Δ by epoch of every trial, the best's test Δ by length (Fig. 2)
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import jax

from tgjax.data.cfl import CFLTask as CFLLanguage
from tgjax.data.cfl import cfl_task
from tgjax.data.cfl_metric import CrossEntropyDifference, cross_entropy_difference
from tgjax.models.stack_lm import StackLMConfig
from tgjax.progress import format_duration
from tgjax.train.cfl import (
    DISPLAY_NAMES,
    MAX_TRAIN_LENGTH,
    check_config,
    difference_dict,
    init_model,
    make_batches,
    make_steps,
    plot_results,
    read_params,
    resolve_model_config,
    selected_test_lengths,
    string_log_probs_of,
    write_json,
)
from tgjax.train.config import ConfigError, to_json_dict
from tgjax.train.loop import Trainer
from tgjax.train.metrics import MetricsWriter, read_metrics
from tgjax.train.tasks.cfl import CFLTask, TrialResult
from tgjax.workdir import make_workdir, workdir_path

__all__ = ["CFLResult", "train_cfl"]


@dataclasses.dataclass
class CFLResult:
    """What `train_cfl` did: the trials, and the best one by validation Δ (None when it stopped before the end)."""

    workdir: Path
    task: str
    model: str
    trials: list[TrialResult]
    best: TrialResult | None
    seconds: float

    @property
    def complete(self) -> bool:
        return self.best is not None


def _results_json(config, task: CFLLanguage, model_name: str, model_cfg: StackLMConfig, best: TrialResult,
                  trials: list[TrialResult]) -> dict[str, Any]:
    return {
        "task": task.name, "task_display_name": task.display_name, "model": model_name,
        "num_parameters": best.num_parameters, "model_config": dataclasses.asdict(model_cfg),
        **best.summary(),
        "bins_condition_on_length": bool(config.evaluation.bins_condition_on_length),
        "bin_width": int(config.evaluation.bin_width),
        "max_train_length": MAX_TRAIN_LENGTH,
        "valid_history": best.valid_history,
        "valid": best.valid,
        "test": best.test,
        "config": to_json_dict(config),
        "best_trial_workdir": str(best.workdir),
        "trials": [r.summary() for r in trials],
    }


def _finished_trial(trial_dir: Any, facts: dict[str, Any]) -> TrialResult | None:
    """The trial read back from its results.json, or None when it has not finished; another run's is refused."""
    path = trial_dir / "results.json"
    if not path.exists():
        return None
    result = TrialResult.from_json(json.loads(path.read_text()))
    result.workdir = workdir_path(trial_dir)  # where it is now (the run's directory may have moved)
    changed = [f"{k}: {result.run.get(k)!r} there, {v!r} now" for k, v in facts.items() if result.run.get(k) != v]
    if changed:
        raise ConfigError(f"{path} is a finished trial of another run ({'; '.join(changed)}); use the original "
                          f"config or a new --workdir")
    return result


def _write_test_records(trial_dir: Any, best: TrialResult, test: CrossEntropyDifference, tensorboard: bool) -> None:
    """The test numbers into the trial's metrics.jsonl, replacing those of an earlier attempt."""
    records, _ = read_metrics(trial_dir) if (trial_dir / "metrics.jsonl").exists() else ([], [])
    kept = [r for r in records if r.get("split") not in ("test", "test_by_length")]
    (trial_dir / "metrics.jsonl").write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in kept))
    writer = MetricsWriter(trial_dir, start_step=max([r.get("step", 0) for r in kept] + [best.best_step]),
                           tensorboard=tensorboard)
    try:
        for start, b in test.bins.items():
            writer.write({"split": "test_by_length", "step": start, "cross_entropy_difference": b.difference,
                          "cross_entropy": b.model_cross_entropy, "true_cross_entropy": b.true_cross_entropy})
        writer.write({"split": "test", "step": best.best_step, "epoch": best.best_epoch,
                      "cross_entropy_difference": test.difference, "cross_entropy": test.overall.model_cross_entropy})
    finally:
        writer.close()


def train_cfl(config, workdir: str | Path, *, stream: TextIO | None = None, quiet: bool = False,
              stop_after_step: int | None = None, devices: list | None = None) -> CFLResult:
    """Runs (or resumes) the trials `config` asks for, then tests the best; see the module docstring.

    Args:
      stop_after_step: stop the trial being trained once this (trial) step is done, as a preemption
        would; `result.complete` is then False and calling again resumes.
      devices: the devices of each trial's mesh (default: all).

    Raises:
      ConfigError: an unknown task, model or key value (named, with the choices); a workdir of another run.
      TrainingDiverged: the loss (or a validation cross-entropy) became NaN or infinite.
    """
    started = time.perf_counter()
    task_name, model_name = check_config(config)
    task = cfl_task(task_name)
    workdir = make_workdir(workdir)  # a local directory or a bucket (gs://...)
    t, d, e = config.training, config.data, config.evaluation

    def say(text: str) -> None:
        if not quiet and jax.process_index() == 0:
            print(text, file=stream or sys.stderr, flush=True)

    if jax.process_index() == 0:
        write_json(workdir / "config.json", to_json_dict(config))
    lengths = set(selected_test_lengths(config, task))
    test_strings = [s for s in task.sample_split("test", size=d.test_per_length) if len(s) in lengths]
    say(f"{task.display_name} ({task.name}), model {model_name}: test set of {len(test_strings)} strings, "
        f"{d.test_per_length} per length for {len(lengths)} lengths ({min(lengths)}–{max(lengths)})")

    trials: list[TrialResult] = []
    for k in range(t.num_trials):
        trial = CFLTask(config, trial=k)
        trial_dir = workdir / f"trial_{k}"
        finished = _finished_trial(trial_dir, trial.run_facts())
        if finished is not None:
            say(f"{trial.label}finished earlier: best epoch {finished.best_epoch} of {finished.epochs_run}, "
                f"validation {finished.best_valid_difference:.4f} ({trial_dir / 'results.json'})")
            trials.append(finished)
            continue
        trainer = Trainer(config, trial_dir, task=trial, devices=devices, stream=stream, quiet=quiet)
        try:
            run = trainer.run(stop_after_step=stop_after_step)
        finally:
            trainer.close()
        if run.stop_reason in ("sigterm", "stop_after_step"):
            return CFLResult(workdir, task_name, model_name, trials, None, time.perf_counter() - started)
        trials.append(trial.finish(run))

    best = min(trials, key=lambda r: r.best_valid_difference)
    k = trials.index(best)
    model_cfg = resolve_model_config(config, task.vocabulary.size)
    say(f"computing the true probabilities of {len(test_strings)} test strings")
    steps = make_steps(model_cfg, t)
    _, rest, _ = init_model(model_cfg, best.seed)
    params = read_params(best.workdir, best.best_step, model_cfg)
    test_batches = make_batches(task, test_strings, e.batch_size, length_bucket=d.length_bucket, same_length=False)
    test = cross_entropy_difference(string_log_probs_of(steps, params, rest, test_batches, len(test_strings)),
                                    test_strings, task, "test", bin_width=e.bin_width,
                                    bins_condition_on_length=e.bins_condition_on_length)
    best.test = difference_dict(test, test_strings)
    if jax.process_index() == 0:
        _write_test_records(best.workdir, best, test, bool(config.logging.tensorboard))
        write_json(best.workdir / "results.json", best.to_json())
        write_json(workdir / "results.json", _results_json(config, task, model_name, model_cfg, best, trials))
        title = (f"{task.display_name}, {DISPLAY_NAMES[model_name]} (lr {best.learning_rate:.2g}, best epoch "
                 f"{best.best_epoch})" if len(trials) == 1 else
                 f"{task.display_name}, {DISPLAY_NAMES[model_name]}: best of {len(trials)} by validation "
                 f"(trial {k}, lr {best.learning_rate:.2g})")
        plot_results(workdir / "cross_entropy_difference.png", title=title,
                     valid_history={(f"trial {i}" + (" (best)" if r is best else "") if len(trials) > 1
                                     else "validation"): r.valid_history for i, r in enumerate(trials)},
                     test_bins=test.per_bin(),
                     valid_bins={int(b): v["cross_entropy_difference"] for b, v in best.valid["bins"].items()})
    what = f"best of {len(trials)} trials by validation: trial {k} (lr {best.learning_rate:.3g}): " if len(
        trials) > 1 else f"best epoch {best.best_epoch} of {best.epochs_run}: "
    say(f"{what}cross-entropy difference validation {best.best_valid_difference:.4f}, "
        f"test {test.difference:.4f} nats/symbol")
    result = CFLResult(workdir, task_name, model_name, trials, best, time.perf_counter() - started)
    say(f"done in {format_duration(result.seconds)}: {workdir / 'results.json'}, "
        f"{workdir / 'cross_entropy_difference.png'}")
    return result


def train_command(config, workdir: str | Path, *, quiet: bool = False) -> int:
    """`tgjax train` for configs/stack_cfl.py (the CFL family's training is several runs of the trainer): the
    trials, then the best one's test; the exit status. Resumes: finished trials are read back, the current one
    continues from its checkpoints."""
    from tgjax.train.loop import TrainingDiverged

    try:
        result = train_cfl(config, workdir, quiet=quiet)
    except TrainingDiverged as error:
        print(f"tgjax: error: {error}", file=sys.stderr)
        return 1
    if not result.complete:  # stopped by SIGTERM: the trainer said so; the same command resumes
        return 0
    if quiet:
        best = result.best
        print(f"{result.task} {result.model}: cross-entropy difference validation "
              f"{best.valid['cross_entropy_difference']:.4f}, test {best.test['cross_entropy_difference']:.4f} "
              f"(best epoch {best.best_epoch})")
    return 0
