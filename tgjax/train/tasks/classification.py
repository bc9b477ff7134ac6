"""Sequence and sentence-pair classification with Ordered Memory: ListOps and logical inference
(`trainer="classification"`).

    tgjax train --config configs/om_listops.py --workdir runs/om_listops
    tgjax train --config configs/om_logic.py --workdir runs/om_logic            # length split: test 7..12 ops
    tgjax train --config configs/om_logic.py --config.data.split=B --workdir runs/om_logic_b   # systematicity B
    tgjax train --config configs/om_listops.py --config.model.encoder=lstm --workdir runs/lstm_listops

`model.encoder` ("ordered_memory", the default; "lstm"; "transformer") puts a
same-size baseline in Ordered Memory's place (`tgjax.models.sequence_encoders`):
the same embedding, heads, dropouts, data and training, its width matched to
the parameter count of the Ordered Memory this config describes
(`model.hidden_size=0`). A baseline reports accuracy only: it has no pointers,
so no trees and no parse F1. A checkpoint's meta records its classifier's
config (a baseline's names its `encoder`; Ordered Memory's names none), and a
checkpoint of one encoder is refused, in one line, by a config of another.

What it hands the trainer (`tgjax.train.task`):

* data (`dataset`): "listops": training and validation sets from the
  release's generator (`tgjax.data.listops.generate`, <= 50 tokens, disjoint
  and seeded), the shipped 10,000-line test set (`data.test_path`) read at
  the end; "logic": the original files (`data.logic_dir`), train0..6 with
  every 10th pair held out for validation (the release's protocol), tested
  per operator count 7..12 (`data.split="length"`) or on the unseen pairs of
  a systematicity split A / B / C (`data.split`), per count (0..12) and
  pooled twice: over 7..12 operators ("A/7-12", what the thesis' A / B / C
  columns aggregate, "the unseen operation lengths": 1,369 / 9,257 / 12,757
  pairs), the figure the results put beside the thesis, and over every
  length ("A/0-12": 2,472 / 17,544 / 27,232 pairs), reported apart.
  Deviation from the ListOps release, which has no validation split and
  selects on the test set: here a generated validation set selects, and the
  test set is read once, at the end.
* batches: smart batching as the release (shuffle, sort by length inside
  windows of 10 batches, shuffle the batches), each batch padded to a
  multiple of `data.length_bucket` (few shapes, few compilations); an
  epoch's order is a function of (seed, epoch), so the iterator's position
  {"epoch", "step"} is all a checkpoint needs (a grain dataset per epoch,
  walked by `tgjax.data.batching.EpochBatches`). The last, partial batch of
  an epoch is filled with empty rows of weight 0 (nothing is dropped).
  Reading and batching the examples is host code:
  `tgjax.data.classification_corpus`.
* the step: the trainer's one step (`tgjax.train.step`) on the mean
  cross-entropy over the batch's real rows, Adam with the release's L2
  weight decay (PyTorch's `weight_decay`: added to the gradient before the
  moments) after clipping, the learning rate passed in from the host so that
  the plateau schedule can change it, the dropout key drawn at the count of
  updates done before the step.
* selection: validation accuracy, higher is better; the schedule is the
  release's ReduceLROnPlateau (factor 0.5, PyTorch patience 2 = 3 validations
  without improvement here) or a constant rate (`training.schedule`).
* the end (`summary`): the best validation parameters (kept on the host when
  validation improves; read from the best checkpoint after a resume) scored
  on every test split, with the parse F1 of the trees read off the pointers
  against the file's bracketing, as corpus-level unlabelled span F1 over
  spans of >= 2 tokens, the root included (what EVALB computes with LABELED 0
  on these one-label trees; for ListOps both trees are binary over the same
  tokens, so precision = recall = F1). Logic: premise and hypothesis trees
  pooled, the parenthesis tokens removed from each predicted tree first (the
  release's `remove_bracket`; a node left with one child is that child), so
  precision and recall can differ there. Written to WORKDIR/test_results.json.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from tgjax.data import listops, logic
from tgjax.data.batching import EpochBatches, local_rows
from tgjax.data.classification_corpus import Split, eval_batches, load_splits, train_epochs
from tgjax.models.ordered_memory import OMClassifierConfig, pointer_trees, remove_leaves, tree_spans
from tgjax.models.sequence_encoders import (
    ENCODERS,
    SIZE_TOLERANCE,
    BaselineClassifierConfig,
    baseline_config,
    build_classifier,
    parameter_count,
)
from tgjax.progress import format_duration
from tgjax.train import sharding as shd
from tgjax.train.config import (
    ConfigError,
    check_choice,
    check_int,
    check_positive_int,
    check_range,
    family_config,
    to_json_dict,
)
from tgjax.train.metrics import SummingWindow
from tgjax.train.model_info import ModelInfo
from tgjax.train.params_state import ParamsStateTask, params_layout
from tgjax.train.schedules import Plateau, StepSchedule, plateau_optimizer
from tgjax.train.step import learning_rate_of, make_train_step
from tgjax.train.task import Evaluation, RunContext, Selection, read_intervals

DATASETS = ("listops", "logic")
SPLITS = ("length", "A", "B", "C")
_SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "ordered_memory"
DEFAULT_LISTOPS_TEST = str(_SHARED / "listops" / "test_d20s.tsv")
DEFAULT_LOGIC_DIR = str(_SHARED / "propositionallogic")


def default_config() -> ml_collections.ConfigDict:
    """Every key this task and the trainer read, at the ListOps release's values (configs/om_*.py set theirs)."""
    return family_config(dict(
        trainer="classification",
        dataset="listops",
        data=dict(
            seed=0,  # the generator's seed (ListOps) and the training subset's
            train_size=90_000,  # ListOps: generated training trees (<= max_train_tokens each)
            valid_size=2_000,  # ListOps: generated validation trees, disjoint from training
            max_train_tokens=listops.MAX_TRAIN_TOKENS,
            test_path=DEFAULT_LISTOPS_TEST,  # ListOps test file; "" = no test
            test_max_tokens=0,  # ListOps: 0 = every test example; n = only those <= n tokens (others counted)
            logic_dir=DEFAULT_LOGIC_DIR,
            split="length",  # logic: "length" (test 7..12) or "A" / "B" / "C"
            max_train_examples=0,  # 0 = all; n = a seeded subset of n training examples
            max_valid_examples=0,  # 0 = all; n = the first n of the validation split
            length_bucket=8,  # training batches padded to a multiple of this
        ),
        model=dict(
            embedding_size=128, slot_size=128, n_slots=21, test_n_slots=0,  # 0: n_slots
            mlp_hidden_size=0,  # the pair head's hidden size (logic: 200)
            embedding_dropout=0.1, output_dropout=0.2, attention_dropout=0.3, cell_dropout=0.1,
            release_switches=False,  # the release's q/k LayerNorms, mask floor and zero padding (configs/om_*: on)
            embedding_init_range=0.0,  # 0: N(0, 1) (PyTorch's default); r: U(-r, r)
            # "lstm" / "transformer": a same-size baseline in place of Ordered Memory, with the same embedding,
            # head, dropouts and training (tgjax.models.sequence_encoders); the keys below are the baselines'.
            encoder="ordered_memory",
            hidden_size=0,  # LSTM H / Transformer d; 0: matched to this config's Ordered Memory parameter count
            num_layers=2, num_heads=4, ffw_multiplier=4,  # LSTM layers or Transformer blocks; heads; FFN width / d
        ),
        training=dict(
            num_steps=35_000, batch_size=128, seed=1111,
            learning_rate=1e-3, b1=0.0, b2=0.999, eps=1e-9, weight_decay=1.2e-6, clip_grad_norm=1.0,
            schedule="plateau",  # "plateau" (ReduceLROnPlateau on validation accuracy) or "constant"
            lr_decay=0.5, lr_patience=3, early_stopping_patience=1_000_000,
        ),
        evaluation=dict(interval_steps=700, batch_size=128),
    ), checkpointing=dict(interval_steps=700), logging=dict(tensorboard=False))


