"""A trained stack-attention language model on words back from its workdir, as a sentence scorer: exact log p(x).

    scorer = tgjax.load("runs/stack_lm_tiny").scorer()    # best checkpoint (`_restore_scorer` here)
    (result,) = scorer.search([["the", "dog", "barks", "."]])
    result.log_prob, result.surprisals, result.end_surprisal

`search` is the sentence-scoring interface of every scorer
(`tgjax.infer.beam.BeamResult` per sentence), so SyntaxGym, BLiMP, `tgjax eval
score --input-format words` and `tgjax eval ppl` run on it unchanged: the
chain rule, no search. A sentence is read as it was trained
(`tgjax.train.tasks.stack_lm`): alone, `<bos> w_1 .. w_n`, the model in eval
mode (dropouts off); log p(x) = Σ_t log p(w_t | <bos> w_<t) + log p(<eos> |
<bos> x), in nats. Words outside the vocabulary read as `<unk>` and are
counted (`num_unknown`), as the ON-LSTM scorer does.

What a workdir holds (written by `tgjax train` with `trainer="stack_lm"`):
`checkpoints/<step>/state` (the trainer's `ParamsState`, `params` read
here), `checkpoints/<step>/meta` with `model` (the `StackLMConfig` fields),
`config.trainer`, `vocab_sha256`; `vocab.txt`, one word per line (id = line
number; `<bos>` last).

Batches of sentences are right-padded to a multiple of `length_bucket`
positions (padding comes after the words; the model and its stack read left
to right, so it changes nothing before it), so a treebank compiles a handful
of shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tgjax.data.word_stream import BOS, EOS, UNK, sentence_batch
from tgjax.infer.beam import BeamResult
from tgjax.infer.chain_rule import WordSpace, chain_rule_result
from tgjax.infer.loading import open_family_checkpoint, read_word_list, restore_state_items
from tgjax.models.stack_lm import StackLMConfig, StackTransformerLM
from tgjax.ops import token_log_probs

__all__ = ["StackLMScorer", "from_model"]

_DISPLAY = {"superposition": "Tf+Sup", "nondeterministic": "Tf+Nd", "none": "Tf"}


@dataclasses.dataclass
class StackLMScorer:
    """A stack-attention LM on words, ready to score sentences (`search`).

    Attributes:
      model: the `StackTransformerLM` (put in eval mode here).
      words: the vocabulary, id order (`<eos>`, `<unk>` and `<bos>` among them).
      batch_size: sentences per forward pass.
      length_bucket: padded lengths are multiples of this.
      step, workdir: where the parameters came from.
      num_words_read, num_unknown: words scored so far, and how many of them became `<unk>`.
    """

    model: StackTransformerLM
    words: list[str]
    batch_size: int = 64
    length_bucket: int = 16
    step: int = -1
    workdir: Path = Path("<memory>")
    num_words_read: int = 0
    num_unknown: int = 0

    def __post_init__(self):
        self.index = {word: i for i, word in enumerate(self.words)}
        for needed in (BOS, EOS, UNK):
            if needed not in self.index:
                raise ValueError(f"the vocabulary has no {needed!r}: it is not a stack_lm vocabulary")
        if len(self.words) != self.model.config.input_vocab_size:
            raise ValueError(f"{len(self.words)} words in the vocabulary, the model has "
                             f"{self.model.config.input_vocab_size} ids")
        self.model.eval()
        graphdef, state = nnx.split(self.model)

        @jax.jit
        def next_token_log_probs(state, inputs, targets):
            """[B, L]: log p(targets[:, t] | inputs[:, :t + 1])."""
            return token_log_probs(nnx.merge(graphdef, state)(inputs), targets)

        self._state = state
        self._next_token_log_probs = next_token_log_probs
        self.space = WordSpace(self.index, UNK)

    def encode(self, words: Sequence[str]) -> np.ndarray:
        """The word ids [n]; unknown words become `<unk>` (counted)."""
        unknown = self.index[UNK]
        ids = [self.index.get(word, unknown) for word in words]
        self.num_words_read += len(ids)
        self.num_unknown += sum(i == unknown for i in ids) - sum(word == UNK for word in words)
        return np.asarray(ids, np.int32)

    def search(self, sentences: Sequence[Sequence[str]]) -> list[BeamResult]:
        """Per sentence, log p(w_1 .. w_n <eos> | <bos>) by the chain rule (exact; nats) and each word's surprisal.

        The end surprisal is -log p(<eos> | x); `surprisals.sum() + end_surprisal == -log_prob`. Words outside
        the vocabulary are read as `<unk>` (counted in `num_unknown` of each result).
        """
        results: list[BeamResult] = []
        unknown_id, bos, eos = self.index[UNK], self.index[BOS], self.index[EOS]
        for start in range(0, len(sentences), self.batch_size):
            chunk = [list(words) for words in sentences[start:start + self.batch_size]]
            encoded = [self.encode(words) for words in chunk]
            batch = sentence_batch(encoded, bos, eos, self.batch_size, self.length_bucket)
            log_probs = np.asarray(jax.device_get(self._next_token_log_probs(
                self._state, jnp.asarray(batch["inputs"]), jnp.asarray(batch["targets"]))), np.float64)
            for row, (words, ids) in enumerate(zip(chunk, encoded)):
                unknown = sum(1 for i, word in zip(ids, words) if i == unknown_id and word != UNK)
                results.append(chain_rule_result(words, log_probs[row, :len(words) + 1], unknown))  # words, <eos>
        return results

    def describe(self) -> str:
        c = self.model.config
        where = f"{self.workdir} step {self.step}" if self.step >= 0 else "a model in memory"
        stack = {"superposition": f", m {c.stack_embedding_size}",
                 "nondeterministic": f", |Q| {c.num_states}, |Γ| {c.stack_alphabet_size}, m {c.stack_embedding_size}",
                 "none": ""}[c.stack]
        unknown = (f"; {self.num_unknown} of {self.num_words_read} words not in the vocabulary, read as {UNK}"
                   if self.num_words_read else "")
        return (f"stack-attention LM {_DISPLAY[c.stack]} from {where} (d_model {c.d_model}, {c.num_layers} layers"
                f"{stack}){unknown}")


def from_model(model: StackTransformerLM, words: Sequence[str], *, batch_size: int = 64, length_bucket: int = 16
               ) -> StackLMScorer:
    """A scorer around a model in memory (tests, notebooks)."""
    return StackLMScorer(model, list(words), batch_size=batch_size, length_bucket=length_bucket)


def _restore_scorer(workdir: str | Path, step: str | int = "best", *, batch_size: int = 64,
                    length_bucket: int = 16) -> StackLMScorer:
    """Restores a trained `stack_lm` run (see the module docstring) as a `StackLMScorer`.

    Raises FileNotFoundError (no workdir / vocabulary), CheckpointError (no checkpoints, a missing or corrupt
    step, not a stack_lm run) or VocabularyMismatch.
    """
    checkpoint = open_family_checkpoint(workdir, step, trainer="stack_lm", config_class=StackLMConfig,
                                        reader="this scorer reads stack-attention language models on words")
    words = read_word_list(checkpoint)
    model = StackTransformerLM(checkpoint.model_config, rngs=nnx.Rngs(params=0, dropout=0))
    params = nnx.state(model, nnx.Param)
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(params))
    nnx.replace_by_pure_dict(params, restore_state_items(checkpoint, {"params": shapes})["params"])
    nnx.update(model, params)
    return StackLMScorer(model, words, batch_size=batch_size, length_bucket=length_bucket, step=checkpoint.step,
                         workdir=checkpoint.workdir)
