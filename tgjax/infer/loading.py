"""A trained model back from its workdir, for evaluation: parameters only, no optimiser.

    loaded = tgjax.load("runs/tiny").restore()                  # the best checkpoint by validation loss
    loaded = tgjax.load("runs/tiny", step="latest").restore()   # or the newest, or an integer step
    logits, memory = loaded.model(batch, loaded.model.init_memory(B))

`tgjax.load` (`tgjax.infer.api`) is the way in; `_restore_lm` here is the
TG / TXL entry of its family table, and the other families' loaders build on
this module's checkpoint reading (`resolve_step`, `open_family_checkpoint`,
`restore_state_items`).

A workdir is a local directory or a bucket (`gs://bucket/run`): both are
read where they are, through `tgjax.workdir.workdir_path` (orbax and
TensorStore read the checkpoint's items, `etils.epath` the manifests, the
vocabulary and the other files), without a mount and without copying the run.

What a workdir records, and where this reads it (nothing else is needed; the
training config is not read from a file):

* `WORKDIR/checkpoints/<step>/` (orbax, written by `tgjax.train.checkpoint`; the layout is `tgjax.workdir`):
  item `state` holds the `TrainState`; only its `params` subtree is read
  (an orbax partial restore), so the Adam moments are never loaded.
  Item `meta` (JSON) holds the run's facts: `model` (the `ModelConfig` as a
  dict, which rebuilds the model), `config` (the whole training config:
  `config.model.name` names the registry entry, `config.data` the data
  settings such as `transparency_depth`), `vocab_sha256` (the vocabulary's
  fingerprint), `best_step` / `best_valid_loss`.
* `WORKDIR/vocab.json` or `WORKDIR/vocab.model` (+ `.json` sidecar): the
  vocabulary. Its fingerprint must equal the checkpoint's `vocab_sha256`,
  else `VocabularyMismatch`.
* `WORKDIR/checkpoint_manifests/<step>.json`: sha256 sums; a step whose files
  do not match is refused (with `step="best"`/`"latest"` the next older good
  step is not substituted: evaluation must say exactly which weights it used).

Only steps whose save finished are steps (`tgjax.workdir.committed_steps`: on
a bucket orbax writes a step in place and its `commit_success.txt` last), so
"latest" and "best" never pick a step that training is still writing, and
asking for such a step by number says what it lacks.

This module only reads: it never opens an orbax `CheckpointManager` on the
workdir (whose start-up would clean up a running training's temporary
directories), so it is safe to evaluate while training goes on.

Segment and memory lengths can be changed for evaluation
(`sequence_length=`, `memory_length=`): no parameter depends on them (the
position tables are constants rebuilt here), so a model trained with T = 256
can score with T = 32 and a memory long enough for the stack, or the reverse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.data.vocab import Vocabulary, load_vocabulary
from tgjax.models import ModelConfig, TransformerLM, model_spec
from tgjax.models.parts import model_parts
from tgjax.models.transformer_lm import unstack_layer_params
from tgjax.workdir import (
    WORD_LIST_FILE,
    VocabularyMismatch,
    check_step,
    committed_steps,
    orbax_read,
    read_lines_of,
    restore_failure,
    saved_vocabulary_path,
    uncommitted_step,
    vocabulary_fingerprint,
    word_list_fingerprint,
    workdir_path,
)

log = logging.getLogger(__name__)

STEP_CHOICES = ("best", "latest")


class CheckpointError(ValueError):
    """A workdir without usable checkpoints, or a step that is missing, incomplete or corrupt."""


@dataclasses.dataclass
class RestoredLM:
    """A TG / TXL model restored for evaluation (what `tgjax.load(...).restore()` gives for family `lm`).

    Attributes:
      model: the `TransformerLM` with the checkpoint's parameters (dropout off
        when called with `deterministic=True`).
      vocab: the workdir's vocabulary (checked against the checkpoint).
      model_name: the registry name (`tg`, `txl_cc`, `txl_terminals`, ...).
      model_config: the `ModelConfig` (with any evaluation-time lengths).
      pipeline_fields: `PipelineConfig` fields that match the model (rule,
        seq_len, mem_len, memory kind, transparency_depth).
      step: the checkpoint step read.
      workdir: where it came from.
      vocab_fingerprint: sha256 of the vocabulary (as training computes it).
      meta: the checkpoint's `meta` item (run facts and the training config).
      graphdef, params, rest: the model split for functional, jitted use
        (`nnx.merge(graphdef, params, rest)` rebuilds it).
    """

    model: TransformerLM
    vocab: Vocabulary
    model_name: str
    model_config: ModelConfig
    pipeline_fields: dict[str, Any]
    step: int
    workdir: Any  # a local Path or, for a bucket run, an etils.epath.Path (`tgjax.workdir.workdir_path`)
    vocab_fingerprint: str
    meta: dict[str, Any]
    graphdef: Any = None
    params: Any = None
    rest: Any = None

    @property
    def rule(self) -> str:
        """The data rule: `tg`, `txl_cc` or `txl_terminals`."""
        return self.pipeline_fields["rule"]

    @property
    def is_syntactic(self) -> bool:
        """Whether the model reads trees (actions) rather than words only."""
        return self.rule in ("tg", "txl_cc")

    def describe(self) -> str:
        return f"{self.model_name} from {self.workdir} step {self.step}"


# -----------------------------------------------------------------------------
# The checkpoint directory, read-only.


def checkpoint_steps(workdir) -> list[int]:
    """Finished checkpoint steps under `workdir/checkpoints` (`tgjax.workdir.committed_steps`: a step orbax
    renamed into place, or on a bucket one with its commit marker)."""
    return committed_steps(workdir_path(workdir))


@contextlib.contextmanager
def _quiet_absl():
    """orbax logs a harmless warning per restore of a single item directory; keep it off stderr."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def read_meta(workdir, step: int) -> dict[str, Any]:
    """The `meta` item (JSON) of a step."""
    import orbax.checkpoint as ocp

    path = workdir / "checkpoints" / str(step) / "meta"
    try:
        with _quiet_absl(), orbax_read():
            meta = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(path)
    except Exception as e:  # orbax raises many kinds; all mean "unreadable"
        raise CheckpointError(f"checkpoint step {step} in {workdir}: cannot read its meta item {path} "
                              f"({restore_failure(e)})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint step {step} in {workdir}: meta is {type(meta).__name__}, expected an object")
    return meta