def check_config(config) -> None:
    """The values this task reads, checked before anything starts (every key is there: the config was merged
    over `default_config()`); `ConfigError` names the key."""
    check_choice(config, "dataset", DATASETS)
    check_choice(config, "model.encoder", ENCODERS)
    check_choice(config, "data.split", SPLITS)
    for key in ("data.train_size", "data.valid_size", "data.max_train_tokens", "data.length_bucket",
                "model.embedding_size", "model.slot_size", "model.n_slots", "model.num_layers", "model.num_heads",
                "model.ffw_multiplier", "training.num_steps", "training.batch_size", "evaluation.interval_steps",
                "evaluation.batch_size", "checkpointing.interval_steps", "logging.interval_steps"):
        check_positive_int(config, key)
    for key in ("data.seed", "data.test_max_tokens", "data.max_train_examples", "data.max_valid_examples",
                "model.test_n_slots", "model.mlp_hidden_size", "model.hidden_size", "training.seed",
                "training.lr_patience", "training.early_stopping_patience"):
        check_int(config, key, minimum=0)
    for key in ("training.learning_rate", "training.eps"):
        check_range(config, key, low=0, low_open=True)
    for key in ("training.b1", "training.b2"):
        check_range(config, key, 0, 1, high_open=True)
    check_range(config, "training.lr_decay", 0, 1, low_open=True)
    check_choice(config, "training.schedule", ("plateau", "constant"))
    try:
        model_config(config)
    except ValueError as e:
        raise ConfigError(f"model settings: {e}") from e


