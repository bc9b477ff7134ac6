"""UDGN's masked language modelling task (`trainer="mlm"`): the release's recipe on the shared trainer.

    tgjax train --config configs/udgn_tiny.py --workdir runs/udgn_tiny

What the release does (../shared/reference/released-code.md §4.4-4.5) and how it maps here:

- Words: from a treebank (`data.source = "builtin"`, `"treebank"` files or
  `"craft"`, CRAFT's id lists) only the tokens whose POS tag is one of the
  release's WORD_TAGS are kept (punctuation, traces, `$`, `#` dropped), in
  the release's form (lower-cased, digit runs -> `N`); `"text"` files are one
  sentence per line, already filtered (PTB as the release prepared it).
  Sentences left empty are skipped and counted (reported at the start).
- Vocabulary: `<unk>` 0, `<pad>` 1, `<mask>` 2, then the training words seen
  at least `data.min_word_count` times (the release's `dict_thd`, 5 on PTB),
  most frequent first (ties alphabetical). Written to WORKDIR/vocab.txt.
- Masking (`mask_tokens`, on device, keyed by the step): every token that is
  neither padding nor `<unk>` is masked independently with probability
  `training.mask_rate` (0.3) and then always replaced by `<mask>` (no 80/10/10);
  the loss is the mean cross-entropy over the masked positions only.
- Batches (`token_budget_batches`): sentences sorted by length and packed
  greedily so that a batch's padded size rows x width stays within
  `training.token_budget` (the release: < 4096 tokens), the width rounded up
  to a multiple of `training.length_bucket` and every batch of one width
  padded to the same number of rows (empty rows, no loss) so that XLA
  compiles one program per width. The batches are fixed; each epoch shuffles
  their order from (seed, epoch), so the position {"epoch", "step"} is all a
  checkpoint needs and a resumed run is bit-exact (a grain dataset per
  epoch, walked by `tgjax.data.batching.EpochBatches`). Words, vocabulary
  and batches are host code: `tgjax.data.mlm_corpus`.
- Update: gradient clipped to global norm `training.clip` (0.25), PyTorch
  Adam's L2 `weight_decay` added to the gradient, Adam (eps 1e-9), the
  learning rate applied from the host so that the plateau schedule (the
  release's ReduceLROnPlateau, factor 0.5, PyTorch patience 2 = 3
  validations without improvement here) can halve it.
- Validation: MLM loss over the validation split averaged over
  `evaluation.runs` (5) fixed random maskings (pooled: total NLL / total
  masked tokens); perplexity = exp(loss). The lowest loss picks the best
  checkpoint (`tgjax eval dependency` reads it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from ml_collections.config_dict import placeholder

from tgjax.data.batching import EpochBatches, local_rows
from tgjax.data.mlm_corpus import (
    SOURCES,
    build_vocabulary,
    encode,
    make_batch,
    read_split,
    token_budget_batches,
    train_epochs,
)
from tgjax.models.mlm_masking import MASK, MASK_ID, PAD, PAD_ID, SPECIALS, UNK, UNK_ID, mask_tokens, masked_nll  # noqa: F401
from tgjax.models.udgn import UDGN, UDGNConfig
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
from tgjax.workdir import WORD_LIST_FILE, word_list_fingerprint

DEFAULT_CRAFT_DIR = str(Path(__file__).resolve().parents[3].parent / "shared" / "data" / "craft_treebank")


# -----------------------------------------------------------------------------
# Masking, loss, steps.


def make_optimizer(training) -> optax.GradientTransformation:
    """Clip, PyTorch Adam's L2 weight decay into the gradient, Adam's direction, then the step at
    `training.learning_rate`, held in the optimiser state for the plateau schedule to decay
    (`tgjax.train.schedules.plateau_optimizer`)."""
    parts = []
    if training.clip:
        parts.append(optax.clip_by_global_norm(training.clip))
    if training.weight_decay:
        parts.append(optax.add_decayed_weights(training.weight_decay))
    parts.append(optax.scale_by_adam(b1=training.b1, b2=training.b2, eps=training.eps))
    tx = plateau_optimizer(optax.chain(*parts), float(training.learning_rate))
    if training.parser_hold_steps:
        tx = optax.chain(tx, hold_parser(int(training.parser_hold_steps)))
    return tx


class HoldState(NamedTuple):
    count: jax.Array  # updates applied so far


def hold_parser(steps: int) -> optax.GradientTransformation:
    """Zeroes the parser's updates (parameters under `parser`) for the first `steps` updates; the rest of the model
    trains from the start and Adam's moments of the parser keep accumulating.

    Neither the thesis nor the release holds the parser: `training.parser_hold_steps` (0 = off, the default)
    tests whether UDGN's end-rooted collapse comes from a parser that commits before the masked LM can use
    structure (benchmarks/udgn_collapse.py)."""

    def init(params):
        del params
        return HoldState(jnp.zeros([], jnp.int32))

    def update(updates, state, params=None):
        del params
        held = state.count < steps

        def hold(path, update):
            return jnp.where(held, jnp.zeros_like(update), update) if _in_parser(path) else update

        return jax.tree_util.tree_map_with_path(hold, updates), HoldState(state.count + 1)

    return optax.GradientTransformation(init, update)


def _in_parser(path) -> bool:
    return bool(path) and getattr(path[0], "key", getattr(path[0], "name", None)) == "parser"


def masked_lm_loss(mask_rate: float):
    """The masked-LM loss (the trainer's step differentiates it): the step's key splits into the masking draw and
    the dropout streams' key; (NLL per masked token, {"sum_nll", "num_masked", "num_tokens"})."""

    def loss(model, batch, key):
        mask_key, dropout_key = jax.random.split(key)
        inputs, masked = mask_tokens(mask_key, batch["tokens"], batch["valid"], mask_rate)
        nnx.reseed(model, dropout=dropout_key)
        out = model(inputs, batch["valid"], deterministic=False)
        total, count = masked_nll(out.logits, batch["tokens"], masked)
        return total / jnp.maximum(count, 1), {"sum_nll": total, "num_masked": count,
                                               "num_tokens": jnp.sum(batch["valid"])}

    return loss


def make_steps(graphdef, tx, mask_rate: float):
    """train_step(state, rest, batch) -> (state, metrics): the trainer's one step; eval_step(params, rest, batch,
    key) -> (nll, count)."""
    train_step = make_train_step(graphdef, masked_lm_loss(mask_rate), tx)

    def eval_step(params, rest, batch, key):
        inputs, masked = mask_tokens(key, batch["tokens"], batch["valid"], mask_rate)
        model = nnx.merge(graphdef, params, rest)
        out = model(inputs, batch["valid"], deterministic=True)
        return masked_nll(out.logits, batch["tokens"], masked)

    return train_step, eval_step


# -----------------------------------------------------------------------------
# Config.


def model_config(config, vocab_size: int) -> UDGNConfig:
    m = config.model
    return UDGNConfig(vocab_size=vocab_size, d_model=m.d_model, num_layers=m.num_layers,
                      num_channels=m.num_channels, channel_size=m.channel_size, parser_hidden=m.parser_hidden,
                      parser_layers=m.parser_layers, num_tags=m.num_tags, dropout=m.dropout,
                      attention_dropout=m.attention_dropout, parser_dropout=m.parser_dropout)


def check_config(config) -> None:
    """The values this task reads, checked before anything starts (every key is there: the config was merged
    over `default_config()`); `ConfigError` names the key."""
    check_choice(config, "data.source", SOURCES)
    for key in ("model.d_model", "model.num_layers", "model.num_channels", "model.channel_size",
                "model.parser_hidden", "model.parser_layers", "training.num_steps", "training.token_budget",
                "training.length_bucket", "data.min_word_count", "evaluation.interval_steps", "evaluation.runs",
                "checkpointing.interval_steps", "logging.interval_steps"):
        check_positive_int(config, key)
    check_range(config, "training.mask_rate", 0, 1, low_open=True, high_open=True)
    check_range(config, "training.learning_rate", low=0, low_open=True)
    check_range(config, "training.lr_decay", 0, 1, low_open=True)
    check_int(config, "training.parser_hold_steps", minimum=0)
    check_choice(config, "training.schedule", ("plateau", "constant"))


PTB_VOCABULARY_SIZE = 10_798  # the thesis' PTB dictionary (frequency >= 5 plus the three specials)


def describe(config) -> ModelInfo:
    """What `tgjax info` prints: parameters and the vocabulary built from the training data (when the
    training data is absent, e.g. configs/udgn_ptb.py without PTB, the thesis' 10,798 PTB types, said so)."""
    check_config(config)
    try:
        train, _ = read_split(config.data, "train")
        vocab_size = len(build_vocabulary(train, config.data.min_word_count))
        source = f"built from the training split (data.source={config.data.source!r})"
    except FileNotFoundError as missing:
        vocab_size, source = PTB_VOCABULARY_SIZE, f"the thesis' PTB size; the training data is absent ({missing})"
    model_cfg = model_config(config, vocab_size)
    return ModelInfo("udgn_mlm", vocab_size, source, dataclasses.asdict(model_cfg),
                     lambda rngs: UDGN(model_cfg, rngs=rngs))


def _fingerprint(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


# -----------------------------------------------------------------------------
# The task.


class MLMTask(ParamsStateTask):
    """UDGN as a masked LM; see the module docstring."""

    name = "mlm"
    selection = Selection("valid_loss", "min")

    @staticmethod
    def default_config() -> ml_collections.ConfigDict:
        return default_config()  # the module's, below

    def __init__(self, config):
        self.config = config
        read_intervals(self, config)
        t = config.training
        self.schedule = (Plateau(t.lr_patience, t.early_stopping_patience, mode="min", factor=t.lr_decay)
                         if t.schedule == "plateau" else StepSchedule())

    def validate_config(self, config) -> None:
        check_config(config)

    def check_mesh(self, mesh) -> None:
        self.rows_multiple = int(mesh.shape["data"])

    def setup(self, run: RunContext) -> None:
        self.run = run
        d, t = self.config.data, self.config.training
        self.skipped: dict[str, dict[str, int]] = {}
        train, self.skipped["train"] = read_split(d, "train")
        valid, self.skipped["valid"] = read_split(d, "valid")
        if not train:
            raise ValueError(f"no training sentence left from data.source={d.source!r} (after filtering)")
        self.words = build_vocabulary(train, d.min_word_count)
        self.train_ids, self.unknown_train = encode(train, self.words)
        self.valid_ids, self.unknown_valid = encode(valid, self.words)
        rows_multiple = getattr(self, "rows_multiple", 1)
        self.train_batches = token_budget_batches(np.array([len(s) for s in self.train_ids]), t.token_budget,
                                                  t.length_bucket, rows_multiple)
        self.valid_batches = (token_budget_batches(np.array([len(s) for s in self.valid_ids]), t.token_budget,
                                                   t.length_bucket, rows_multiple) if self.valid_ids else [])
        self.vocab_sha256 = word_list_fingerprint(self.words)
        self.data_sha256 = _fingerprint([" ".join(s) for s in train])
        self.model_config = model_config(self.config, len(self.words))
        if run.process_index == 0:
            path = run.workdir / WORD_LIST_FILE
            text = "\n".join(self.words) + "\n"
            if path.is_file() and path.read_text(encoding="utf-8") != text and run.resuming:
                raise ConfigError(f"{path} differs from the vocabulary this config builds: use the original "
                                  "config and data, or a new --workdir")
            path.write_text(text, encoding="utf-8")
        abstract = nnx.eval_shape(lambda: UDGN(self.model_config, rngs=nnx.Rngs(params=0, dropout=0)))
        self.graphdef = nnx.split(abstract, nnx.Param, ...)[0]
        self.layout = params_layout(self._build, run.mesh, shd.config_rules(self.config))
        self.num_parameters = self.layout.num_parameters
        self.tx = make_optimizer(t)
        self.replicated = shd.replicated(run.mesh)
        train_step, eval_step = make_steps(self.graphdef, self.tx, float(t.mask_rate))
        self._train_step = jax.jit(train_step, donate_argnums=(0,),
                                   out_shardings=(self.layout.state_shardings(self.tx), self.replicated))
        self._eval_step = jax.jit(eval_step)

    def describe_run(self) -> list[str]:
        c = self.model_config
        lines = [f"UDGN masked LM: {self.num_parameters:,} parameters (d={c.d_model}, {c.num_layers} DGN layers of "
                 f"{c.num_channels}x{c.channel_size} channels, parser BiLSTM {c.parser_layers}x{c.parser_hidden}, "
                 f"tags {c.num_tags}), vocabulary {len(self.words):,}",
                 f"data ({self.config.data.source}): {len(self.train_ids):,} training sentences in "
                 f"{len(self.train_batches)} batches of <= {self.config.training.token_budget} tokens, "
                 f"{len(self.valid_ids):,} validation; {self.unknown_valid} validation words read as {UNK}"]
        for split, counts in self.skipped.items():
            if any(counts.values()):
                lines.append(f"note: {split} sentences skipped: {counts['empty']} with no word left after "
                             f"filtering, {counts['untagged']} with a word not under a POS tag"
                             + (f", {counts['too_long']} longer than data.max_length={self.config.data.max_length}"
                                if counts.get("too_long") else ""))
        return lines

    # -- state and checkpoints

    def _build(self, rngs: nnx.Rngs) -> UDGN:
        return UDGN(self.model_config, rngs=rngs)

    def checkpoint_meta(self) -> dict[str, Any]:
        meta = {"model": dataclasses.asdict(self.model_config), "vocab_sha256": self.vocab_sha256,
                "vocab_size": len(self.words), "data_sha256": self.data_sha256,
                "token_budget": self.config.training.token_budget, "config": to_json_dict(self.config)}
        if isinstance(self.schedule, Plateau):
            plateau = self.schedule.state_dict()
            meta["plateau"] = {**plateau, "best": plateau["best"] if math.isfinite(plateau["best"]) else None}
        return meta

    def check_checkpoint(self, meta: dict, step: int, directory: Path) -> None:
        changed = []
        saved = meta.get("model", {})
        for key, value in dataclasses.asdict(self.model_config).items():
            if key.endswith("dropout"):
                continue
            if saved.get(key) != value:
                changed.append(f"model.{key}: {saved.get(key)!r} in the checkpoint, {value!r} now")
        if meta.get("data_sha256") != self.data_sha256:
            changed.append("the training sentences differ (data.* or the files changed)")
        if meta.get("token_budget") != self.config.training.token_budget:
            changed.append(f"training.token_budget: {meta.get('token_budget')} in the checkpoint, "
                           f"{self.config.training.token_budget} now")
        if changed:
            raise ConfigError(f"checkpoint step {step} in {directory} is of another run: " + "; ".join(changed)
                              + ". Use the original config or a new --workdir")

    def resume_from(self, meta: dict) -> None:
        if isinstance(self.schedule, Plateau) and "plateau" in meta:
            plateau = dict(meta["plateau"])
            plateau["best"] = math.inf if plateau["best"] is None else plateau["best"]
            self.schedule.load_state_dict(plateau)

    # -- steps

    def batches(self, position: dict | None) -> EpochBatches:
        t = self.config.training
        return EpochBatches(train_epochs(self.train_ids, self.train_batches, t.token_budget, t.length_bucket, t.seed,
                                         rows_multiple=getattr(self, "rows_multiple", 1),
                                         process_index=self.run.process_index,
                                         process_count=self.run.process_count), position)

    def make_train_step(self):
        return self._train_step

    def new_window(self) -> SummingWindow:
        """Loss per masked token (and its perplexity) over the logging interval."""
        return SummingWindow(ratios={"loss": ("sum_nll", "num_masked")}, tokens="num_tokens", perplexity_of="loss")

    # -- evaluation

    def has_validation(self) -> bool:
        return bool(self.valid_ids)

    def mlm_loss(self, params, rest, sentences: list[np.ndarray], batches: list[np.ndarray], runs: int,
                 seed: int) -> tuple[float, int]:
        """(pooled masked-token NLL over `runs` fixed maskings, masked tokens counted)."""
        t = self.config.training
        total, count = 0.0, 0
        for run in range(runs):
            for b, indices in enumerate(batches):
                key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), run), b)
                batch = make_batch(sentences, indices, t.token_budget, t.length_bucket,
                                   getattr(self, "rows_multiple", 1))
                batch = local_rows(batch, self.run.process_index, self.run.process_count)
                nll, n = self._eval_step(params, rest, shd.global_batch(batch, self.run.mesh), key)
                total += float(nll)
                count += int(n)
        return total / max(count, 1), count

    def evaluate(self, state, rest) -> Evaluation:
        loss, count = self.mlm_loss(state.params, rest, self.valid_ids, self.valid_batches,
                                    self.config.evaluation.runs, self.config.evaluation.seed)
        ppl = math.exp(min(loss, 50.0))
        return Evaluation(values={"valid_loss": loss},
                          record={"loss": loss, "perplexity": ppl, "masked_tokens": count,
                                  "learning_rate": float(learning_rate_of(state.opt_state))},
                          message=f"MLM loss {loss:.4f}, perplexity {ppl:.2f}")

    def result_fields(self) -> dict[str, Any]:
        return {"num_parameters": self.num_parameters, "vocab_size": len(self.words)}

    def summary(self, result) -> str | None:
        return None


