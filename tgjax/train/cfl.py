"""The CFL experiments' pieces (DuSell & Chiang, ICLR 2024, §6, Appendix D): config, batches, steps, results.

What one trial needs, used by the CFL task (`tgjax.train.tasks.cfl`, one
trial on the shared trainer) and the trials driver
(`tgjax.train.cfl_trials.train_cfl`, what `tgjax train --config
configs/stack_cfl.py` runs):

  check_config, resolve_model_config, selected_test_lengths, describe_cfl
                   the config's checks (ConfigError naming the key), the paper's model for (task, model)
  make_batches, shuffled_batches
                   minibatches of strings of one length, made once; their order reshuffled every epoch
                   (`BatchOrders`), a grain dataset per epoch resumable from a position {"epoch", "step"}
  CFLState, make_steps, init_model, initial_learning_rate, string_log_probs_of
                   the train state, the jitted train and score steps (Adam after clipping; the learning
                   rate is an argument), a trial's initialisation and learning rate, scoring
  difference_dict, plot_results, read_params, load_model
                   results.json's numbers, the paper's Fig. 2, a checkpoint's parameters read back, the
                   best model of a finished run

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from ml_collections.config_dict import placeholder

from tgjax.data.batching import EpochBatches, local_rows, round_up
from tgjax.data.cfl import SPLITS, TASK_NAMES, CFLTask, cfl_task
from tgjax.data.cfl_metric import CrossEntropyDifference
from tgjax.extras import require_extra
from tgjax.models.parts import count_parameters
from tgjax.models.stack_lm import StackLMConfig, StackTransformerLM, stack_cfl_config
from tgjax.ops.log_probs import token_log_probs
from tgjax.train.config import (
    ConfigError,
    check_int,
    check_positive_int,
    check_range,
    config_value,
    family_config,
)
from tgjax.train.model_info import ModelInfo
from tgjax.train.params_state import ParamsState
from tgjax.train.schedules import plateau_optimizer
from tgjax.train.step import make_train_step
from tgjax.workdir import is_url, workdir_path

__all__ = [
    "CFLState",
    "BatchOrders",
    "MODEL_NAMES",
    "check_config",
    "describe_cfl",
    "difference_dict",
    "init_model",
    "initial_learning_rate",
    "load_model",
    "make_batches",
    "make_steps",
    "plot_results",
    "read_params",
    "resolve_model_config",
    "selected_test_lengths",
    "shuffled_batches",
    "string_log_probs_of",
    "write_json",
]

# Config names -> `tgjax.models.stack_lm` names.
MODEL_NAMES = {"tf": "tf", "tf_sup": "tf+sup", "tf_nd": "tf+nd"}
DISPLAY_NAMES = {"tf": "Tf", "tf_sup": "Tf+Sup", "tf_nd": "Tf+Nd"}
_ARCHITECTURE_KEYS = ("num_layers", "d_model", "num_heads", "feedforward_size", "dropout_rate",
                      "stack_embedding_size", "num_states", "stack_alphabet_size", "pushed_vectors", "init",
                      "nd_num_blocks")
MAX_TRAIN_LENGTH = SPLITS["train"].max_length


# -----------------------------------------------------------------------------
# The config.


def default_config() -> ml_collections.ConfigDict:
    """Every key a CFL trial reads: the paper's set-up on marked reversal with Tf (configs/stack_cfl.py).

    Checkpoints are saved after every epoch (`checkpointing.interval_steps` None), and the best epoch's is
    kept: the trial's result is read back from it.
    """
    return family_config(dict(
        trainer="cfl",  # `tgjax train` runs the trials of tgjax.train.cfl_trials, each on the shared trainer
        task="marked_reversal",  # one of tgjax.data.cfl.TASK_NAMES
        model="tf",  # one of MODEL_NAMES
        # None: the paper's value for (task, model). Keys as tgjax.models.stack_lm.StackLMConfig.
        architecture=dict(
            num_layers=placeholder(int),
            d_model=placeholder(int),
            num_heads=placeholder(int),
            feedforward_size=placeholder(int),
            dropout_rate=placeholder(float),
            stack_embedding_size=placeholder(int),  # m
            num_states=placeholder(int),  # |Q| (tf_nd)
            stack_alphabet_size=placeholder(int),  # |Γ| (tf_nd)
            pushed_vectors=placeholder(str),  # None/"released" (the authors' code: raw W_v x) or "paper" (σ, eq. 17)
            init=placeholder(str),  # None/"released" (U(±0.1), Appendix D.2 and the release) or "xavier"
            # tf_nd: static blocks of the dVPDA span scan (None: the kernel's default, up to 8 by length).
            # Same numbers either way; 1-2 compile several times faster and suit a GPU.
            nd_num_blocks=placeholder(int),
        ),
        data=dict(
            train_size=10_000,
            valid_size=1_000,
            test_per_length=100,
            test_lengths=None,  # None: every valid length 40–100; else e.g. (40, 60, 80, 100)
            seed=placeholder(int),  # train/valid sampling seed; None: training.seed (+ trial)
            # Pad each batch's time axis up to a multiple of this (1 = exact lengths, as the paper).
            # Models are causal, so padding changes no number; it bounds recompilation to a few shapes.
            length_bucket=8,
        ),
        training=dict(
            epochs=200,
            # A wall-clock budget per trial (seconds of training, compiles and validation included; None: none):
            # the trial ends after the first epoch that finishes past it, as an early stop. Not the paper's
            # recipe: for reduced runs that must fit a time slot (benchmarks/cfl_grid.py).
            max_train_seconds=placeholder(float),
            batch_size=10,
            learning_rate=placeholder(float),  # None: log-uniform from learning_rate_range (the paper's random search)
            learning_rate_range=(5e-4, 1e-2),
            clip_grad_norm=5.0,
            lr_decay=0.9,
            lr_patience=5,  # epochs without validation improvement before lr *= lr_decay
            # An improvement must lower the validation cross-entropy by this fraction of the best one (0: any
            # improvement, the paper's text; the release: 1e-4 with lr_patience=6).
            lr_threshold=0.0,
            early_stopping_patience=10,  # epochs without improvement before stopping
            num_trials=1,  # the paper: 10, best by validation
            seed=1,
            adam=dict(b1=0.9, b2=0.999, eps=1e-8),
        ),
        evaluation=dict(
            batch_size=50,  # strings per forward pass (one length per batch)
            bin_width=1,  # lengths per test bin (1: one point per length, as the paper's plots)
            # Per-bin true probabilities conditioned on the length (the authors' test script, the
            # paper's plots); False keeps the split's 1/|L| length term in every bin.
            bins_condition_on_length=True,
        ),
    ), checkpointing=dict(interval_steps=placeholder(int)), logging=dict(interval_steps=50))  # None: every epoch


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
    t = config.training
    for key in ("data.train_size", "data.valid_size", "data.test_per_length", "data.length_bucket",
                "training.epochs", "training.batch_size", "training.lr_patience", "training.early_stopping_patience",
                "training.num_trials", "evaluation.batch_size", "evaluation.bin_width", "logging.interval_steps",
                "checkpointing.max_to_keep", "checkpointing.keep_best"):  # keep_best: the best epoch is read back
        check_positive_int(config, key)
    check_int(config, "training.seed", minimum=0)
    for key, minimum in (("data.seed", 0), ("checkpointing.interval_steps", 1)):
        if config_value(config, key) is not None:
            check_int(config, key, minimum=minimum)
    for key, low_open in (("training.max_train_seconds", True), ("training.clip_grad_norm", False),
                          ("training.learning_rate", True)):
        if config_value(config, key) is not None:
            check_range(config, key, low=0, low_open=low_open)
    check_range(config, "training.lr_decay", low=0, low_open=True)
    check_range(config, "training.lr_threshold", low=0)
    if t.learning_rate is None:
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


def count_stack_lm_parameters(model_cfg: StackLMConfig) -> int:
    """The parameters of a stack LM of this configuration (built abstractly: nothing allocated)."""
    return count_parameters(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(0)))


def describe_cfl(config) -> ModelInfo:
    """What `tgjax info` prints for a CFL config: the model, its parameter count, the vocabulary size."""
    task, model = check_config(config)
    vocab_size = cfl_task(task).vocabulary.size
    model_cfg = resolve_model_config(config, vocab_size)
    return ModelInfo(model, vocab_size, f"the {task} task's symbols + PAD, BOS, EOS", dataclasses.asdict(model_cfg),
                     lambda rngs: StackTransformerLM(model_cfg, rngs=rngs), extras={"task": task})


# -----------------------------------------------------------------------------
# Batches.


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
        key = len(s) if same_length else round_up(len(s) + 1, length_bucket)
        groups.setdefault(key, []).append(i)
    order = sorted(groups, key=lambda k: groups[k][0]) if same_length else sorted(groups)
    batches = []
    for key in order:
        members = groups[key]
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            width = round_up(max(len(strings[i]) for i in chunk) + 1, length_bucket)
            enc = task.encode([strings[i] for i in chunk], pad_to=width)
            pad = batch_size - len(chunk)
            batch = {name: np.pad(enc[name], ((0, pad), (0, 0))) for name in ("inputs", "targets", "weights")}
            batch["inputs"][len(chunk):, 0] = task.vocabulary.bos_id
            batch["index"] = np.array(chunk + [-1] * pad, dtype=np.int64)
            batches.append(batch)
    return batches


class BatchOrders:
    """The order of `num_batches` fixed batches in each epoch of a trial: epoch e's is the e-th permutation
    drawn from one generator seeded by `SeedSequence(seed, spawn_key=(3,))`, the draws following each other
    epoch after epoch. `orders(e)` draws on from the last epoch asked for (an earlier epoch draws again from
    the start), so walking the epochs in turn costs one permutation each."""

    def __init__(self, num_batches: int, seed: int):
        self.num_batches, self.seed = num_batches, seed
        self._epoch = -1  # the epoch of `_order`, the last permutation drawn from `_rng`

    def __call__(self, epoch: int) -> np.ndarray:
        if epoch < self._epoch or self._epoch < 0:
            self._rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(3,)))
            self._epoch = -1
        while self._epoch < epoch:
            self._order = self._rng.permutation(self.num_batches)
            self._epoch += 1
        return self._order


def shuffled_batches(batches: list[dict[str, np.ndarray]], seed: int, position: dict[str, int] | None = None, *,
                     fields: Sequence[str] | None = None, process_index: int = 0,
                     process_count: int = 1) -> EpochBatches:
    """Fixed batches in a fresh order every epoch (`BatchOrders`), resumable: the data iterator of a trial.

    Epoch e is a grain dataset over its order, each batch cut to `fields` (None: all) and this process's rows.
    `get_state()` is the position {"epoch" (0-based), "step" (batches of that epoch already given)}; an iterator
    made with that position goes on with the same batches as one that never stopped.
    """
    orders = BatchOrders(len(batches), seed)

    def batch(i: int) -> dict[str, np.ndarray]:
        chosen = batches[int(i)]
        return local_rows({name: chosen[name] for name in (fields or chosen)}, process_index, process_count)

    return EpochBatches(lambda epoch: grain.MapDataset.source(orders(epoch)).map(batch), position)


# -----------------------------------------------------------------------------
# The state and the steps.


# What a CFL train step reads and writes (checkpointed whole): the trainer's `ParamsState` (parameters as a pure
# dict, the optax state, the step count, the raw key data whose fold_in(rng, k) reseeds dropout at step k).
CFLState = ParamsState


@dataclasses.dataclass
class Steps:
    train: Any  # (state, rest, inputs, targets, weights) -> (state, metrics); `state` is donated
    score: Any  # (params, rest, inputs, targets, weights) -> [B] log-probabilities of the rows


def make_optimizer(training, learning_rate: float) -> optax.GradientTransformation:
    """The global gradient norm clipped to `training.clip_grad_norm` (None: not clipped), Adam's scaling, then the
    step at `learning_rate`, a rate the optimiser state holds (`tgjax.train.schedules.plateau_optimizer`): the
    plateau decays it there, and the compiled step is the same at every rate and in every trial."""
    clip, adam = training.clip_grad_norm, training.adam
    return _optimizer(float(clip) if clip else None, float(adam.b1), float(adam.b2), float(adam.eps), learning_rate)


def _optimizer(clip_grad_norm: float | None, b1: float, b2: float, eps: float,
               learning_rate: float) -> optax.GradientTransformation:
    direction = optax.chain(optax.clip_by_global_norm(clip_grad_norm) if clip_grad_norm else optax.identity(),
                            optax.scale_by_adam(b1=b1, b2=b2, eps=eps))
    return plateau_optimizer(direction, learning_rate)


def make_steps(model_cfg: StackLMConfig, training) -> Steps:
    """The jitted `train` and `score` steps; the train step's optimiser is `make_optimizer`'s.

    train: the loss is the cross-entropy summed over time steps, averaged over
    the batch's strings (rows with any weight); dropout's key for the step
    being taken (state.step + 1) is `fold_in(state.rng, state.step + 1)`.
    Metrics: `loss`, `sum_nll`, `num_symbols`, `grad_norm` (before clipping),
    `learning_rate`. Cached: the trials of a run (and its test) share their compiled programs.
    """
    clip, adam = training.clip_grad_norm, training.adam
    return _make_steps(model_cfg, float(clip) if clip else None, float(adam.b1), float(adam.b2), float(adam.eps))


@functools.lru_cache(maxsize=8)
def _make_steps(model_cfg: StackLMConfig, clip_grad_norm: float | None, b1: float, b2: float, eps: float) -> Steps:
    # The update reads the rate from the optimiser state (each trial's own); the one given here is never read.
    tx = _optimizer(clip_grad_norm, b1, b2, eps, learning_rate=0.0)
    template = nnx.eval_shape(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0)))
    train_def, _, _ = nnx.split(template, nnx.Param, ...)
    template.eval()
    eval_def, _, _ = nnx.split(template, nnx.Param, ...)

    def loss(model, batch, key):
        nnx.reseed(model, dropout=key)
        token_lp = token_log_probs(model(batch["inputs"]), batch["targets"])
        weights = batch["weights"]
        nll = -jnp.where(weights > 0, token_lp, 0.0).sum()
        rows = jnp.maximum(jnp.sum(weights.sum(-1) > 0), 1)
        return nll / rows, {"sum_nll": nll, "num_symbols": weights.sum()}  # summed over time, mean over strings

    one_step = make_train_step(train_def, loss, tx)  # the trainer's one step

    def train_step(state: CFLState, rest, inputs, targets, weights):
        return one_step(state, rest, {"inputs": inputs, "targets": targets, "weights": weights})

    def score_step(params, rest, inputs, targets, weights):
        model = nnx.merge(eval_def, params, rest)
        return jnp.where(weights > 0, token_log_probs(model(inputs), targets), 0.0).sum(-1)

    return Steps(jax.jit(train_step, donate_argnums=(0,)), jax.jit(score_step))


def initial_learning_rate(training, seed: int) -> float:
    """`training.learning_rate`, or the trial's log-uniform draw from `training.learning_rate_range`."""
    if training.learning_rate is not None:
        return float(training.learning_rate)
    low, high = (float(x) for x in training.learning_rate_range)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(7,)))
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def init_model(model_cfg: StackLMConfig, seed: int) -> tuple[dict, nnx.State, jax.Array]:
    """(parameters as a pure dict, the model's other variables, the dropout key) of a trial's seed."""
    param_key, dropout_key = jax.random.split(jax.random.key(seed))
    model = StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=param_key, dropout=0))
    _, params, rest = nnx.split(model, nnx.Param, ...)
    return nnx.to_pure_dict(params), rest, dropout_key


