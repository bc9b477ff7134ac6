"""Trains Tf / Tf+Sup / Tf+Nd language models on the CFL tasks (DuSell & Chiang, ICLR 2024, §6, Appendix D).

    tgjax train --config configs/stack_cfl.py --config.task=dyck --config.model=tf_nd --workdir runs/dyck_nd

    from tgjax.train.config import load_config
    from tgjax.train.cfl import train_cfl
    result = train_cfl(load_config("configs/stack_cfl.py", ["task=dyck", "model=tf_nd"]), "runs/dyck_nd")

One trial (Appendix D.3): sample a training and a validation set (fresh for
every seed), make minibatches of `training.batch_size` strings of one length
once, shuffle their order every epoch; jitted steps of Adam on the
cross-entropy summed over time steps (averaged over the batch's strings),
after clipping the gradient's global L2 norm to `training.clip_grad_norm`.
After every epoch the validation split is scored; its cross-entropy per
symbol (EOS included) is the early-stopping criterion, reported as the
cross-entropy difference Δ from the true distribution
(`tgjax.data.cfl_metric.cross_entropy_difference`, 0 is optimal). The learning rate
is multiplied by `lr_decay` after `lr_patience` epochs without improvement
(then the count restarts), and training stops after
`early_stopping_patience` epochs without improvement or `epochs` epochs.
The parameters of the best epoch are kept (`best_params.npz`) and scored on
the validation and test splits, overall and per length bin.

With `training.num_trials` > 1 (the paper: 10) each trial has its own seed,
data and (unless fixed) learning rate, and runs in `WORKDIR/trial_K`; the
trial with the best validation Δ is reported at the top of the workdir.

Writes into the (trial's) workdir:
  metrics.jsonl   {"split": "train", "step", "epoch", "loss" (nats per symbol), "learning_rate",
                   "steps_per_second", "tokens_per_second", "grad_norm"} every `logging.interval_steps`;
                  {"split": "valid", "step", "epoch", "cross_entropy_difference", "cross_entropy",
                   "true_cross_entropy", "learning_rate", "best"} every epoch;
                  {"split": "test_by_length", "step": LENGTH, "cross_entropy_difference", ...} at the end
                  (TensorBoard then draws Δ against length).
  tensorboard/    the same scalars.
  best_params.npz the best epoch's parameters (`load_model(workdir)` rebuilds the model).
  results.json    overall and per-bin numbers on valid and test, the run's settings and history.
  cross_entropy_difference.png   validation Δ by epoch (left), test Δ by length (right), as the paper's Fig. 2.

Padding: every batch's time axis is padded up to a multiple of
`data.length_bucket` (weights 0). All three models are causal (the stacks
read left to right), so this changes no number and only bounds the number
of compiled shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tgjax.data.cfl import SPLITS, TASK_NAMES, CFLTask, cfl_task
from tgjax.data.cfl_metric import CrossEntropyDifference, cross_entropy_difference
from tgjax.models.stack_lm import MODEL_KINDS, StackLMConfig, StackTransformerLM, stack_cfl_config
from tgjax.train.config import ConfigError, to_json_dict
from tgjax.train.metrics import MetricsWriter, Progress, format_duration
from tgjax.train.schedules import Plateau

__all__ = [
    "CFLResult",
    "MODEL_NAMES",
    "Plateau",
    "ShuffledBatches",
    "TrialResult",
    "check_config",
    "describe_cfl",
    "load_model",
    "make_batches",
    "make_steps",
    "plot_results",
    "resolve_model_config",
    "selected_test_lengths",
    "string_log_probs_of",
    "train_cfl",
]

# Config names -> `tgjax.models.stack_lm` names.
MODEL_NAMES = {"tf": "tf", "tf_sup": "tf+sup", "tf_nd": "tf+nd"}
_DISPLAY = {"tf": "Tf", "tf_sup": "Tf+Sup", "tf_nd": "Tf+Nd"}
_ARCHITECTURE_KEYS = ("num_layers", "d_model", "num_heads", "feedforward_size", "dropout_rate",
                      "stack_embedding_size", "num_states", "stack_alphabet_size", "pushed_vectors")
MAX_TRAIN_LENGTH = SPLITS["train"].max_length


# -----------------------------------------------------------------------------
# The config.


def _task_name(config) -> str:
    name = str(config.task).replace("-", "_")
    if name not in TASK_NAMES:
        raise ConfigError(f"config key 'task': unknown CFL task {config.task!r}; "
                          f"expected one of {', '.join(TASK_NAMES)}")
    return name


def _model_name(config) -> str:
    name = str(config.model).replace("+", "_").replace("-", "_")
    if name not in MODEL_NAMES:
        raise ConfigError(f"config key 'model': unknown model {config.model!r}; "
                          f"expected one of {', '.join(MODEL_NAMES)}")
    return name


def check_config(config) -> tuple[str, str]:
    """(task, model) normalised; raises `ConfigError` naming the key for anything the trainer cannot use."""
    task, model = _task_name(config), _model_name(config)

    def integer(key: str, value, minimum: int = 1):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"config key {key!r} must be an integer >= {minimum}, got {value!r}")

    def number(key: str, value, *, positive: bool = True):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and not value > 0):
            raise ConfigError(f"config key {key!r} must be a number{' > 0' if positive else ''}, got {value!r}")

    d, t, e = config.data, config.training, config.evaluation
    integer("data.train_size", d.train_size)
    integer("data.valid_size", d.valid_size)
    integer("data.test_per_length", d.test_per_length)
    integer("data.length_bucket", d.length_bucket)
    if d.seed is not None:
        integer("data.seed", d.seed, 0)
    integer("training.epochs", t.epochs)
    integer("training.batch_size", t.batch_size)
    integer("training.lr_patience", t.lr_patience)
    integer("training.early_stopping_patience", t.early_stopping_patience)
    integer("training.num_trials", t.num_trials)
    integer("training.seed", t.seed, 0)
    integer("evaluation.batch_size", e.batch_size)
    integer("evaluation.bin_width", e.bin_width)
    integer("logging.interval_steps", config.logging.interval_steps)
    number("training.lr_decay", t.lr_decay)
    if t.clip_grad_norm is not None:
        number("training.clip_grad_norm", t.clip_grad_norm, positive=False)
    if t.learning_rate is not None:
        number("training.learning_rate", t.learning_rate)
    else:
        lr_range = tuple(t.learning_rate_range)
        if len(lr_range) != 2 or not 0 < lr_range[0] <= lr_range[1]:
            raise ConfigError(f"config key 'training.learning_rate_range' must be (low, high) with "
                              f"0 < low <= high, got {t.learning_rate_range!r}")
    selected_test_lengths(config, cfl_task(task))  # checks data.test_lengths
    resolve_model_config(config, cfl_task(task).vocabulary.size)  # checks architecture.*
    return task, model


def resolve_model_config(config, vocab_size: int) -> StackLMConfig:
    """The paper's `StackLMConfig` for (task, model), with every non-None `architecture.*` key applied."""
    task, model = _task_name(config), _model_name(config)
    overrides = {k: config.architecture[k] for k in _ARCHITECTURE_KEYS
                 if k in config.architecture and config.architecture[k] is not None}
    try:
        return stack_cfl_config(task, MODEL_NAMES[model], vocab_size, **overrides)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config section 'architecture' ({task}, {model}): {e}") from e


