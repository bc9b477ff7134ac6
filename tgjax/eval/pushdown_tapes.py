"""Agreement minimal pairs under a Pushdown-LM, scored with its own tapes and with the gold tape.

The demo (`tgjax.demo`) scores a Pushdown-LM's sentence by its beam's
marginal log p(x) over the (word, attachment) hypotheses it keeps. When the
model then prefers the wrong verb, two causes are possible: the search reads
wrong stack tapes (its own attachments) on sentences unlike training, or the
model prefers the wrong verb even on the right tape. `score_pairs` tells them
apart by scoring each sentence of each pair four ways (nats; ``<eos>``
included, as the demo's log p(x)):

* ``beam_marginal`` (a): log p(x) ≈ logsumexp of the final beam's
  log p(x, y) (`PushdownSearch`, the demo's scorer and beam);
* ``gold_joint`` (b): log p(x, y_gold), eq. 7 with the gold tree's
  attachments, converted as the trainer converts its trees
  (`tgjax.data.pushdown.encode_tree`: right-binarised, ``<s>`` ROOT,
  ``<eos>`` attached to it);
* ``gold_words`` (c): Σ_k log p(x_k | x_<k; W_gold), the word (and
  ``<eos>``) terms of (b) without the attachment terms: what the trainer's
  LM loss reads;
* ``beam_words`` (d): the same word terms under the beam's best tape.

Conventions: the terms are `tgjax.infer.pushdown_search.joint_log_prob_terms`
(one teacher-forced pass), with the beam's `final_attachment`, the model's
`attachment_normalise` and the ROOT rule shared by training and the search.
A pair counts as right under a scoring when the good sentence scores strictly
higher (ties are wrong, as in the demo's `agreement_accuracy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TextIO

import numpy as np

from tgjax.data.corpora import MinimalPair

SCORINGS = ("beam_marginal", "gold_joint", "gold_words", "beam_words")
SCORING_TITLES = {
    "beam_marginal": "(a) beam log p(x)",
    "gold_joint": "(b) log p(x, y_gold)",
    "gold_words": "(c) words | gold tape",
    "beam_words": "(d) words | beam tape",
}


@dataclasses.dataclass(frozen=True)
class SentenceTapeScores:
    """One sentence's four scores (nats; see the module docstring) and how its beam's best tape relates to gold.

    words: the sentence's words; gold_attach, beam_attach: the gold and the
    beam's best attachment sequences (``n`` = words + 2 entries each, ``<s>``
    and ``<eos>`` included; entry k is token k's slot, k itself for a shift);
    beam_best_joint: log p(x, y_best) of that best hypothesis (above
    ``gold_joint`` when the model itself prefers another tape to the gold one).
    """

    words: tuple[str, ...]
    beam_marginal: float
    gold_joint: float
    gold_words: float
    beam_words: float
    gold_attach: tuple[int, ...]
    beam_attach: tuple[int, ...]
    beam_best_joint: float

    @property
    def beam_is_gold(self) -> bool:
        """Whether the beam's best tape is the gold tape (the same attachments throughout)."""
        return self.beam_attach == self.gold_attach

    def score(self, scoring: str) -> float:
        """The score named by `scoring` (one of `SCORINGS`)."""
        if scoring not in SCORINGS:
            raise ValueError(f"unknown scoring {scoring!r}; expected one of {SCORINGS}")
        return float(getattr(self, scoring))


def group_title(depth: int) -> str:
    """A depth's column title, as the demo's table: 0 "simple", 1 "attractor", d "depth d"."""
    return {0: "simple", 1: "attractor"}.get(depth, f"depth {depth}")


