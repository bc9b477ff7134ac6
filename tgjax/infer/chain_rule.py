"""What the word-level language models that score a sentence by the chain rule share (ON-LSTM, stack attention).

A left-to-right model over a closed word vocabulary gives log p(w_t | w_<t)
for every word and for the end token after the last; log p(x) is their sum,
exactly, with no search. These are the two pieces every such scorer hands the
evaluation commands (`tgjax.infer.api.SentenceScorer`):

    space = WordSpace(index, unknown="<unk>")      # encode_word(w) -> (id, unknown?)
    result = chain_rule_result(words, steps, num_unknown)   # steps [n + 1]: the words', then the end's log p
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tgjax.infer.beam import BeamResult

__all__ = ["WordSpace", "chain_rule_result"]


@dataclasses.dataclass(frozen=True)
class WordSpace:
    """What the unknown-word counters of SyntaxGym / BLiMP ask of a scorer: `encode_word(w) -> (id, unknown)`;
    a word outside `index` reads as `unknown`'s id."""

    index: dict[str, int]
    unknown: str = "<unk>"

    def encode_word(self, word: str) -> tuple[int, bool]:
        found = self.index.get(word)
        return (self.index[self.unknown], True) if found is None else (found, False)


def chain_rule_result(words: Sequence[str], steps: np.ndarray, num_unknown: int = 0) -> BeamResult:
    """One sentence's `BeamResult` from `steps` [n + 1]: log p(w_t | w_<t) of each of its n words, then log p of
    the end token given them all. log p(x) is their sum; `surprisals.sum() + end_surprisal == -log_prob`."""
    steps = np.asarray(steps, np.float64)
    if steps.shape != (len(words) + 1,):
        raise ValueError(f"{len(words)} words need {len(words) + 1} log-probabilities, got shape {steps.shape}")
    prefix = np.concatenate([[0.0], np.cumsum(steps[:-1])])
    return BeamResult(list(words), prefix, -steps[:-1], float(steps.sum()), float(-steps[-1]),
                      num_unknown=num_unknown)