def selected_test_lengths(config, task: CFLTask) -> list[int]:
    """The test lengths to score: `data.test_lengths` (checked against the task's valid lengths), or all."""
    spec = SPLITS["test"]
    valid = task.valid_lengths(spec.min_length, spec.max_length)
    wanted = config.data.test_lengths
    if wanted is None:
        return valid
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        wanted = [wanted]
    if not isinstance(wanted, (list, tuple)) or not wanted or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in wanted):
        raise ConfigError(f"config key 'data.test_lengths' must be None or a list of lengths, got {wanted!r}")
    bad = sorted(set(wanted) - set(valid))
    if bad:
        shown = ", ".join(map(str, valid[:8])) + (", ..." if len(valid) > 8 else "")
        raise ConfigError(f"config key 'data.test_lengths': {bad} are not lengths of {task.name} test strings "
                          f"(valid lengths in {spec.min_length}–{spec.max_length}: {shown})")
    return sorted(set(wanted))


def count_parameters(model_cfg: StackLMConfig) -> int:
    model = nnx.eval_shape(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(0)))
    return int(sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param))))


def describe_cfl(config) -> dict[str, Any]:
    """What `tgjax info` prints for a CFL config: the model, its parameter count, the vocabulary size."""
    task, model = check_config(config)
    vocab_size = cfl_task(task).vocabulary.size
    model_cfg = resolve_model_config(config, vocab_size)
    return {"task": task, "model_name": model, "num_parameters": count_parameters(model_cfg),
            "vocab_size": vocab_size, "vocab_source": f"the {task} task's symbols + PAD, BOS, EOS",
            "model": dataclasses.asdict(model_cfg)}