def model_config(config) -> OMClassifierConfig | BaselineClassifierConfig:
    """The classifier's config from the `model` section and the dataset's vocabulary: Ordered Memory's, or with
    `model.encoder` "lstm" / "transformer" the baseline's, its width matched to that Ordered Memory's parameter
    count unless `model.hidden_size` sets it."""
    om = om_model_config(config)
    m = config.model
    if m.encoder == "ordered_memory":
        return om
    return baseline_config(om, m.encoder, hidden_size=m.hidden_size, num_layers=m.num_layers,
                           num_heads=m.num_heads, ffw_multiplier=m.ffw_multiplier)


def encoder_of(model_cfg: OMClassifierConfig | BaselineClassifierConfig) -> str:
    return "ordered_memory" if isinstance(model_cfg, OMClassifierConfig) else model_cfg.encoder


def om_model_config(config) -> OMClassifierConfig:
    """The Ordered Memory classifier of the `model` section (whatever `model.encoder` says: a baseline's size is
    matched to it)."""
    m = config.model
    if config.dataset == "listops":
        kind, vocab, classes, pad = "sequence", len(listops.TOKENS), listops.NUM_CLASSES, listops.PAD_ID
    else:
        kind, vocab, classes, pad = "pair", len(logic.TOKENS) + 1, len(logic.RELATIONS), logic.PAD_ID
    return OMClassifierConfig(
        kind=kind, vocab_size=vocab, num_classes=classes, pad_id=pad, embedding_size=m.embedding_size,
        slot_size=m.slot_size, n_slots=m.n_slots, test_n_slots=m.test_n_slots or None,
        mlp_hidden_size=m.mlp_hidden_size, embedding_dropout=m.embedding_dropout, output_dropout=m.output_dropout,
        attention_dropout=m.attention_dropout, cell_dropout=m.cell_dropout, release_switches=m.release_switches,
        embedding_init_range=m.embedding_init_range or None)


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: the classifier, its parameter count, its fixed vocabulary (no data read); for a
    baseline, also the Ordered Memory count it is matched to."""
    check_config(config)
    model_cfg = model_config(config)
    source = "tgjax.data.listops.TOKENS" if config.dataset == "listops" else "tgjax.data.logic.TOKENS + padding"
    info = ModelInfo(f"{encoder_of(model_cfg)}_{config.dataset}", model_cfg.vocab_size, source,
                     dataclasses.asdict(model_cfg), lambda rngs: build_classifier(model_cfg, rngs=rngs))
    if isinstance(model_cfg, BaselineClassifierConfig):
        info.note = size_note(model_cfg, info.num_parameters, parameter_count(om_model_config(config)))
    return info


def size_note(model_cfg: BaselineClassifierConfig, count: int, om_count: int) -> str:
    """One line: the baseline's size against the Ordered Memory of the same config, and that it has no trees."""
    gap = (count - om_count) / om_count
    within = "within" if abs(gap) <= SIZE_TOLERANCE else "OUTSIDE"
    return (f"same-size {model_cfg.encoder} baseline: {count:,} parameters (hidden {model_cfg.hidden_size}, "
            f"{model_cfg.num_layers} layers) against {om_count:,} for the Ordered Memory of this config "
            f"({100 * gap:+.1f}%, {within} {100 * SIZE_TOLERANCE:.0f}%); accuracy only, no parse F1 (no pointers)")