@dataclasses.dataclass
class TapeAgreement:
    """The pairs and their sentences' scores: `good[i]`, `bad[i]` for `pairs[i]`."""

    pairs: list[MinimalPair]
    good: list[SentenceTapeScores]
    bad: list[SentenceTapeScores]

    def correct(self, scoring: str) -> np.ndarray:
        """``[P]`` bool: pair i is right under `scoring`, its good sentence strictly above its bad one."""
        good = np.asarray([s.score(scoring) for s in self.good])
        bad = np.asarray([s.score(scoring) for s in self.bad])
        return good > bad

    def _mask(self, depth: int | None, construction: str | None) -> np.ndarray:
        return np.asarray([(depth is None or p.depth == depth)
                           and (construction is None or p.construction == construction) for p in self.pairs], bool)

    def accuracy(self, scoring: str, *, depth: int | None = None, construction: str | None = None) -> float:
        """The share of right pairs among those of `depth` and `construction` (None: any); NaN for none."""
        mask = self._mask(depth, construction)
        return float(self.correct(scoring)[mask].mean()) if mask.any() else math.nan

    def beam_is_gold_rate(self, *, depth: int | None = None, construction: str | None = None) -> float:
        """The share of the selected pairs' sentences (good and bad) whose beam's best tape is the gold tape."""
        mask = self._mask(depth, construction)
        same = np.asarray([[g.beam_is_gold, b.beam_is_gold] for g, b in zip(self.good, self.bad)], bool)
        return float(same[mask].mean()) if mask.any() else math.nan

    def depths(self) -> list[int]:
        """The pairs' depths, in the order first seen."""
        return list(dict.fromkeys(p.depth for p in self.pairs))

    def summary(self) -> dict:
        """JSON-ready numbers: per depth (its `group_title`), the pair count, each scoring's accuracy overall and
        per construction, the beam-tape = gold-tape rate, and how often the best tape outscores the gold one."""
        out: dict = {}
        for depth in self.depths():
            constructions = list(dict.fromkeys(p.construction for p in self.pairs if p.depth == depth))
            mask = self._mask(depth, None)
            sentences = [s for i in np.flatnonzero(mask) for s in (self.good[i], self.bad[i])]
            out[group_title(depth)] = {
                "depth": depth,
                "num_pairs": int(mask.sum()),
                "accuracy": {scoring: {"all": self.accuracy(scoring, depth=depth),
                                       **{c: self.accuracy(scoring, depth=depth, construction=c)
                                          for c in constructions}}
                             for scoring in SCORINGS},
                "beam_is_gold": {"all": self.beam_is_gold_rate(depth=depth),
                                 **{c: self.beam_is_gold_rate(depth=depth, construction=c) for c in constructions}},
                # Of the sentences whose best tape is not the gold one: how often that tape scores higher (the
                # model prefers it: not a search error) rather than lower (the beam lost the gold tape).
                "wrong_tape_outscores_gold": _share([s.beam_best_joint > s.gold_joint
                                                     for s in sentences if not s.beam_is_gold]),
            }
        return out


def _share(flags: Sequence[bool]) -> float:
    return float(np.mean(flags)) if len(flags) else math.nan


def score_pairs(loaded, pairs: Sequence[MinimalPair], *, beam=None, stream: TextIO | None = None) -> TapeAgreement:
    """Scores each pair's two sentences four ways (module docstring) with a Pushdown-LM.

    Args:
      loaded: a Pushdown-LM as `tgjax.load(workdir)` returns it (a `LoadedModel` of family ``pushdown_lm``).
      pairs: minimal pairs with gold PTB trees (`tgjax.data.corpora.agreement_minimal_pairs`).
      beam: the `PushdownBeamConfig` of (a) and (d); default the demo's (`tgjax.demo.PUSHDOWN_BEAM`
        hypotheses, the final attachment scored). Its `final_attachment` applies to (b) too.
      stream: where the search's progress line goes (default stderr).

    Returns:
      a `TapeAgreement` (`accuracy(scoring, depth=..., construction=...)`, `summary()`).
    """
    from tgjax.data.pushdown import encode_tree
    from tgjax.demo import PUSHDOWN_BEAM
    from tgjax.eval.parse import search_with_progress
    from tgjax.infer.pushdown_search import PushdownBeamConfig, joint_log_prob_terms

    if loaded.family != "pushdown_lm":
        raise ValueError(f"{loaded.workdir} holds {loaded.description} (family {loaded.family!r}); the tape "
                         f"diagnostic reads a Pushdown-LM")
    beam = beam or PushdownBeamConfig(beam_size=PUSHDOWN_BEAM)
    search = loaded.scorer(pushdown=beam)
    trees = [p.good for p in pairs] + [p.bad for p in pairs]
    results = search_with_progress(search, [t.leaves() for t in trees], stream=stream)
    scores = []
    for index, (tree, result) in enumerate(zip(trees, results)):
        name = f"pair {index % len(pairs)} ({'good' if index < len(pairs) else 'bad'})"
        gold = encode_tree(tree, search.vocab, name=name)
        if not np.array_equal(gold.tokens, result.ids):
            raise ValueError(f"{name}: the gold tree's tokens {gold.tokens.tolist()} are not the searched ones "
                             f"{np.asarray(result.ids).tolist()}")
        words, attachments = joint_log_prob_terms(search.model, gold.tokens, gold.attach,
                                                  final_attachment=beam.final_attachment)
        beam_words, _ = joint_log_prob_terms(search.model, result.ids, result.best_attach,
                                             final_attachment=beam.final_attachment)
        scores.append(SentenceTapeScores(
            words=tuple(tree.leaves()), beam_marginal=float(result.log_prob),
            gold_joint=float(words.sum() + attachments.sum()), gold_words=float(words.sum()),
            beam_words=float(beam_words.sum()), gold_attach=tuple(int(r) for r in gold.attach),
            beam_attach=tuple(int(r) for r in result.best_attach), beam_best_joint=float(result.best_log_prob)))
    return TapeAgreement(list(pairs), scores[:len(pairs)], scores[len(pairs):])


__all__ = ["SCORINGS", "SCORING_TITLES", "SentenceTapeScores", "TapeAgreement", "group_title", "score_pairs"]