# -----------------------------------------------------------------------------
# Batches.


def _bucketed(width: int, bucket: int) -> int:
    return -(-width // bucket) * bucket


def make_batches(task: CFLTask, strings: Sequence[Sequence[str]], batch_size: int, *, length_bucket: int = 1,
                 same_length: bool = True) -> list[dict[str, np.ndarray]]:
    """Fixed-shape batches of `batch_size` rows (missing rows all padding, weight 0).

    same_length=True (training): each batch holds strings of one length, in
    their order in `strings` (the splits come in groups of 10 of one length).
    same_length=False (scoring): strings are grouped by padded width, so a
    batch may mix lengths. The time axis (length + 1 for BOS / EOS) is padded
    up to a multiple of `length_bucket`. Each batch has `inputs`, `targets`,
    `weights` [batch_size, T] and `index` [batch_size] (the string's position
    in `strings`, −1 for padding rows).
    """
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(strings):
        key = len(s) if same_length else _bucketed(len(s) + 1, length_bucket)
        groups.setdefault(key, []).append(i)
    order = sorted(groups, key=lambda k: groups[k][0]) if same_length else sorted(groups)
    batches = []
    for key in order:
        members = groups[key]
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            width = _bucketed(max(len(strings[i]) for i in chunk) + 1, length_bucket)
            enc = task.encode([strings[i] for i in chunk], pad_to=width)
            pad = batch_size - len(chunk)
            batch = {name: np.pad(enc[name], ((0, pad), (0, 0))) for name in ("inputs", "targets", "weights")}
            batch["inputs"][len(chunk):, 0] = task.vocabulary.bos_id
            batch["index"] = np.array(chunk + [-1] * pad, dtype=np.int64)
            batches.append(batch)
    return batches


class ShuffledBatches:
    """Fixed batches in a fresh order every epoch, resumable: the data iterator of a trial.

    Epoch e's order is the e-th permutation drawn from
    `SeedSequence(seed, spawn_key=(3,))`. `get_state()` is the position
    {"epoch" (0-based), "step" (batches of that epoch already given)}; an
    iterator made with that position replays the earlier epochs' draws and
    goes on with the same batches as one that never stopped.
    """

    def __init__(self, batches: list[dict[str, np.ndarray]], seed: int, position: dict[str, int] | None = None):
        self.batches = batches
        self._rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(3,)))
        self.epoch, self.step = (int(position["epoch"]), int(position["step"])) if position else (0, 0)
        for _ in range(self.epoch):  # the draws of the epochs already done
            self._rng.permutation(len(batches))
        self._order = self._rng.permutation(len(batches))

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.step == len(self.batches):
            self.epoch, self.step = self.epoch + 1, 0
            self._order = self._rng.permutation(len(self.batches))
        batch = self.batches[self._order[self.step]]
        self.step += 1
        return batch

    def get_state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step}


# -----------------------------------------------------------------------------
# Steps.


@dataclasses.dataclass
class _Steps:
    train: Any  # (params, opt_state, rest, inputs, targets, weights, lr, key) -> (params, opt_state, metrics)
    score: Any  # (params, rest, inputs, targets, weights) -> [B] log-probabilities of the rows