THESIS_LENGTHS = "7-12"  # the systematicity aggregate the thesis reports: the unseen lengths
ALL_LENGTHS = "0-12"  # every unseen test pair, reported apart


def pooled_accuracy(parts: list[dict]) -> dict:
    """{"accuracy", "count"} over the examples of several results (each weighs by its count)."""
    counts = [r["count"] for r in parts]
    if not sum(counts):
        return {"accuracy": float("nan"), "count": 0}
    return {"accuracy": float(np.average([r["accuracy"] for r in parts], weights=counts)), "count": int(sum(counts))}


def systematicity_totals(results: dict[str, dict], split: str) -> dict[str, dict]:
    """A systematicity split's per-count results ("A/3", ...) pooled over 7..12 operators (the thesis'
    aggregate, "A/7-12") and over every count ("A/0-12")."""
    per_count = {int(name.split("/")[1]): r for name, r in results.items() if name.startswith(f"{split}/")}
    unseen = list(logic.thesis_lengths(per_count).values())
    return {f"{split}/{THESIS_LENGTHS}": pooled_accuracy(unseen),
            f"{split}/{ALL_LENGTHS}": pooled_accuracy(list(per_count.values()))}


def result_line(name: str, result: dict, split: str | None) -> str:
    """One console line of the test summary; a systematicity split's two totals say which the thesis reports."""
    extra = f", parse F1 {result['parse_f1']:.1f}" if "parse_f1" in result else ""
    if split not in (None, "length") and name == f"{split}/{THESIS_LENGTHS}":
        extra += f"  <- beside the thesis' {split} (unseen lengths 7-12)"
    elif split not in (None, "length") and name == f"{split}/{ALL_LENGTHS}":
        extra += "  (every unseen length 0-12; not a thesis figure)"
    return f"  {name:>10}: accuracy {100 * result['accuracy']:.2f}% ({result['count']:,} examples){extra}"


def span_f1(gold: list[set], predicted: list[set]) -> tuple[float, int]:
    """Corpus unlabelled span F1 (%) and the number of gold spans (sets of [start, end) spans per example)."""
    matched = sum(len(g & p) for g, p in zip(gold, predicted))
    num_gold, num_pred = sum(len(g) for g in gold), sum(len(p) for p in predicted)
    if num_gold + num_pred == 0:
        return float("nan"), 0
    return 100.0 * 2 * matched / (num_gold + num_pred), num_gold


# -----------------------------------------------------------------------------
# State and steps.


def make_optimizer(training) -> optax.GradientTransformation:
    """Clip, L2 weight decay into the gradient (PyTorch Adam's `weight_decay`), Adam's direction, then the step at
    `training.learning_rate`, a rate the optimiser state holds and the plateau schedule decays
    (`tgjax.train.schedules.plateau_optimizer`)."""
    parts = []
    if training.clip_grad_norm and training.clip_grad_norm > 0:
        parts.append(optax.clip_by_global_norm(training.clip_grad_norm))
    if training.weight_decay:
        parts.append(optax.add_decayed_weights(training.weight_decay))
    parts.append(optax.scale_by_adam(b1=training.b1, b2=training.b2, eps=training.eps))
    return plateau_optimizer(optax.chain(*parts), float(training.learning_rate))


def _model_inputs(kind: str, batch):
    if kind == "sequence":
        return batch["inputs"], batch["valid"]
    return (batch["left"], batch["right"]), (batch["left_valid"], batch["right_valid"])