def resolve_step(workdir, step: str | int = "best") -> tuple[int, dict[str, Any]]:
    """The checkpoint step to read and its meta.

    `"latest"`: the newest step. `"best"`: the step with the lowest validation
    loss, as recorded in the newest step's meta (`best_step`); without any
    validation in the run, the newest step (logged). An integer: that step.
    Only committed steps count (`checkpoint_steps`). `workdir`: a local path
    or a bucket URL. Raises `FileNotFoundError` (no workdir) or
    `CheckpointError` (no checkpoints, the step missing or its save
    unfinished, a best step that retention deleted).
    """
    workdir = workdir_path(workdir)
    if not workdir.is_dir():
        raise FileNotFoundError(f"workdir {str(workdir)!r} does not exist (train one with "
                                f"`tgjax train --workdir {workdir}`)")
    steps = committed_steps(workdir)
    if not steps:
        raise CheckpointError(f"workdir {str(workdir)!r} holds no checkpoints ({workdir / 'checkpoints'} is empty or "
                              f"missing); train first with `tgjax train --workdir {workdir}`")
    if isinstance(step, str) and step.isdigit():
        step = int(step)
    if isinstance(step, int):
        if step not in steps:
            unfinished = uncommitted_step(workdir, step)
            if unfinished:
                raise CheckpointError(f"checkpoint step {step} in {workdir} was never committed (its save did not "
                                      f"finish): {unfinished}; committed steps: {steps}")
            raise CheckpointError(f"workdir {str(workdir)!r} has no checkpoint step {step}; it has {steps}")
        return step, read_meta(workdir, step)
    if step not in STEP_CHOICES:
        raise ValueError(f"step: expected 'best', 'latest' or an integer, got {step!r}")
    latest = steps[-1]
    meta = read_meta(workdir, latest)
    if step == "latest":
        return latest, meta
    best = meta.get("best_step")
    if best is None:
        log.warning("%s: the run recorded no validation loss; using the latest step %d as 'best'", workdir, latest)
        return latest, meta
    best = int(best)
    if best not in steps:
        raise CheckpointError(f"workdir {str(workdir)!r}: the best step {best} (validation loss "
                              f"{meta.get('best_valid_loss')}) is no longer on disk (steps {steps}); "
                              f"pass step='latest' or one of those steps")
    return best, (meta if best == latest else read_meta(workdir, best))


@dataclasses.dataclass(frozen=True)
class FamilyCheckpoint:
    """One checked checkpoint step of a non-TG family's run (`open_family_checkpoint`)."""

    workdir: Any  # a local Path or an etils.epath.Path (`tgjax.workdir.workdir_path`)
    step: int
    meta: dict[str, Any]
    where: str  # "checkpoint step S in WORKDIR", for messages
    model_config: Any  # the family's model config, from the meta's "model"


