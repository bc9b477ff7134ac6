"""A trained Pushdown-LM back from its workdir (`trainer="pushdown_lm"`), for evaluation.

    loaded = tgjax.load("runs/pushdown_tiny").restore()     # best step by validation loss
    search = PushdownSearch(loaded.model, loaded.vocab)      # tgjax.infer.pushdown_search

(`_restore_pushdown` is the Pushdown-LM entry of `tgjax.load`'s family table, `tgjax.infer.api`.)

What the Pushdown task (`tgjax.train.tasks.pushdown_lm`) leaves in a workdir:
the orbax checkpoints (item `state`: its `params` are read, nothing else;
item `meta`: the `PushdownLMConfig` as `model`, the training config,
`vocab_sha256`), and `vocab.txt`, one token string per id, whose sha256 is
`vocab_sha256`. The vocabulary object is rebuilt from what the run used:
the Dyck vocabulary (`data.source="dyck"`), the saved vocabulary file of
`data.vocab_path` (sub-words), or a word dictionary of `vocab.txt`'s words;
its token strings must hash to `vocab_sha256`, else `VocabularyMismatch`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import jax
import numpy as np
from flax import nnx

from tgjax.infer.loading import (
    open_family_checkpoint,
    restore_state_items,
)
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig
from tgjax.workdir import VocabularyMismatch, workdir_path

TRAINER = "pushdown_lm"
VOCABULARY_TEXT = "vocab.txt"


@dataclasses.dataclass
class LoadedPushdown:
    """model (`PushdownLM`, parameters restored), vocab, step, workdir, meta (the checkpoint's facts)."""

    model: PushdownLM
    vocab: Any
    step: int
    workdir: Any  # a local Path or an etils.epath.Path (`tgjax.workdir.workdir_path`)
    meta: dict

    @property
    def model_name(self) -> str:
        return "pushdown_lm" if self.model.config.pushdown_layers != () else "base_lm (pushdown head)"

    def describe(self) -> str:
        return f"{self.model_name} from {self.workdir} step {self.step}"


def _config_from_meta(**fields) -> PushdownLMConfig:
    if fields.get("pushdown_layers") is not None:
        fields["pushdown_layers"] = tuple(fields["pushdown_layers"])
    return PushdownLMConfig(**fields)


def _token_strings(vocab) -> list[str]:
    if hasattr(vocab, "tokens"):
        return list(vocab.tokens)
    return [str(t) for t in vocab.decode(np.arange(vocab.size))]


def load_vocabulary(workdir, meta: dict, where: str):
    """The run's vocabulary object, checked against `vocab.txt` and the checkpoint's `vocab_sha256`."""
    from tgjax.data import vocab as vocabulary

    data = (meta.get("config") or {}).get("data") or {}
    path = workdir / VOCABULARY_TEXT
    if not path.is_file():
        raise FileNotFoundError(f"workdir {str(workdir)!r} has checkpoints but no {VOCABULARY_TEXT}: cannot read "
                                f"the model's ids")
    text = path.read_text(encoding="utf-8")
    if data.get("source") == "dyck":
        from tgjax.data.dyck import dyck_vocabulary

        vocab = dyck_vocabulary(int(data.get("dyck_num_types", 20)))
    elif data.get("vocab_path"):
        vocab = vocabulary.load_vocabulary(workdir_path(data["vocab_path"]))
    else:
        tokens = text.splitlines()
        reserved = list(vocabulary.RESERVED_TOKENS)
        if tokens[:len(reserved)] != reserved:
            raise VocabularyMismatch(f"{path}: the first lines are {tokens[:len(reserved)]}, expected the reserved "
                                     f"tokens {reserved}")
        vocab = vocabulary.WordDictionary(tokens[len(reserved):], [])
    rebuilt = "\n".join(_token_strings(vocab)) + "\n"
    expected = meta.get("vocab_sha256")
    if rebuilt != text or expected not in (None, hashlib.sha256(text.encode("utf-8")).hexdigest()):
        raise VocabularyMismatch(f"{path} ({len(text.splitlines())} ids) is not the vocabulary {where} was trained "
                                 f"with ({meta.get('vocab_size')} ids); restore the original file")
    return vocab


def _restore_pushdown(workdir, *, step: str | int = "best") -> LoadedPushdown:
    """Restores a Pushdown-LM and its vocabulary (see the module docstring).

    Raises FileNotFoundError (no workdir or vocabulary), CheckpointError (no
    or corrupt checkpoint, another trainer's run), VocabularyMismatch.
    """
    checkpoint = open_family_checkpoint(workdir, step, trainer=TRAINER, config_class=_config_from_meta,
                                        reader="Pushdown inference reads Pushdown-LM runs (tgjax train "
                                               "--config configs/pushdown_*.py)")
    vocab = load_vocabulary(checkpoint.workdir, checkpoint.meta, checkpoint.where)
    config = checkpoint.model_config
    if vocab.size != config.vocab_size:
        raise VocabularyMismatch(f"the vocabulary has {vocab.size} ids but the model of {checkpoint.where} has "
                                 f"{config.vocab_size}")
    abstract = nnx.eval_shape(lambda: PushdownLM(config, rngs=nnx.Rngs(0)))
    _, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    target = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(abstract_params))
    restored = restore_state_items(checkpoint, {"params": target})["params"]
    model = PushdownLM(config, rngs=nnx.Rngs(0))
    _, params, _ = nnx.split(model, nnx.Param, ...)
    nnx.replace_by_pure_dict(params, restored)
    nnx.update(model, params)
    return LoadedPushdown(model=model, vocab=vocab, step=checkpoint.step, workdir=checkpoint.workdir,
                          meta=checkpoint.meta)


__all__ = ["LoadedPushdown", "load_vocabulary"]