@functools.lru_cache(maxsize=8)
def _make_steps(model_cfg: StackLMConfig, clip_grad_norm: float | None, b1: float, b2: float,
                eps: float) -> tuple[_Steps, optax.GradientTransformation]:
    """The jitted steps and the optimiser (cached: the trials of a run share their compiled programs)."""
    tx = optax.chain(optax.clip_by_global_norm(clip_grad_norm) if clip_grad_norm else optax.identity(),
                     optax.scale_by_adam(b1=b1, b2=b2, eps=eps))
    template = nnx.eval_shape(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0)))
    train_def, _, _ = nnx.split(template, nnx.Param, ...)
    template.eval()
    eval_def, _, _ = nnx.split(template, nnx.Param, ...)

    def token_log_probs(logits, targets):
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]

    def train_step(params, opt_state, rest, inputs, targets, weights, lr, key):
        def loss_fn(p):
            model = nnx.merge(train_def, p, jax.tree.map(lambda x: x, rest))
            nnx.reseed(model, dropout=key)
            token_lp = token_log_probs(model(inputs), targets)
            nll = -jnp.where(weights > 0, token_lp, 0.0).sum()
            rows = jnp.maximum(jnp.sum(weights.sum(-1) > 0), 1)
            return nll / rows, nll  # summed over time, mean over the batch's strings

        (loss, nll), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, updates))
        metrics = {"loss": loss, "sum_nll": nll, "num_symbols": weights.sum(), "grad_norm": optax.tree.norm(grads)}
        return params, opt_state, metrics

    def score_step(params, rest, inputs, targets, weights):
        model = nnx.merge(eval_def, params, rest)
        return jnp.where(weights > 0, token_log_probs(model(inputs), targets), 0.0).sum(-1)

    return _Steps(jax.jit(train_step, donate_argnums=(0, 1)), jax.jit(score_step)), tx


def make_steps(model_cfg: StackLMConfig, training) -> tuple[_Steps, optax.GradientTransformation]:
    """Jitted `train` and `score` steps, and the optimiser: the global norm clipped to
    `training.clip_grad_norm`, then Adam's scaling (`training.adam`); the step multiplies by
    −learning rate itself, so the rate can decay without recompiling."""
    clip = training.clip_grad_norm
    adam = training.adam
    return _make_steps(model_cfg, float(clip) if clip else None, float(adam.b1), float(adam.b2), float(adam.eps))


def string_log_probs_of(steps: _Steps, params, rest, batches: list[dict[str, np.ndarray]],
                        num_strings: int) -> np.ndarray:
    """[num_strings] log p_model(w) (EOS included) from scoring batches (`make_batches(..., same_length=False)`)."""
    out = np.full(num_strings, np.nan)
    scores = [steps.score(params, rest, b["inputs"], b["targets"], b["weights"]) for b in batches]
    for b, s in zip(batches, jax.device_get(scores)):
        real = b["index"] >= 0
        out[b["index"][real]] = np.asarray(s, np.float64)[real]
    if np.isnan(out).any():
        raise RuntimeError(f"{int(np.isnan(out).sum())} strings were not scored")
    return out


# -----------------------------------------------------------------------------
# Results.


def _difference_dict(d: CrossEntropyDifference, strings: Sequence[Sequence[str]]) -> dict[str, Any]:
    def one(b, lo=None, hi=None):
        return {"cross_entropy_difference": b.difference, "model_cross_entropy": b.model_cross_entropy,
                "true_cross_entropy": b.true_cross_entropy, "num_strings": b.num_strings,
                "num_symbols": b.num_symbols, "min_length": b.min_length if lo is None else lo,
                "max_length": b.max_length if hi is None else hi}

    lengths = [len(s) for s in strings]
    return {**one(d.overall, min(lengths), max(lengths)), "bins": {str(start): one(b) for start, b in d.bins.items()}}


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
    stopped_early: bool
    num_parameters: int
    valid_history: list[float]  # validation Δ after each epoch
    valid: dict[str, Any]  # best parameters on the validation split: overall and "bins"
    test: dict[str, Any]  # ... on the test split
    seconds: float

    @property
    def best_valid_difference(self) -> float:
        return self.valid["cross_entropy_difference"]