def open_family_checkpoint(workdir, step: str | int, *, trainer: str, config_class,
                           reader: str) -> FamilyCheckpoint:
    """The step to read (`resolve_step`), checked whole, written by `trainer`, with its model config.

    `reader` says what refuses another trainer's run ("unsupervised parsing
    reads ON-LSTM language models"). Raises FileNotFoundError (no workdir) or
    CheckpointError (no checkpoints, a corrupt step, another trainer, no model
    config in the meta).
    """
    workdir = workdir_path(workdir)
    step_number, meta = resolve_step(workdir, step)
    where = f"checkpoint step {step_number} in {workdir}"
    problem = check_step(workdir, step_number)
    if problem:
        raise CheckpointError(f"{where} is corrupt or incomplete: {problem}")
    written_by = (meta.get("config") or {}).get("trainer")
    if written_by != trainer:
        raise CheckpointError(f"{where} was written by trainer {written_by!r}, not {trainer!r}: {reader}")
    try:
        # a family's config may say how to read a record written before its newer fields
        from_record = getattr(config_class, "from_record", None)
        model_config = from_record(meta["model"]) if from_record else config_class(**meta["model"])
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{where}: meta lacks the {config_class.__name__} model config ({e})") from e
    return FamilyCheckpoint(workdir, step_number, meta, where, model_config)


def read_word_list(checkpoint: FamilyCheckpoint) -> list[str]:
    """The run's `WORD_LIST_FILE` (id = line number), checked against the meta's `vocab_sha256` when recorded.

    Raises FileNotFoundError (no file) or VocabularyMismatch.
    """
    path = checkpoint.workdir / WORD_LIST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"workdir {str(checkpoint.workdir)!r} has checkpoints but no {WORD_LIST_FILE}: "
                                "cannot read the model's ids")
    words = read_lines_of(path)  # bad bytes: an error naming file:line:column
    if checkpoint.meta.get("vocab_sha256") not in (None, word_list_fingerprint(words)):
        raise VocabularyMismatch(f"{path} ({len(words)} words) is not the vocabulary {checkpoint.where} was trained "
                                 f"with ({checkpoint.meta.get('vocab_size')} words); restore the original file")
    return words


def unreadable_state(where: str, path, error: Exception) -> str:
    """The one line for a step whose `state` item orbax cannot read (truncated, or files deleted)."""
    return (f"{where}: cannot restore its parameters from {path} ({restore_failure(error)}); the step is "
            f"incomplete or corrupt: give another --step, or train again")


def restore_state_items(checkpoint: FamilyCheckpoint, target: dict) -> dict:
    """The `target` items (`jax.ShapeDtypeStruct` leaves) of the step's "state", on this host's first device."""
    import orbax.checkpoint as ocp

    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=sharding), target)
    path = checkpoint.workdir / "checkpoints" / str(checkpoint.step) / "state"
    try:
        with _quiet_absl(), orbax_read():
            return ocp.PyTreeCheckpointer().restore(
                path, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True))
    except Exception as e:  # orbax raises many kinds; all mean "unreadable"
        raise CheckpointError(unreadable_state(checkpoint.where, path, e)) from None


def _restore_params(workdir, step: int, abstract: dict, sharding) -> dict:
    """The `params` subtree of the `state` item, restored alone (partial restore)."""
    import orbax.checkpoint as ocp

    path = workdir / "checkpoints" / str(step) / "state"  # absolute or a URL (`workdir_path`), as orbax wants
    target = {"params": abstract}
    restore_args = jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=sharding), target)
    try:
        with _quiet_absl(), orbax_read():
            restored = ocp.PyTreeCheckpointer().restore(
                path, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True))
    except Exception as e:  # orbax raises many kinds; all mean "unreadable"
        raise CheckpointError(unreadable_state(f"checkpoint step {step} in {workdir}", path, e)) from None
    return restored["params"]


def model_config_from_meta(meta: dict[str, Any], where: str) -> tuple[str, ModelConfig, dict[str, Any]]:
    """(model name, ModelConfig, data section) recorded in a checkpoint's meta."""
    try:
        config = meta["config"]
        name = config["model"]["name"]
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        model_cfg = ModelConfig(**{k: v for k, v in meta["model"].items() if k in fields})
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{where}: meta lacks the model config ({e}); was it written by tgjax train?") from e
    return name, model_cfg, dict(config.get("data", {}))


def lm_rule(meta: dict[str, Any], where: str) -> str:
    """The data rule (`tg`, `txl_cc`, `txl_terminals`) a TG / TXL checkpoint's meta records; no parameter is read."""
    name, model_cfg, _ = model_config_from_meta(meta, where)
    return model_spec(name).pipeline_fields(model_cfg)["rule"]