def _num_tokens(kind: str, batch):
    if kind == "sequence":
        return jnp.sum(batch["valid"])
    return jnp.sum(batch["left_valid"]) + jnp.sum(batch["right_valid"])


def classification_loss(kind: str):
    """The loss the trainer's step differentiates: the mean cross-entropy over the batch's real rows (weight 1),
    the step's key the model's dropout key; (loss, {"sum_nll", "num_correct", "num_examples", "num_tokens"})."""

    def loss(model, batch, key):
        logits, _ = model(*_model_inputs(kind, batch), dropout_key=key)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"])
        weights = batch["weights"]
        total, count = jnp.sum(weights * nll), jnp.sum(weights)
        correct = jnp.sum(weights * (jnp.argmax(logits, -1) == batch["labels"]))
        return total / jnp.maximum(count, 1.0), {"sum_nll": total, "num_correct": correct, "num_examples": count,
                                                 "num_tokens": _num_tokens(kind, batch)}

    return loss


def make_steps(model_cfg: OMClassifierConfig | BaselineClassifierConfig, graphdef, tx: optax.GradientTransformation):
    """train_step(state, rest, batch) -> (state, metrics): the trainer's one step (`tgjax.train.step`), its key
    drawn at the count of updates done before it (the recorded numbers); eval_step(params, batch) ->
    (predictions, pointers; None for a baseline)."""
    kind = model_cfg.kind
    train_step = make_train_step(graphdef, classification_loss(kind), tx, draw_key_at="updates_done")

    def eval_step(params, batch):
        model = nnx.merge(graphdef, params)
        logits, pointer = model(*_model_inputs(kind, batch))
        return jnp.argmax(logits, -1), pointer

    return train_step, eval_step


# -----------------------------------------------------------------------------
# The task.