@dataclasses.dataclass
class CFLResult:
    """What `train_cfl` did: the trials, and the best one by validation Δ."""

    workdir: Path
    task: str
    model: str
    trials: list[TrialResult]
    best: TrialResult
    seconds: float


def plot_results(path: str | Path, *, title: str, valid_history: dict[str, list[float]],
                 test_bins: dict[int, float], valid_bins: dict[int, float] | None = None,
                 max_train_length: int = MAX_TRAIN_LENGTH) -> None:
    """The paper's Fig. 2 for one model: validation Δ by epoch (left) and test Δ by length (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, history in valid_history.items():
        left.plot(range(1, len(history) + 1), history, marker="." if len(history) < 30 else None, label=label)
    left.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    left.set_xlabel("epoch")
    left.set_ylabel("validation cross-entropy diff. (nats)")
    if len(valid_history) > 1:
        left.legend(fontsize="small")
    lengths = sorted(test_bins)
    right.plot(lengths, [test_bins[n] for n in lengths], marker=".", label="test")
    if valid_bins:
        v = sorted(valid_bins)
        right.plot(v, [valid_bins[n] for n in v], marker=".", alpha=0.6, label="validation")
    right.axvline(max_train_length, linestyle="--", color="gray", linewidth=1)
    right.axhline(0, color="black", linewidth=0.5)
    right.set_xlabel("length")
    right.set_ylabel("cross-entropy diff. (nats)")
    right.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
    plt.close(fig)


def _save_params(path: Path, params) -> None:
    flat = {"/".join(str(getattr(k, "key", k)) for k in key_path): np.asarray(v)
            for key_path, v in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))[0]}
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **flat)
    tmp.replace(path)


def load_model(workdir: str | Path) -> tuple[StackTransformerLM, CFLTask]:
    """The best model of a finished run (`results.json` + `best_params.npz` of the best trial), in eval mode."""
    workdir = Path(workdir)
    results = json.loads((workdir / "results.json").read_text())
    model_cfg = StackLMConfig(**results["model_config"])
    model = StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    pure = nnx.to_pure_dict(params)
    with np.load(workdir / "best_params.npz") as saved:
        leaves = []
        for key_path, v in jax.tree_util.tree_flatten_with_path(pure)[0]:
            name = "/".join(str(getattr(k, "key", k)) for k in key_path)
            leaves.append(jnp.asarray(saved[name], v.dtype))
    nnx.replace_by_pure_dict(params, jax.tree.unflatten(jax.tree.structure(pure), leaves))
    model = nnx.merge(graphdef, params, rest)
    model.eval()
    return model, cfl_task(results["task"])


# -----------------------------------------------------------------------------
# Training.


class _Reporter:
    def __init__(self, stream: TextIO | None, quiet: bool):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.progress: Progress | None = None

    def say(self, text: str) -> None:
        if self.quiet:
            return
        if self.progress is not None:
            self.progress.message(text)
        else:
            print(text, file=self.stream, flush=True)


class _Window:
    """The steps since the last train record: their metrics (fetched from the device only when logged) and time."""

    def __init__(self):
        self.metrics: list[dict] = []
        self.tokens = 0
        self.start = time.perf_counter()

    def add(self, metrics: dict, tokens: int) -> None:
        self.metrics.append(metrics)
        self.tokens += tokens

    def record(self, step: int, epoch: int, lr: float) -> dict[str, Any]:
        metrics = jax.device_get(self.metrics)
        nll = sum(float(m["sum_nll"]) for m in metrics)
        symbols = sum(float(m["num_symbols"]) for m in metrics)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return {"split": "train", "step": step, "epoch": epoch, "loss": nll / max(symbols, 1.0),
                "learning_rate": lr, "steps_per_second": len(metrics) / elapsed,
                "tokens_per_second": self.tokens / elapsed, "grad_norm": float(metrics[-1]["grad_norm"])}


def _initial_learning_rate(training, seed: int) -> float:
    if training.learning_rate is not None:
        return float(training.learning_rate)
    low, high = (float(x) for x in training.learning_rate_range)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def _run_trial(config, task: CFLTask, model_name: str, workdir: Path, seed: int, test_strings, test_batches,
               reporter: _Reporter, label: str) -> TrialResult:
    started = time.perf_counter()
    workdir.mkdir(parents=True, exist_ok=True)
    t, d, e = config.training, config.data, config.evaluation
    model_cfg = resolve_model_config(config, task.vocabulary.size)
    num_parameters = count_parameters(model_cfg)
    data_seed = seed if d.seed is None else int(d.seed) + (seed - int(t.seed))
    lr = initial_lr = _initial_learning_rate(t, seed)

    reporter.say(f"{label}sampling {d.train_size} training and {d.valid_size} validation strings of {task.name} "
                 f"(seed {data_seed})")
    train_strings = task.sample_split("train", seed=data_seed, size=d.train_size)
    valid_strings = task.sample_split("valid", seed=data_seed, size=d.valid_size)
    train_batches = make_batches(task, train_strings, t.batch_size, length_bucket=d.length_bucket)
    valid_batches = make_batches(task, valid_strings, e.batch_size, length_bucket=d.length_bucket, same_length=False)
    reporter.say(f"{label}computing the true probabilities of the validation strings (inside algorithm)")
    task.log_probs_true(valid_strings, "valid")  # cached on the task: every epoch's Δ is then cheap

    steps, tx = make_steps(model_cfg, t)
    param_key, dropout_key = jax.random.split(jax.random.key(seed))
    model = StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=param_key, dropout=0))
    _, params, rest = nnx.split(model, nnx.Param, ...)
    del model
    opt_state = tx.init(params)
    reporter.say(f"{label}{task.display_name} {_DISPLAY[model_name]}: {num_parameters:,} parameters "
                 f"(d_model {model_cfg.d_model}, {model_cfg.num_layers} layers, stack {model_cfg.stack}"
                 + (f", m {model_cfg.stack_embedding_size}" if model_cfg.stack != "none" else "")
                 + (f", |Q| {model_cfg.num_states}, |Γ| {model_cfg.stack_alphabet_size}"
                    if model_cfg.stack == "nondeterministic" else "")
                 + f"); {len(train_batches)} batches of {t.batch_size} per epoch; learning rate {lr:.3g}"
                 + (" (log-uniform draw)" if t.learning_rate is None else ""))

    writer = MetricsWriter(workdir, start_step=0, tensorboard=config.logging.tensorboard)
    total_steps = t.epochs * len(train_batches)
    progress = Progress(total_steps, 0, stream=reporter.stream, enabled=not reporter.quiet)
    reporter.progress = progress
    batches = ShuffledBatches(train_batches, seed)
    best = {"difference": math.inf, "epoch": 0, "step": 0, "params": None}
    history: list[float] = []
    plateau = Plateau(t.lr_patience, t.early_stopping_patience)
    step = 0
    stopped_early = False
    window = _Window()
    try:
        for epoch in range(1, t.epochs + 1):
            for _ in range(len(train_batches)):
                batch = next(batches)
                step += 1
                key = jax.random.fold_in(dropout_key, step)
                params, opt_state, metrics = steps.train(params, opt_state, rest, batch["inputs"], batch["targets"],
                                                         batch["weights"], jnp.float32(lr), key)
                window.add(metrics, int(batch["weights"].sum()))
                if step % config.logging.interval_steps == 0 or step == total_steps:
                    record = window.record(step, epoch, lr)
                    if not math.isfinite(record["loss"]):
                        raise FloatingPointError(f"{label}training loss is {record['loss']} at step {step} "
                                                 f"(epoch {epoch})")
                    writer.write(record)
                    progress.update(step, loss=record["loss"], learning_rate=lr,
                                    steps_per_second=record["steps_per_second"],
                                    tokens_per_second=record["tokens_per_second"])
                    window = _Window()
            paused = time.perf_counter()
            model_lp = string_log_probs_of(steps, params, rest, valid_batches, len(valid_strings))
            valid = cross_entropy_difference(model_lp, valid_strings, task, "valid")
            difference = valid.difference
            if not math.isfinite(difference):
                raise FloatingPointError(f"{label}validation cross-entropy is {valid.overall.model_cross_entropy} "
                                         f"after epoch {epoch}")
            history.append(difference)
            improved, decay, stop = plateau.update(difference)
            if improved:
                best = {"difference": difference, "epoch": epoch, "step": step,
                        "params": jax.tree.map(lambda x: np.array(x, copy=True), params)}  # a copy: params are donated
                _save_params(workdir / "best_params.npz", best["params"])
            writer.write({"split": "valid", "step": step, "epoch": epoch, "cross_entropy_difference": difference,
                          "cross_entropy": valid.overall.model_cross_entropy,
                          "true_cross_entropy": valid.overall.true_cross_entropy, "learning_rate": lr,
                          "best": improved})
            reporter.say(f"{label}epoch {epoch}: validation cross-entropy difference {difference:.4f} "
                         f"(model {valid.overall.model_cross_entropy:.4f}, true "
                         f"{valid.overall.true_cross_entropy:.4f} nats/symbol); best {best['difference']:.4f} "
                         f"at epoch {best['epoch']}")
            if stop:
                stopped_early = epoch < t.epochs
                reporter.say(f"{label}no improvement for {plateau.since_best} epochs: stopping early")
                break
            if decay:
                lr *= float(t.lr_decay)
                reporter.say(f"{label}no improvement for {t.lr_patience} epochs: learning rate -> {lr:.3g}")
            window.start += time.perf_counter() - paused  # validation does not count towards steps/s
        progress.close()
        reporter.progress = None

        # The best epoch's parameters on validation (per bin) and test.
        params = jax.tree.map(jnp.asarray, best["params"])
        bins_kw = dict(bin_width=e.bin_width, bins_condition_on_length=e.bins_condition_on_length)
        valid = cross_entropy_difference(string_log_probs_of(steps, params, rest, valid_batches, len(valid_strings)),
                                         valid_strings, task, "valid", **bins_kw)
        reporter.say(f"{label}computing the true probabilities of {len(test_strings)} test strings")
        test = cross_entropy_difference(string_log_probs_of(steps, params, rest, test_batches, len(test_strings)),
                                        test_strings, task, "test", **bins_kw)
        for start, b in test.bins.items():
            writer.write({"split": "test_by_length", "step": start, "cross_entropy_difference": b.difference,
                          "cross_entropy": b.model_cross_entropy, "true_cross_entropy": b.true_cross_entropy})
        writer.write({"split": "test", "step": best["step"], "epoch": best["epoch"],
                      "cross_entropy_difference": test.difference,
                      "cross_entropy": test.overall.model_cross_entropy})
    finally:
        progress.close()
        reporter.progress = None
        writer.close()

    result = TrialResult(workdir=workdir, seed=seed, learning_rate=initial_lr, final_learning_rate=lr,
                         epochs_run=len(history), best_epoch=best["epoch"], best_step=best["step"],
                         stopped_early=stopped_early, num_parameters=num_parameters, valid_history=history,
                         valid=_difference_dict(valid, valid_strings), test=_difference_dict(test, test_strings),
                         seconds=time.perf_counter() - started)
    _write_results(workdir / "results.json", config, task, model_name, model_cfg, result)
    plot_results(workdir / "cross_entropy_difference.png",
                 title=f"{task.display_name}, {_DISPLAY[model_name]} (lr {initial_lr:.2g}, best epoch {best['epoch']})",
                 valid_history={"validation": history}, test_bins=test.per_bin(), valid_bins=valid.per_bin())
    reporter.say(f"{label}best epoch {best['epoch']} of {len(history)}: cross-entropy difference validation "
                 f"{valid.difference:.4f}, test {test.difference:.4f} nats/symbol "
                 f"({format_duration(result.seconds)})")
    return result


def _trial_summary(r: TrialResult) -> dict[str, Any]:
    return {"workdir": str(r.workdir), "seed": r.seed, "learning_rate": r.learning_rate,
            "final_learning_rate": r.final_learning_rate, "epochs_run": r.epochs_run, "best_epoch": r.best_epoch,
            "best_step": r.best_step, "stopped_early": r.stopped_early, "seconds": r.seconds,
            "valid_cross_entropy_difference": r.valid["cross_entropy_difference"],
            "test_cross_entropy_difference": r.test["cross_entropy_difference"]}


def _write_results(path: Path, config, task: CFLTask, model_name: str, model_cfg: StackLMConfig, best: TrialResult,
                   trials: list[TrialResult] | None = None) -> None:
    results = {
        "task": task.name, "task_display_name": task.display_name, "model": model_name,
        "num_parameters": best.num_parameters, "model_config": dataclasses.asdict(model_cfg),
        **_trial_summary(best),
        "bins_condition_on_length": bool(config.evaluation.bins_condition_on_length),
        "bin_width": int(config.evaluation.bin_width),
        "max_train_length": MAX_TRAIN_LENGTH,
        "valid_history": best.valid_history,
        "valid": best.valid,
        "test": best.test,
        "config": to_json_dict(config),
    }
    if trials is not None:
        results["best_trial_workdir"] = str(best.workdir)
        results["trials"] = [_trial_summary(r) for r in trials]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(path)


def train_cfl(config, workdir: str | Path, *, stream: TextIO | None = None, quiet: bool = False) -> CFLResult:
    """Trains `config.model` on `config.task` as `configs/stack_cfl.py` describes; see the module docstring.

    A fresh run every time (no resumption): an existing metrics.jsonl in the
    workdir is replaced.

    Raises:
      ConfigError: an unknown task, model or key value (named, with the choices).
      FloatingPointError: the loss became NaN or infinite.
    """
    started = time.perf_counter()
    task_name, model_name = check_config(config)
    task = cfl_task(task_name)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    reporter = _Reporter(stream, quiet)
    t, d, e = config.training, config.data, config.evaluation
    (workdir / "config.json").write_text(json.dumps(to_json_dict(config), indent=2))

    lengths = set(selected_test_lengths(config, task))
    test_strings = [s for s in task.sample_split("test", size=d.test_per_length) if len(s) in lengths]
    test_batches = make_batches(task, test_strings, e.batch_size, length_bucket=d.length_bucket, same_length=False)
    reporter.say(f"{task.display_name} ({task.name}), model {model_name}: test set of {len(test_strings)} strings, "
                 f"{d.test_per_length} per length for {len(lengths)} lengths ({min(lengths)}–{max(lengths)})")

    trials = []
    for k in range(t.num_trials):
        trial_dir = workdir if t.num_trials == 1 else workdir / f"trial_{k}"
        label = "" if t.num_trials == 1 else f"[trial {k + 1}/{t.num_trials}] "
        trials.append(_run_trial(config, task, model_name, trial_dir, int(t.seed) + k, test_strings, test_batches,
                                 reporter, label))
    best = min(trials, key=lambda r: r.best_valid_difference)
    if t.num_trials > 1:
        model_cfg = resolve_model_config(config, task.vocabulary.size)
        _write_results(workdir / "results.json", config, task, model_name, model_cfg, best, trials)
        shutil.copyfile(best.workdir / "best_params.npz", workdir / "best_params.npz")
        plot_results(workdir / "cross_entropy_difference.png",
                     title=f"{task.display_name}, {_DISPLAY[model_name]}: best of {len(trials)} by validation "
                           f"(trial {trials.index(best)}, lr {best.learning_rate:.2g})",
                     valid_history={f"trial {i}" + (" (best)" if r is best else ""): r.valid_history
                                    for i, r in enumerate(trials)},
                     test_bins={int(k): v["cross_entropy_difference"] for k, v in best.test["bins"].items()},
                     valid_bins={int(k): v["cross_entropy_difference"] for k, v in best.valid["bins"].items()})
        reporter.say(f"best of {len(trials)} trials by validation: trial {trials.index(best)} "
                     f"(lr {best.learning_rate:.3g}): validation {best.best_valid_difference:.4f}, "
                     f"test {best.test['cross_entropy_difference']:.4f}")
    result = CFLResult(workdir, task_name, model_name, trials, best, time.perf_counter() - started)
    reporter.say(f"done in {format_duration(result.seconds)}: {workdir / 'results.json'}, "
                 f"{workdir / 'cross_entropy_difference.png'}")
    return result