def default_config() -> ml_collections.ConfigDict:
    """Every key this task reads, at the release's PTB values (configs/udgn_*.py set their own)."""
    return family_config(dict(
        trainer="mlm",
        model=dict(d_model=512, num_layers=8, num_channels=8, channel_size=128, parser_hidden=512,
                   parser_layers=3, num_tags=0, dropout=0.2, attention_dropout=0.1, parser_dropout=0.2),
        data=dict(source="text", train_path="", valid_path="", test_path="", craft_dir=DEFAULT_CRAFT_DIR,
                  num_train_sentences=placeholder(int), num_valid_sentences=placeholder(int),
                  num_test_sentences=placeholder(int), corpus_seed=0,
                  min_word_count=5, max_length=0),
        training=dict(num_steps=100_000, token_budget=4096, length_bucket=8, mask_rate=0.3, seed=1111,
                      learning_rate=1e-3, b1=0.9, b2=0.999, eps=1e-9, weight_decay=1.2e-6, clip=0.25,
                      schedule="plateau", lr_decay=0.5, lr_patience=3, early_stopping_patience=1_000_000,
                      parser_hold_steps=0),
        evaluation=dict(interval_steps=1000, runs=5, seed=0),
    ), checkpointing=dict(interval_steps=1000, max_to_keep=2), logging=dict(tensorboard=False))