class ClassificationTask(ParamsStateTask):
    """Ordered Memory (or a same-size baseline) on ListOps or logical inference; see the module docstring."""

    name = "classification"
    selection = Selection("valid_accuracy", "max")
    default_config = staticmethod(default_config)
    model_has_rest = False  # no RNG streams: the step passes its key to the model as `dropout_key`

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)
        self.batch_size = config.training.batch_size
        self.eval_batch_size = config.evaluation.batch_size
        self.dataset = config.dataset
        self.encoder = config.model.encoder
        self.has_trees = self.encoder == "ordered_memory"  # only Ordered Memory's pointers give trees
        t = config.training
        self.schedule = (Plateau(t.lr_patience, t.early_stopping_patience, mode="max", factor=t.lr_decay)
                         if t.schedule == "plateau" else StepSchedule())
        self.best: dict[str, Any] = {"value": None, "step": None, "params": None}
        self.last_evaluated: tuple[int, Any] | None = None

    # -- before anything runs ----------------------------------------------------------------

    def validate_config(self, config) -> None:
        check_config(config)

    def check_mesh(self, mesh) -> None:
        shd.check_batch_divides(self.batch_size, mesh, "training.batch_size")
        shd.check_batch_divides(self.eval_batch_size, mesh, "evaluation.batch_size")

    def setup(self, run: RunContext) -> None:
        self.run = run
        self.model_config = model_config(self.config)
        self._load_data()
        abstract = nnx.eval_shape(lambda: build_classifier(self.model_config, rngs=nnx.Rngs(0)))
        self.graphdef = nnx.split(abstract, nnx.Param)[0]
        self.layout = params_layout(self._build, run.mesh, shd.config_rules(self.config))
        self.num_parameters = self.layout.num_parameters
        self.tx = make_optimizer(self.config.training)
        self.replicated = shd.replicated(run.mesh)
        train_step, eval_step = make_steps(self.model_config, self.graphdef, self.tx)
        self._train_step = jax.jit(train_step, donate_argnums=(0,),
                                   out_shardings=(self.layout.state_shardings(self.tx), self.replicated))
        self._eval_step = jax.jit(eval_step)

    def _load_data(self) -> None:
        data = load_splits(self.dataset, self.config.data)
        self.skipped, self.test_note, self.data_fingerprint = data.skipped, data.test_note, data.fingerprint
        self.train_split, self.valid_split, self.test_splits = data.train, data.valid, data.tests

    def describe_run(self) -> list[str]:
        mesh = self.run.mesh
        c = self.model_config
        where = (f"mesh data={mesh.shape['data']} over {mesh.devices.size} {mesh.devices.flat[0].platform} "
                 f"device(s)")
        if isinstance(c, OMClassifierConfig):
            lines = [f"Ordered Memory on {self.dataset}: {self.num_parameters:,} parameters (D={c.slot_size}, "
                     f"{c.n_slots} slots, {c.test_n_slots or c.n_slots} at test), {where}"]
        else:
            lines = [f"{c.encoder} baseline on {self.dataset}, {where}",
                     size_note(c, self.num_parameters, parameter_count(om_model_config(self.config)))]
        lines.append(f"data: {len(self.train_split.examples):,} training, {len(self.valid_split.examples):,} "
                     "validation, " + ", ".join(f"{name} {len(s.examples):,}" for name, s in self.test_splits.items()))
        if self.skipped.get("test"):
            lines.append(f"note: {self.skipped['test']} test examples longer than "
                         f"data.test_max_tokens={self.config.data.test_max_tokens} are skipped")
        if self.test_note:
            lines.append(f"note: {self.test_note}")
        return lines

    # -- state and checkpoints ---------------------------------------------------------------

    def _build(self, rngs: nnx.Rngs):
        return build_classifier(self.model_config, rngs=rngs)

    def checkpoint_meta(self) -> dict[str, Any]:
        meta = {"dataset": self.dataset, "model": dataclasses.asdict(self.model_config),
                "batch_size": self.batch_size, "data_sha256": self.data_fingerprint,
                "config": to_json_dict(self.config)}
        if isinstance(self.schedule, Plateau):
            meta["plateau"] = self.schedule.state_dict()
        return meta

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        changed = []
        saved_model = meta.get("model", {})
        # Ordered Memory's meta names no encoder (its config predates the baselines).
        saved_encoder = saved_model.get("encoder", "ordered_memory")
        if saved_encoder != self.encoder:
            raise ConfigError(f"checkpoint step {step} in {directory} holds a model.encoder={saved_encoder} "
                              f"classifier, the config asks for model.encoder={self.encoder}: pass "
                              f"--config.model.encoder={saved_encoder}, or use a new --workdir")
        for key, value in dataclasses.asdict(self.model_config).items():
            if key.endswith("dropout") or key == "test_n_slots":
                continue  # may change between runs: no array depends on them
            if saved_model.get(key) != value:
                changed.append(f"model.{key}: {saved_model.get(key)!r} in the checkpoint, {value!r} now")
        if meta.get("dataset") != self.dataset:
            changed.append(f"dataset: {meta.get('dataset')!r} in the checkpoint, {self.dataset!r} now")
        if meta.get("batch_size") != self.batch_size:
            changed.append(f"training.batch_size: {meta.get('batch_size')} in the checkpoint, {self.batch_size} now")
        if meta.get("data_sha256") != self.data_fingerprint:
            changed.append("the training examples differ (data.seed, data.train_size, data.split, "
                           "data.max_train_examples or the files changed)")
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run: " + "; ".join(changed)
                              + ". Use the original config or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        """The host-side schedule: the plateau's counters (the rate is in the optimiser state), and the best so far."""
        if isinstance(self.schedule, Plateau) and "plateau" in meta:
            self.schedule.load_state_dict(meta["plateau"])
        self.best = {"value": meta.get("best_valid_loss"), "step": meta.get("best_step"), "params": None}

    # -- steps ---------------------------------------------------------------------------------

    def batches(self, position: dict | None) -> EpochBatches:
        return EpochBatches(train_epochs(self.dataset, self.train_split, self.batch_size, self.config.training.seed,
                                         self.config.data.length_bucket, process_index=self.run.process_index,
                                         process_count=self.run.process_count), position)

    def make_train_step(self):
        return self._train_step

    def new_window(self) -> SummingWindow:
        """Loss per example and accuracy over the logging interval."""
        return SummingWindow(ratios={"loss": ("sum_nll", "num_examples"), "accuracy": ("num_correct", "num_examples")},
                             tokens="num_tokens")

    # -- evaluation ----------------------------------------------------------------------------

    def has_validation(self) -> bool:
        return len(self.valid_split.examples) > 0

    def predict(self, params, split: Split, *, want_pointers: bool = False):
        """Predicted classes [n] (and each example's pointer tree when `want_pointers`)."""
        predictions = np.zeros(len(split.examples), np.int64)
        trees: list = [None] * len(split.examples)
        for indices, batch in eval_batches(self.dataset, split, self.eval_batch_size):
            local = local_rows(batch, self.run.process_index, self.run.process_count)
            predicted, pointer = self._eval_step(params, shd.global_batch(local, self.run.mesh))
            predicted = np.asarray(jax.device_get(predicted))
            predictions[indices] = predicted[:len(indices)]
            if want_pointers:
                if self.dataset == "listops":
                    found = pointer_trees(jax.device_get(pointer)[:len(indices)], batch["valid"][:len(indices)])
                else:  # (premise tree, hypothesis tree)
                    found = list(zip(*(pointer_trees(jax.device_get(pointer[side])[:len(indices)],
                                                     batch[f"{name}_valid"][:len(indices)])
                                       for side, name in enumerate(("left", "right")))))
                for i, tree in zip(indices, found):
                    trees[i] = tree
        return predictions, trees

    def accuracy(self, params, split: Split, *, parse: bool = False) -> dict[str, float]:
        """{"accuracy", "count"} (and with `parse`, "parse_f1" against the gold bracketing).

        Logic: premises and hypotheses pooled, each predicted tree with its
        parenthesis tokens removed first (the release's `remove_bracket`).
        """
        parse = parse and self.has_trees  # a baseline has no pointers: accuracy alone
        predictions, trees = self.predict(params, split, want_pointers=parse)
        labels = np.array([e.label for e in split.examples])
        result = {"accuracy": float(np.mean(predictions == labels)) if len(labels) else float("nan"),
                  "count": len(labels)}
        if parse and self.dataset == "listops":
            gold = [set(listops.gold_spans(e.expression)) for e in split.examples]
            result["parse_f1"], result["gold_spans"] = span_f1(gold, [tree_spans(t) for t in trees])
        elif parse:
            gold, predicted = [], []
            for example, pair in zip(split.examples, trees):
                for formula, tree in zip((example.left, example.right), pair):
                    gold.append(set(logic.gold_spans(formula)))
                    words_only = remove_leaves(tree, logic.parenthesis_positions(formula))
                    predicted.append(set() if words_only is None else tree_spans(words_only))
            result["parse_f1"], result["gold_spans"] = span_f1(gold, predicted)
        return result

    def evaluate(self, state, rest) -> Evaluation:
        """Accuracy on the validation split; the best parameters so far are kept on the host for the test."""
        result = self.accuracy(state.params, self.valid_split, parse=True)
        value = result["accuracy"]
        step = int(jax.device_get(state.step))
        if self.selection.improves(value, self.best["value"]):
            self.best = {"value": value, "step": step, "params": jax.device_get(state.params)}
        message = f"accuracy {100 * value:.2f}%"
        if "parse_f1" in result:
            message += f", parse F1 {result['parse_f1']:.1f}"
        return Evaluation(values={"valid_accuracy": value},
                          record={**result, "learning_rate": float(learning_rate_of(state.opt_state))}, message=message)

    def best_params(self):
        """The best validation parameters: kept on the host, or read from the best checkpoint after a resume."""
        if self.best["params"] is not None:
            return self.best["params"]
        if self.best["step"] is None:
            return None
        import orbax.checkpoint as ocp

        target = self.abstract_state()
        # The state's fields as the checkpoint store saves them: those that are None (no carry, no average) left out.
        fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(target)}
        path = self.run.workdir / "checkpoints" / str(self.best["step"]) / "state"
        tree = ocp.StandardCheckpointer().restore(path.resolve(), {name: value for name, value in fields.items()
                                                                   if value is not None})
        return tree["params"]

    def test(self, params) -> dict[str, dict[str, float]]:
        """Every test split's accuracy (ListOps: also parse F1, and accuracy by length <= / > the training cap)."""
        results = {}
        for name, split in self.test_splits.items():
            results[name] = self.accuracy(params, split, parse=True)
        if self.dataset == "listops" and "test" in self.test_splits:
            split = self.test_splits["test"]
            cap = self.config.data.max_train_tokens  # the training length: longer is length generalisation
            short = split.lengths <= cap
            for label, mask in ((f"test_le{cap}", short), (f"test_gt{cap}", ~short)):
                subset = Split([e for e, m in zip(split.examples, mask) if m], split.lengths[mask])
                if len(subset.examples):
                    results[label] = self.accuracy(params, subset)
        if self.dataset == "logic" and self.config.data.split != "length":
            results.update(systematicity_totals(results, self.config.data.split))
        elif self.dataset == "logic" and len(self.test_splits) > 1:
            results["all"] = pooled_accuracy(list(results.values()))
        return results

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": self.model_config.vocab_size}

    def report(self, results: dict, *, final_step: int, seconds: float) -> str:
        """Writes WORKDIR/test_results.json and returns the closing lines."""
        split = self.config.data.split if self.dataset == "logic" else None
        report = {"dataset": self.dataset, "split": split,
                  "best_step": self.best["step"], "valid_accuracy": self.best["value"],
                  "final_step": final_step, "skipped": self.skipped, "test": results,
                  "num_parameters": self.num_parameters, "seconds": seconds}
        if not self.has_trees:
            report["encoder"] = self.encoder
            report["note"] = "a baseline: accuracy only; no parse F1 (it has no pointers to read trees from)"
        if split not in (None, "length"):
            report["beside_thesis"] = f"{split}/{THESIS_LENGTHS}"  # the key the thesis' column compares with
            report["all_lengths"] = f"{split}/{ALL_LENGTHS}"
        if self.run.process_index == 0:
            (self.run.workdir / "test_results.json").write_text(json.dumps(report, indent=2) + "\n")
        lines = [f"done: step {final_step} in {format_duration(seconds)}; best validation accuracy "
                 f"{100 * self.best['value']:.2f}% at step {self.best['step']}; test with those parameters:"]
        lines += [result_line(name, r, split) for name, r in results.items()]
        lines.append(f"  written to {self.run.workdir / 'test_results.json'}")
        return "\n".join(lines)

    def summary(self, result) -> str | None:
        """Test accuracy per split with the best validation parameters, when the run ended (not a pause)."""
        plateau_stop = getattr(result, "stop_reason", None) == "schedule" or (
            isinstance(self.schedule, Plateau) and self.schedule.since_best >= self.schedule.early_stopping_patience)
        if result.final_step != self.num_steps and not plateau_stop:
            return None
        params = self.best_params()
        if params is None or not self.test_splits:
            return None
        return self.report(self.test(params), final_step=result.final_step, seconds=result.seconds)


def evaluate_best_checkpoint(config, workdir: str | Path, *, say=print) -> str:
    """Scores the best validation checkpoint of `workdir` on the test splits, without training.

    For a run that was stopped (SIGTERM, `stop_after_step`) and will not be
    resumed: what `summary` prints at the end of a finished run, and the same
    WORKDIR/test_results.json.
    """
    from tgjax.train.checkpoint import CheckpointStore

    started = time.perf_counter()
    task = ClassificationTask(config)
    task.validate_config(config)
    store = CheckpointStore(workdir, best_mode="max")
    try:
        step = store.latest_step()
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {Path(workdir) / 'checkpoints'}")
        meta = store.read_meta(step)
    finally:
        store.close()
    mesh = shd.make_mesh(config.mesh.data, config.mesh.model)
    task.setup(RunContext(Path(workdir), mesh, True, jax.process_index(), jax.process_count(), say))
    task.check_checkpoint(meta, step, Path(workdir))
    task.resume_from(meta)
    return task.report(task.test(task.best_params()), final_step=step, seconds=time.perf_counter() - started)
