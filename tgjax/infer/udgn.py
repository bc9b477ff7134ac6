"""A trained UDGN masked LM back from its workdir: p(head) per sentence and masked-LM loss.

    parser = tgjax.load("runs/udgn_tiny").parser()           # best checkpoint (`_restore_parser` here)
    probs = parser.head_probs([["the", "dog", "barks"], ...])  # each [n, n]: p(head of i = j)
    loss, count = parser.mlm_loss(sentences, runs=5)          # pooled masked-token NLL

Every sentence is read alone (no context), in eval mode, in the release's
word form (lower-cased, digit runs -> N: `tgjax.syntax.distance.release_word_form`);
words outside the vocabulary read as `<unk>` (counted in `num_unknown`).

What a workdir holds (written by `tgjax train` with `trainer="mlm"`,
`tgjax.train.tasks.mlm`): `checkpoints/<step>/state` (orbax) with `params`;
`checkpoints/<step>/meta` with `model` (the `UDGNConfig` fields),
`config.trainer`, `vocab_sha256`; `vocab.txt`, one word per line (id = line
number, `<unk>` `<pad>` `<mask>` first).

Sentences are batched by length, widths rounded up to a multiple of
`length_bucket`, `batch_size` rows (empty filler rows), so a treebank
compiles a few shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.infer.loading import open_family_checkpoint, read_word_list, restore_state_items
from tgjax.models.mlm_masking import PAD_ID, SPECIALS, UNK, UNK_ID, mask_tokens, masked_nll
from tgjax.models.udgn import UDGN, UDGNConfig
from tgjax.syntax.distance import release_word_form

__all__ = ["UDGNParser", "from_model"]

MASK_RATE = 0.3  # the release's (training's) rate, for the MLM perplexity


@dataclasses.dataclass
class UDGNParser:
    """A UDGN ready to give head distributions and MLM losses (module docstring)."""

    model: UDGN
    words: list[str]
    batch_size: int = 64
    length_bucket: int = 16
    step: int = -1
    workdir: Path = Path("<memory>")
    word_form: str = "release"
    num_words_read: int = 0
    num_unknown: int = 0

    def __post_init__(self):
        if tuple(self.words[:3]) != SPECIALS:
            raise ValueError(f"the vocabulary starts {self.words[:3]}, expected {list(SPECIALS)}: "
                             "not an mlm vocabulary")
        if len(self.words) != self.model.config.vocab_size:
            raise ValueError(f"{len(self.words)} words in the vocabulary, the model has {self.model.config.vocab_size}")
        self.index = {w: i for i, w in enumerate(self.words)}
        graphdef, state = nnx.split(self.model)

        @jax.jit
        def probs(state, tokens, valid):
            return nnx.merge(graphdef, state)(tokens, valid, deterministic=True).head_probs

        @jax.jit
        def mlm(state, tokens, valid, key):
            inputs, masked = mask_tokens(key, tokens, valid, MASK_RATE)
            logits = nnx.merge(graphdef, state)(inputs, valid, deterministic=True).logits
            return masked_nll(logits, tokens, masked)

        self._state, self._probs, self._mlm = state, probs, mlm

    def encode(self, words: Sequence[str], *, count: bool = True) -> np.ndarray:
        """Ids [n]; `count`: add to `num_words_read` / `num_unknown` (the parse pass counts, the MLM pass not)."""
        form = release_word_form if self.word_form == "release" else (lambda w: w)
        ids = np.array([self.index.get(form(w), UNK_ID) for w in words], np.int32)
        if count:
            self.num_words_read += len(ids)
            self.num_unknown += int(np.sum(ids == UNK_ID)) - sum(form(w) == UNK for w in words)
        return ids

    def _batches(self, sentences: Sequence[Sequence[str]], *, count: bool = True):
        """(sentence indices, tokens [R, W], valid [R, W]) in length order."""
        if any(len(s) == 0 for s in sentences):
            raise ValueError("an empty sentence has no dependency tree (drop it before parsing)")
        encoded = [self.encode(s, count=count) for s in sentences]
        order = np.argsort([len(e) for e in encoded], kind="stable")
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            width = -(-max(len(encoded[i]) for i in chunk) // self.length_bucket) * self.length_bucket
            tokens = np.full((self.batch_size, width), PAD_ID, np.int32)
            valid = np.zeros((self.batch_size, width), bool)
            for row, i in enumerate(chunk):
                tokens[row, :len(encoded[i])] = encoded[i]
                valid[row, :len(encoded[i])] = True
            yield chunk, tokens, valid

    def head_probs(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence of n words, H [n, n] float64: p(head of i = j), rows summing to 1 (diagonal included)."""
        out: list[np.ndarray] = [np.empty((0, 0))] * len(sentences)
        for chunk, tokens, valid in self._batches(sentences):
            probs = np.asarray(jax.device_get(self._probs(self._state, jnp.asarray(tokens), jnp.asarray(valid))),
                               np.float64)
            for row, i in enumerate(chunk):
                n = len(sentences[i])
                out[i] = probs[row, :n, :n]
        return out

    def mlm_loss(self, sentences: Sequence[Sequence[str]], runs: int = 5, seed: int = 0) -> tuple[float, int]:
        """(masked-token cross-entropy pooled over `runs` fixed maskings, number of masked tokens)."""
        total, count = 0.0, 0
        batches = list(self._batches(sentences, count=False))
        for run in range(runs):
            for b, (_, tokens, valid) in enumerate(batches):
                key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), run), b)
                nll, n = self._mlm(self._state, jnp.asarray(tokens), jnp.asarray(valid), key)
                total += float(nll)
                count += int(n)
        return total / max(count, 1), count

    def describe(self) -> str:
        c = self.model.config
        where = f"{self.workdir} step {self.step}" if self.step >= 0 else "a model in memory"
        unknown = (f"; {self.num_unknown} of {self.num_words_read} words read as {UNK}" if self.num_words_read
                   else "")
        return (f"UDGN from {where} (d={c.d_model}, {c.num_layers} DGN layers, parser "
                f"{c.parser_layers}x{c.parser_hidden}, vocabulary {c.vocab_size}){unknown}")


def from_model(model: UDGN, words: Sequence[str], *, batch_size: int = 64, length_bucket: int = 16) -> UDGNParser:
    """A parser around a model in memory (tests, notebooks)."""
    return UDGNParser(model, list(words), batch_size=batch_size, length_bucket=length_bucket)


def _restore_parser(workdir: str | Path, step: str | int = "best", *, batch_size: int = 64, length_bucket: int = 16
                    ) -> UDGNParser:
    """Restores a trained `mlm` run (module docstring) as a `UDGNParser`.

    Raises FileNotFoundError (no vocabulary), CheckpointError (no checkpoints, a
    corrupt step, not an mlm run) or VocabularyMismatch.
    """
    checkpoint = open_family_checkpoint(workdir, step, trainer="mlm", config_class=UDGNConfig,
                                        reader="dependency evaluation reads UDGN masked language models")
    words = read_word_list(checkpoint)
    model = UDGN(checkpoint.model_config, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(params))
    restored = restore_state_items(checkpoint, {"params": shapes})
    nnx.replace_by_pure_dict(params, restored["params"])
    return UDGNParser(nnx.merge(graphdef, params, rest), words, batch_size=batch_size, length_bucket=length_bucket,
                      step=checkpoint.step, workdir=checkpoint.workdir)
