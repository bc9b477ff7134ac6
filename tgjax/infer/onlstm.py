"""A trained ON-LSTM language model back from its workdir: the syntactic distances it computes, and log p(x).

    parser = tgjax.load("runs/onlstm_tiny").parser()       # best checkpoint (`_restore_parser` here)
    per_sentence = parser.layer_distances([["the", "dog", "barks"], ...])   # each [num_layers, n]
    scored = parser.search([["the", "dog", "barks"]])     # exact log p(w_1 .. w_n <eos> | <eos>), surprisals

`search` is the sentence-scoring interface the TG / TXL and Pushdown scorers
share (`tgjax.infer.beam.BeamResult` per sentence), so SyntaxGym, BLiMP and
the like run on an ON-LSTM unchanged: the chain rule, no search.

Every sentence is read alone from the zero state in eval mode (dropouts off,
DropConnect's W_hh * (1 - p)), as the release's parsing script does, framed by
the training stream's boundary token: `<eos> w_1 .. w_n <eos>` (the LM was
trained on sentences each followed by `<eos>`, so `<eos>` is what precedes a
sentence; released-code.md §2.4 restates the release's framing as `<eos>` too,
while the snapshot of its data_ptb.py read for this writes `<s>` .. `</s>`,
which a Mikolov-PTB dictionary lacks, so there they would read as `<unk>`).
Word i's distance is that of the step whose *input* is w_i, i.e.
step i + 1 (`tgjax.syntax.distance.word_distances(..., num_leading=1)`), with
d_t = 1 − mean over chunks of the master forget gate f̃_t of that layer.
Words outside the vocabulary are read as `<unk>` and counted (`num_unknown`).

What a workdir holds (written by `tgjax train` with `trainer="onlstm_lm"`):
`checkpoints/<step>/state` (orbax, the trainer's `ParamsState`) with `params`
and `average` = {`params`: ASGD's running mean, `count`: 0 until ASGD ran};
`checkpoints/<step>/meta` with `model` (the `OnLSTMLMConfig` fields),
`config.trainer`, `vocab_sha256` and `best_step`; `vocab.txt`, one word per
line (id = line number). The parameters used are the ones validation used at
that step: the ASGD average when averaging had run (`average/count > 0`),
else the raw iterate; the release likewise saves the averaged weights once
ASGD runs.

Batches of sentences are right-padded to a multiple of `length_bucket` steps
(padding comes after the words, and the recurrence is causal, so it changes
nothing before it), so a treebank compiles a handful of shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.infer.beam import BeamResult
from tgjax.infer.chain_rule import WordSpace, chain_rule_result
from tgjax.infer.loading import open_family_checkpoint, read_word_list, restore_state_items
from tgjax.models.onlstm_lm import OnLSTMLM, OnLSTMLMConfig
from tgjax.syntax.distance import word_distances

__all__ = ["BOUNDARY", "UNKNOWN", "OnLSTMParser", "from_model", "step_distances"]

BOUNDARY = "<eos>"  # the training stream's sentence separator (tgjax.data.word_stream.EOS)
UNKNOWN = "<unk>"


def step_distances(model: OnLSTMLM, tokens, mask=None):
    """d^f per layer and step: tokens [B, T] from the zero state -> [num_layers, B, T] (deterministic)."""
    _, _, aux = model(tokens, None, deterministic=True, mask=mask)
    return jnp.stack([1.0 - jnp.mean(gate, axis=-1) for gate in aux["master_forget"]])


@dataclasses.dataclass
class OnLSTMParser:
    """An ON-LSTM LM ready to give per-layer word distances.

    Attributes:
      model: the `OnLSTMLM` with the chosen parameters.
      words: the vocabulary, id order.
      batch_size: sentences per forward pass.
      length_bucket: padded lengths are multiples of this.
      step, workdir, averaged: where the parameters came from (averaged: the ASGD mean).
      num_words_read, num_unknown: words fed so far, and how many of them became `<unk>`.
    """

    model: OnLSTMLM
    words: list[str]
    batch_size: int = 64
    length_bucket: int = 16
    step: int = -1
    workdir: Path = Path("<memory>")
    averaged: bool = False
    num_words_read: int = 0
    num_unknown: int = 0

    def __post_init__(self):
        self.index = {word: i for i, word in enumerate(self.words)}
        for needed in (BOUNDARY, UNKNOWN):
            if needed not in self.index:
                raise ValueError(f"the vocabulary has no {needed!r}: it is not an onlstm_lm vocabulary")
        if len(self.words) != self.model.config.vocab_size:
            raise ValueError(f"{len(self.words)} words in the vocabulary, the model has {self.model.config.vocab_size}")
        graphdef, state = nnx.split(self.model)

        @jax.jit
        def distances(state, tokens):
            return step_distances(nnx.merge(graphdef, state), tokens)

        @jax.jit
        def next_token_log_probs(state, tokens):
            """tokens [B, L] -> [B, L - 1]: log p(tokens[:, t + 1] | tokens[:, :t + 1])."""
            logits, _, _ = nnx.merge(graphdef, state)(tokens[:, :-1], None, deterministic=True)
            log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
            return jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1)[..., 0]

        self._state = state
        self._distances = distances
        self._next_token_log_probs = next_token_log_probs
        self.space = WordSpace(self.index, UNKNOWN)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_layers

    def encode(self, words: Sequence[str]) -> np.ndarray:
        """`<eos> w_1 .. w_n <eos>` as ids [n + 2]; unknown words become `<unk>` (counted)."""
        unknown = self.index[UNKNOWN]
        ids = [self.index.get(word, unknown) for word in words]
        self.num_words_read += len(ids)
        self.num_unknown += sum(i == unknown for i in ids) - sum(word == UNKNOWN for word in words)
        boundary = self.index[BOUNDARY]
        return np.asarray([boundary, *ids, boundary], np.int32)

    def layer_distances(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Per sentence, `[num_layers, n]` float64 distances of its n words (an empty sentence gives `[L, 0]`)."""
        results: list[np.ndarray] = []
        for start in range(0, len(sentences), self.batch_size):
            chunk = sentences[start:start + self.batch_size]
            encoded = [self.encode(words) for words in chunk]
            tokens = self._padded(encoded)
            steps = np.asarray(jax.device_get(self._distances(self._state, jnp.asarray(tokens))), np.float64)
            for row, words in enumerate(chunk):
                results.append(np.stack([word_distances(steps[layer, row], len(words), num_leading=1)
                                         for layer in range(self.num_layers)]))
        return results

    def _padded(self, encoded: list[np.ndarray]) -> np.ndarray:
        """[batch_size, L] ids: each row's ids, then `<eos>` up to a multiple of `length_bucket`."""
        length = -(-max(len(ids) for ids in encoded) // self.length_bucket) * self.length_bucket
        tokens = np.full((self.batch_size, length), self.index[BOUNDARY], np.int32)
        for row, ids in enumerate(encoded):
            tokens[row, :len(ids)] = ids
        return tokens

    def search(self, sentences: Sequence[Sequence[str]]) -> list[BeamResult]:
        """Per sentence, log p(w_1 .. w_n <eos> | <eos>) by the chain rule (exact; nats) and each word's surprisal.

        The end surprisal is -log p(<eos> | x); `surprisals.sum() + end_surprisal == -log_prob`. Words outside
        the vocabulary are read as `<unk>` (counted in `num_unknown` of each result).
        """
        results: list[BeamResult] = []
        unknown_id = self.index[UNKNOWN]
        for start in range(0, len(sentences), self.batch_size):
            chunk = [list(words) for words in sentences[start:start + self.batch_size]]
            encoded = [self.encode(words) for words in chunk]
            log_probs = np.asarray(jax.device_get(self._next_token_log_probs(
                self._state, jnp.asarray(self._padded(encoded)))), np.float64)
            for row, (words, ids) in enumerate(zip(chunk, encoded)):
                unknown = sum(1 for i, word in zip(ids[1:-1], words) if i == unknown_id and word != UNKNOWN)
                results.append(chain_rule_result(words, log_probs[row, :len(words) + 1], unknown))  # words, <eos>
        return results

    def describe(self) -> str:
        config = self.model.config
        where = f"{self.workdir} step {self.step}" if self.step >= 0 else "a model in memory"
        unknown = (f"; {self.num_unknown} of {self.num_words_read} words not in the vocabulary, read as {UNKNOWN}"
                   if self.num_words_read else "")
        kind = "ON-LSTM" if config.ordered else "plain LSTM (model.ordered=False; distances from its forget gates)"
        return (f"{kind} from {where} ({'ASGD-averaged' if self.averaged else 'raw'} parameters), layers "
                f"{config.layer_sizes()} chunk {config.chunk_size}{unknown}")


def from_model(model: OnLSTMLM, words: Sequence[str], *, batch_size: int = 64, length_bucket: int = 16
               ) -> OnLSTMParser:
    """A parser around a model in memory (tests, notebooks)."""
    return OnLSTMParser(model, list(words), batch_size=batch_size, length_bucket=length_bucket)


def _restore_parser(workdir: str | Path, step: str | int = "best", *, batch_size: int = 64, length_bucket: int = 16
                    ) -> OnLSTMParser:
    """Restores a trained `onlstm_lm` run (see the module docstring) as an `OnLSTMParser`.

    Raises FileNotFoundError (no workdir / vocabulary), CheckpointError (no
    checkpoints, a missing or corrupt step, not an onlstm_lm run) or
    VocabularyMismatch.
    """
    checkpoint = open_family_checkpoint(workdir, step, trainer="onlstm_lm", config_class=OnLSTMLMConfig,
                                        reader="unsupervised parsing reads ON-LSTM language models")
    words = read_word_list(checkpoint)
    abstract_model = nnx.eval_shape(lambda: OnLSTMLM(checkpoint.model_config, rngs=nnx.Rngs(0)))
    graphdef, abstract_params = nnx.split(abstract_model, nnx.Param)
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(abstract_params))
    target = {"params": shapes, "average": {"params": shapes, "count": jax.ShapeDtypeStruct((), jnp.int32)}}
    restored = restore_state_items(checkpoint, target)
    averaged = int(restored["average"]["count"]) > 0
    params = jax.tree.map(lambda x: x, abstract_params)  # a State to fill
    nnx.replace_by_pure_dict(params, restored["average"]["params"] if averaged else restored["params"])
    model = nnx.merge(graphdef, params)
    return OnLSTMParser(model, words, batch_size=batch_size, length_bucket=length_bucket, step=checkpoint.step,
                        workdir=checkpoint.workdir, averaged=averaged)
