"""A trained Pushdown-LM (or Base-LM) back from its workdir, for evaluation: parameters only, no optimiser.

    loaded = load_pushdown_lm("runs/pushdown_dyck")             # the best step by validation loss
    loaded = load_pushdown_lm("runs/base_dyck", step="latest")

What it reads (written by `tgjax.train.tasks.pushdown_lm`): the checked
checkpoint step (`tgjax.infer.loading.open_family_checkpoint`: written by
trainer "pushdown_lm", every file of the step present and matching its
manifest), the model config in its meta, the `params` subtree of its
`state` item, and `vocab.txt` (one token string per id), whose sha256 must
be the meta's `vocab_sha256` (the task fingerprints the file's exact text).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import jax
from flax import nnx

from tgjax.infer.loading import open_family_checkpoint, restore_state_items
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig
from tgjax.workdir import WORD_LIST_FILE, VocabularyMismatch

__all__ = ["LoadedPushdownLM", "load_pushdown_lm"]


@dataclasses.dataclass
class LoadedPushdownLM:
    model: PushdownLM
    tokens: list[str]  # id -> token string
    step: int
    workdir: Path
    config: dict[str, Any]  # the training config (JSON), as the checkpoint recorded it
    where: str  # "checkpoint step S in WORKDIR"

    @property
    def is_base(self) -> bool:
        """Base-LM: no layer reads the stack tape (the attachment head still does)."""
        return self.model.config.pushdown_layers == ()

    def describe(self) -> str:
        c = self.model.config
        kind = "Base-LM" if self.is_base else "Pushdown-LM"
        return f"{kind}, {c.num_layers} layers, d={c.d_model}, {self.where}"


def _model_config(**saved) -> PushdownLMConfig:
    layers = saved.get("pushdown_layers")
    if layers is not None:
        saved["pushdown_layers"] = tuple(layers)  # JSON gives a list; Base-LM is the empty tuple
    return PushdownLMConfig(**saved)


def load_pushdown_lm(workdir: str | Path, step: str | int = "best", *,
                     reader: str = "this command reads Pushdown-LM / Base-LM runs") -> LoadedPushdownLM:
    """The model of a `pushdown_lm` run at `step` ("best", "latest" or a number).

    Raises FileNotFoundError (no workdir, no vocab.txt), CheckpointError (no usable step, another
    trainer's run) or VocabularyMismatch.
    """
    checkpoint = open_family_checkpoint(workdir, step, trainer="pushdown_lm", config_class=_model_config,
                                        reader=reader)
    path = checkpoint.workdir / WORD_LIST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"workdir {str(checkpoint.workdir)!r} has checkpoints but no {WORD_LIST_FILE}: "
                                "cannot read the model's ids")
    data = path.read_bytes()
    recorded = checkpoint.meta.get("vocab_sha256")
    if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
        raise VocabularyMismatch(f"{path} is not the vocabulary {checkpoint.where} was trained with; restore the "
                                 "original file")
    abstract = nnx.eval_shape(lambda: PushdownLM(checkpoint.model_config, rngs=nnx.Rngs(0)))
    graphdef, abstract_params, _ = nnx.split(abstract, nnx.Param, ...)
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(abstract_params))
    restored = restore_state_items(checkpoint, {"params": shapes})
    params = jax.tree.map(lambda x: x, abstract_params)  # a State to fill
    nnx.replace_by_pure_dict(params, restored["params"])
    # The non-parameter state (dropout streams) is unused at evaluation: fresh ones.
    fresh_rest = nnx.split(PushdownLM(checkpoint.model_config, rngs=nnx.Rngs(0)), nnx.Param, ...)[2]
    model = nnx.merge(graphdef, params, fresh_rest)
    tokens = data.decode("utf-8").splitlines()
    return LoadedPushdownLM(model, tokens, checkpoint.step, checkpoint.workdir, checkpoint.meta.get("config") or {},
                            checkpoint.where)