def string_log_probs_of(steps: Steps, params, rest, batches: list[dict[str, np.ndarray]],
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


def difference_dict(d: CrossEntropyDifference, strings: Sequence[Sequence[str]]) -> dict[str, Any]:
    """A `CrossEntropyDifference` as results.json writes it: overall, the lengths, and "bins"."""
    def one(b, lo=None, hi=None):
        return {"cross_entropy_difference": b.difference, "model_cross_entropy": b.model_cross_entropy,
                "true_cross_entropy": b.true_cross_entropy, "num_strings": b.num_strings,
                "num_symbols": b.num_symbols, "min_length": b.min_length if lo is None else lo,
                "max_length": b.max_length if hi is None else hi}

    lengths = [len(s) for s in strings]
    return {**one(d.overall, min(lengths), max(lengths)), "bins": {str(start): one(b) for start, b in d.bins.items()}}


def plot_results(path: str | Path, *, title: str, valid_history: dict[str, list[float]],
                 test_bins: dict[int, float], valid_bins: dict[int, float] | None = None,
                 max_train_length: int = MAX_TRAIN_LENGTH) -> None:
    """The paper's Fig. 2 for one model: validation Δ by epoch (left) and test Δ by length (right)."""
    matplotlib = require_extra("matplotlib", extra="plots", purpose="drawing")

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
    if is_url(path):  # a bucket workdir: the picture is drawn in memory and written as one object
        import io

        picture = io.BytesIO()
        fig.savefig(picture, dpi=120, format="png")
        workdir_path(path).write_bytes(picture.getvalue())
    else:
        fig.savefig(str(path), dpi=120)
    plt.close(fig)


def write_json(path: Any, value: dict[str, Any]) -> None:
    """`value` as JSON, replacing `path` whole (a crash leaves the old file or the new one); `path` is a local
    `Path` or a file of a bucket workdir (`tgjax.workdir.workdir_path`)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    tmp.replace(path)


# -----------------------------------------------------------------------------
# Reading a trained model back.


def read_params(workdir: str | Path, step: int, model_cfg: StackLMConfig) -> dict:
    """The parameters (a pure dict) of checkpoint `step` in a trial's workdir, read alone (no optimiser state).

    Read-only: no orbax `CheckpointManager` is opened on the workdir.
    """
    import orbax.checkpoint as ocp

    from tgjax.workdir import check_step

    workdir = workdir_path(workdir)
    path = workdir / "checkpoints" / str(step) / "state"
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no checkpoint step {step} in {workdir} (was the run finished?)")
    problem = check_step(workdir, step)
    if problem:
        raise ValueError(f"checkpoint step {step} in {workdir} is corrupt or incomplete: {problem}")
    abstract = nnx.eval_shape(lambda: StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0)))
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype),
                          nnx.to_pure_dict(nnx.state(abstract, nnx.Param)))
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = {"params": shapes}
    restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=sharding), target)
    restored = ocp.PyTreeCheckpointer().restore(
        path, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True))
    return restored["params"]


def load_model(workdir: str | Path) -> tuple[StackTransformerLM, CFLTask]:
    """The best model of a finished run (or of one finished trial's workdir), in eval mode, and its CFL task.

    `WORKDIR/results.json` names the best trial and its best step; the
    parameters are read from that trial's orbax checkpoint of that step
    (found under WORKDIR when the run has been moved since).
    """
    workdir = workdir_path(workdir)
    results_path = workdir / "results.json"
    if not results_path.exists():
        raise FileNotFoundError(f"{results_path}: no such file (a finished `tgjax train --config "
                                f"configs/stack_cfl.py` run writes it)")
    results = json.loads(results_path.read_text())
    facts = results.get("run", {})  # a trial's results.json keeps the model and task among its run facts
    model_cfg = StackLMConfig(**results.get("model_config", facts.get("model_config", {})))
    model = StackTransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    trial_dir = workdir_path(results.get("best_trial_workdir", results["workdir"]))
    if (workdir / trial_dir.name / "checkpoints").is_dir():  # the run's directory may have moved since
        trial_dir = workdir / trial_dir.name
    elif (workdir / "checkpoints").is_dir():  # a trial's own workdir
        trial_dir = workdir
    nnx.replace_by_pure_dict(params, read_params(trial_dir, int(results["best_step"]), model_cfg))
    model = nnx.merge(graphdef, params, rest)
    model.eval()
    return model, cfl_task(results.get("task", facts.get("task")))
