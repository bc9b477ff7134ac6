"""Search errors against model errors: of a beam's wrong parses, which would the model itself have rejected?

A parse that is not the gold tree is a *search error* when the model scores the gold tree higher than the
beam's tree, log p(x, y_gold) > log p(x, y_beam): the beam lost a tree the model prefers, so a wider search
would have found something at least as likely as the gold tree. Otherwise it is a *model error*: the model
prefers its wrong tree (a tie counts here). Both trees are scored teacher-forced by the same tree scorer
(`LoadedModel.tree_scorer`, or an `Ensemble` of them), not by the beam's own arithmetic, so the split does not
depend on how the search accumulated its scores. Exactness is judged on what the model reads of a tree (its
Choe–Charniak actions, `tgjax.infer.scoring.sequence_tokens`): labels and brackets, not POS tags.

A gold tree the model cannot encode (a non-terminal outside its vocabulary) cannot be scored; it is counted
as unscored and reported, never dropped silently.

    tgjax eval parse --workdir W --treebank test.txt --search-errors
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from tgjax.syntax.trees import Tree

# Rules whose parses a teacher-forced tree scorer can score (the Pushdown-LM's tapes have their own
# diagnostic: `tgjax.eval.pushdown_tapes`).
RULES = ("tg", "txl_cc")


@dataclasses.dataclass(frozen=True)
class SearchErrors:
    """Counts over one treebank's parses (every sentence in exactly one of the four).

    Attributes:
      exact: parses that are the gold tree.
      search_errors: wrong parses whose gold tree the model scores higher.
      model_errors: wrong parses the model scores at least as high as the gold tree.
      unscored: gold trees the model cannot score (a label outside its vocabulary).
      search_gap: mean of log p(x, y_gold) - log p(x, y_beam) over the search errors, in nats (nan if none).
    """

    exact: int
    search_errors: int
    model_errors: int
    unscored: int
    search_gap: float

    @property
    def sentences(self) -> int:
        return self.exact + self.search_errors + self.model_errors + self.unscored

    def format(self) -> str:
        wrong = self.search_errors + self.model_errors
        share = f" ({100 * self.search_errors / wrong:.1f}% of the {wrong} wrong parses)" if wrong else ""
        gap = f", the gold tree ahead by {self.search_gap:.2f} nats on average" if self.search_errors else ""
        unscored = (f"; {self.unscored} gold trees not scored (a label outside the model's vocabulary)"
                    if self.unscored else "")
        return (f"parses equal to the gold tree {self.exact} of {self.sentences}; search errors (the model scores "
                f"the gold tree higher than the beam's) {self.search_errors}{share}{gap}; model errors (it prefers "
                f"its wrong tree) {self.model_errors}{unscored}")

    def to_json(self) -> dict:
        gap = None if math.isnan(self.search_gap) else self.search_gap
        return {"exact": self.exact, "search_errors": self.search_errors, "model_errors": self.model_errors,
                "unscored": self.unscored, "search_gap_nats": gap}


def classify(beam_log_probs: Sequence[float], gold_log_probs: Sequence[float | None],
             is_gold: Sequence[bool]) -> SearchErrors:
    """The counts from per-sentence scores: log p(x, y_beam), log p(x, y_gold) (None: unscored) and whether the
    beam's tree is the gold one."""
    if not len(beam_log_probs) == len(gold_log_probs) == len(is_gold):
        raise ValueError(f"{len(beam_log_probs)} beam scores, {len(gold_log_probs)} gold scores and "
                         f"{len(is_gold)} exactness flags: expected one of each per sentence")
    exact = unscored = model = 0
    gaps = []
    for beam, gold, same in zip(beam_log_probs, gold_log_probs, is_gold):
        if same:
            exact += 1
        elif gold is None:
            unscored += 1
        elif gold > beam:
            gaps.append(gold - beam)
        else:
            model += 1
    return SearchErrors(exact, len(gaps), model, unscored, float(np.mean(gaps)) if gaps else math.nan)


def count_search_errors(scorer, gold: Sequence[Tree], predicted: Sequence[Tree]) -> SearchErrors:
    """Scores each gold tree and the beam's tree for it with `scorer` (a teacher-forced `Scorer` or `Ensemble`
    of TG / TXL (CC)) and classifies the parses. Both lists carry POS pre-terminals (`parse_treebank`'s)."""
    from tgjax.infer.scoring import encode, score_sequences, sequence_tokens

    if scorer.rule not in RULES:
        raise ValueError(f"search errors need a TG or TXL (CC) model, whose trees can be scored; got rule "
                         f"{scorer.rule!r}")
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold trees and {len(predicted)} parses: expected one parse per tree")
    gold_tokens = [sequence_tokens(t, scorer.rule, pos_tags=True) for t in gold]
    beam_tokens = [sequence_tokens(t, scorer.rule, pos_tags=True) for t in predicted]
    items = []
    for i, (g, p) in enumerate(zip(gold_tokens, beam_tokens)):
        items.append((2 * i, encode(scorer.vocab, p)))  # the beam's tree uses the model's own labels
        try:
            items.append((2 * i + 1, encode(scorer.vocab, g)))
        except ValueError:  # an unknown non-terminal: counted as unscored
            pass
    scores = {s.index: s.logp for s in score_sequences(scorer, items)}
    return classify([scores[2 * i] for i in range(len(gold))],
                    [scores.get(2 * i + 1) for i in range(len(gold))],
                    [g == p for g, p in zip(gold_tokens, beam_tokens)])