def _restore_lm(workdir, *, step: str | int = "best", sequence_length: int | None = None,
                memory_length: int | None = None, device=None) -> RestoredLM:
    """Restores a trained model and its vocabulary from a training workdir (see the module docstring).

    Args:
      workdir: the `--workdir` of `tgjax train` (a local path or a bucket URL).
      step: "best" (lowest validation loss), "latest", or an integer step.
      sequence_length, memory_length: evaluation-time T and M (default: the training ones).
      device: where the parameters go (default: the first local device).
    Raises:
      FileNotFoundError: no workdir, or no vocabulary file in it.
      CheckpointError: no checkpoints, the step missing or corrupt.
      VocabularyMismatch: the vocabulary file is not the one the checkpoint was trained with.
    """
    workdir = workdir_path(workdir)
    step_number, meta = resolve_step(workdir, step)
    problem = check_step(workdir, step_number)
    if problem:
        raise CheckpointError(f"checkpoint step {step_number} in {workdir} is corrupt or incomplete: {problem}")
    where = f"checkpoint step {step_number} in {workdir}"
    name, model_cfg, data_cfg = model_config_from_meta(meta, where)

    vocab_path = saved_vocabulary_path(workdir)
    if vocab_path is None:
        raise FileNotFoundError(f"workdir {str(workdir)!r} has checkpoints but no vocabulary (vocab.json / "
                                f"vocab.model): cannot read the model's ids")
    try:
        vocab = load_vocabulary(vocab_path)
    except (ValueError, OSError) as e:
        raise VocabularyMismatch(f"{vocab_path}: cannot read the vocabulary ({e})") from e
    fingerprint = vocabulary_fingerprint(vocab)
    if meta.get("vocab_sha256") not in (None, fingerprint):
        raise VocabularyMismatch(
            f"{vocab_path} ({vocab.size} ids) is not the vocabulary {where} was trained with "
            f"({meta.get('vocab_size')} ids, sha256 {str(meta.get('vocab_sha256'))[:12]}..., this file "
            f"{fingerprint[:12]}...); restore the original vocabulary file")
    if vocab.size != model_cfg.vocab_size:
        raise VocabularyMismatch(f"{vocab_path} has {vocab.size} ids but the model of {where} has "
                                 f"{model_cfg.vocab_size}")

    changes = {k: v for k, v in (("sequence_length", sequence_length), ("memory_length", memory_length))
               if v is not None}
    trained_cfg = dataclasses.replace(model_cfg, **changes)
    # Inference walks the layers as a list and computes in float32, whatever the training knobs were: a
    # scanned checkpoint's stacked layers are unstacked, bf16 parameters widened.
    model_cfg = dataclasses.replace(trained_cfg, scan_layers=False, remat=False, dtype="float32",
                                    param_dtype="float32")
    device = device or jax.local_devices()[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    saved = model_parts(trained_cfg).abstract_params
    abstract = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(saved))
    pure = _restore_params(workdir, step_number, abstract, sharding)
    if trained_cfg.scan_layers:
        pure = unstack_layer_params(pure, trained_cfg.num_layers)
    pure = jax.tree.map(lambda a: a.astype(jnp.float32), pure)
    parts = model_parts(model_cfg)
    params = jax.tree.map(lambda x: x, parts.abstract_params)  # a fresh State to fill
    nnx.replace_by_pure_dict(params, pure)

    # The constants (position tables) and RNG streams, built on the device; XLA drops the parameter draws.
    def make_rest():
        _, _, rest = nnx.split(TransformerLM(model_cfg, rngs=nnx.Rngs(params=0, dropout=0)), nnx.Param, ...)
        return rest

    with jax.threefry_partitionable(False), jax.default_device(device):
        rest = jax.jit(make_rest)()
    model = nnx.merge(parts.graphdef, params, rest)

    fields = dict(model_spec(name).pipeline_fields(model_cfg))
    fields["transparency_depth"] = int(data_cfg.get("transparency_depth", -1))
    return RestoredLM(model=model, vocab=vocab, model_name=name, model_config=model_cfg, pipeline_fields=fields,
                       step=step_number, workdir=workdir, vocab_fingerprint=fingerprint, meta=meta,
                       graphdef=parts.graphdef, params=params, rest=rest)


def from_model(model: TransformerLM, vocab: Vocabulary, model_name: str, *, transparency_depth: int = -1
               ) -> RestoredLM:
    """A `RestoredLM` around a model in memory (a fresh or just-trained one), for tests and notebooks."""
    cfg = model.config
    if vocab.size != cfg.vocab_size:
        raise ValueError(f"vocabulary has {vocab.size} ids but the model has {cfg.vocab_size}")
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    fields = dict(model_spec(model_name).pipeline_fields(cfg), transparency_depth=transparency_depth)
    return RestoredLM(model=model, vocab=vocab, model_name=model_name, model_config=cfg, pipeline_fields=fields,
                       step=-1, workdir=Path("<memory>"), vocab_fingerprint=vocabulary_fingerprint(vocab), meta={},
                       graphdef=graphdef, params=params, rest=rest)
