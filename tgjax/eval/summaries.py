"""What the `score` and `ppl` commands write: one JSON record per sentence, and corpus summaries.

A record is a plain dict (`score_record`, `ppl_record`); a summary adds
records one at a time and gives the corpus totals (`ScoreSummary`,
`PplSummary`). Totals are summed exactly (`ExactSum`), so the summary of
shards merged in any order (`tgjax.eval.shards.merge`) equals the unsharded
one bit for bit. The numbers themselves come from `tgjax.infer.scoring` and
`tgjax.infer.perplexity`; see their docstrings for what is scored and why
the end of a sentence counts in log p but not as a word.
"""

from __future__ import annotations

import math

from tgjax.infer.api import EXACT_RULES
from tgjax.infer.perplexity import ProposalScores
from tgjax.infer.scoring import SequenceScore, WordSurprisals

# -----------------------------------------------------------------------------
# Exact sums.


class ExactSum:
    """A float sum that is exact until the final rounding, so independent of the order of the terms.

    Shewchuk's partials (the algorithm of `math.fsum`), kept incrementally:
    summaries of shards merged in any order equal the unsharded one bit for bit.
    """

    def __init__(self):
        self._partials: list[float] = []

    def add(self, x: float) -> None:
        partials = self._partials
        i = 0
        x = float(x)
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    @property
    def value(self) -> float:
        return math.fsum(self._partials)


def _exp(x: float) -> float | None:
    """exp(x), None where it would overflow: the perplexity of a diverged model (or of a 5,000-deep tree) is
    reported (JSON null, "none" in the report; the log value beside it is finite), not raised, and never
    written as Infinity, which is not JSON."""
    return math.exp(x) if x < 700 else None


# -----------------------------------------------------------------------------
# eval score


def score_record(score: SequenceScore, *, per_token: bool = False, surprisal: WordSurprisals | None = None) -> dict:
    """One JSON line: index, log p, predictions, words, UNK words (and per-token / per-word values if asked)."""
    record = {"index": score.index, "logp": score.logp, "num_predictions": score.num_predictions,
              "num_words": score.num_words, "num_unk": score.num_unk}
    if score.member_logps is not None:
        record["member_logps"] = [float(x) for x in score.member_logps]
    if per_token:
        record["tokens"] = list(score.tokens or [])
        record["token_logprobs"] = [float(x) for x in score.token_logprobs]
    if surprisal is not None:
        record["words"] = surprisal.words
        record["surprisals"] = [float(x) for x in surprisal.surprisals]
        record["end_surprisal"] = surprisal.end
    return record


class ScoreSummary:
    """Corpus totals of `score` records, exact whatever the order (`ExactSum`).

    Word perplexities divide −Σ logp, the end of each sentence included, by
    the number of words only (see the module docstring).
    """

    def __init__(self, rule: str):
        self.rule = rule
        self.logp = ExactSum()
        self.sentences = self.predictions = self.words = self.unk = 0

    def add(self, record: dict) -> None:
        self.sentences += 1
        self.logp.add(record["logp"])
        self.predictions += record["num_predictions"]
        self.words += record["num_words"]
        self.unk += record["num_unk"]

    def result(self) -> dict:
        total = self.logp.value
        out = {"sentences": self.sentences, "total_logp": total, "num_predictions": self.predictions,
               "num_words": self.words, "num_unk_words": self.unk,
               "nll_per_prediction": -total / max(self.predictions, 1),
               "perplexity_per_prediction": _exp(-total / max(self.predictions, 1))}
        if self.rule in EXACT_RULES:  # TXL (terminals), ON-LSTM, the stack-attention LM
            out["word_perplexity"] = _exp(-total / max(self.words, 1))  # exact: p(x) itself, `</s>` included
        else:
            # With one given tree per sentence: exp(−Σ log p(x, y) / N_w) >= the true word perplexity.
            out["joint_word_perplexity"] = _exp(-total / max(self.words, 1))
        return out


# -----------------------------------------------------------------------------
# eval ppl


def ppl_record(result: ProposalScores, *, all_logps: bool = False, documents: bool = False) -> dict:
    """One JSON line: index, bound, words, proposals kept and dropped, UNK words, the best proposal."""
    record = {"index": result.index, "bound": result.bound, "num_words": result.num_words,
              "num_proposals": int(len(result.logps)), "num_duplicates": result.num_duplicates,
              "num_unk": result.num_unk, "best": result.best, "best_logp": float(result.logps[result.best])}
    if documents:
        record["document"] = result.block.document
    if all_logps:
        record["logps"] = [float(x) for x in result.logps]
    return record


def perplexity_name(rule: str, *, documents: bool, dedup: bool) -> str:
    """What the summary's perplexity is, as its key: only distinct proposals at sentence level bound it.

    - `word_perplexity`: TXL (terminals) (sentences or documents), ON-LSTM and the stack-attention LM
      (sentences): exact;
    - `word_perplexity_upper_bound`: the paper's bound (§3.1), distinct proposals, sentence level;
    - `word_perplexity_greedy_documents`: `--documents`, each sentence after the greedy best trees of
      the ones before it, which the paper calls an approximation (no bound either way);
    - `..._with_duplicates`: repeated proposals counted every time, which can push it below p(x)'s.
    """
    if rule in EXACT_RULES:
        return "word_perplexity"
    name = "word_perplexity_greedy_documents" if documents else "word_perplexity"
    if not dedup:
        return name + "_with_duplicates"
    return name if documents else "word_perplexity_upper_bound"


class PplSummary:
    """Corpus totals of `ppl` records (exact sums, order-independent).

    `documents` and `dedup` are the settings the records were made with: they
    decide what the perplexity is, and so its name (`perplexity_name`).
    """

    def __init__(self, rule: str, *, documents: bool = False, dedup: bool = True):
        self.rule = rule
        self.perplexity_key = perplexity_name(rule, documents=documents, dedup=dedup)
        self.bound = ExactSum()
        self.best = ExactSum()
        self.sentences = self.words = self.proposals = self.duplicates = self.unk = 0

    def add(self, record: dict) -> None:
        self.sentences += 1
        self.bound.add(record["bound"])
        self.best.add(record["best_logp"])
        self.words += record["num_words"]
        self.proposals += record["num_proposals"]
        self.duplicates += record["num_duplicates"]
        self.unk += record["num_unk"]

    def result(self) -> dict:
        total = self.bound.value
        n = max(self.words, 1)
        bound = self.perplexity_key == "word_perplexity_upper_bound"
        out = {"sentences": self.sentences, "num_words": self.words, "num_proposals": self.proposals,
               "num_duplicates_removed": self.duplicates, "num_unk_words": self.unk,
               # Σ_x log Σ_j p(x, y_j): a lower bound on log p(corpus) only where the perplexity is the bound.
               "total_log_bound" if bound else "total_log_sum_over_proposals": total}
        # Exact for the EXACT_RULES (`</s>` in the log p, not in the words); else see `perplexity_name`.
        out[self.perplexity_key] = _exp(-total / n)
        if self.rule not in EXACT_RULES:
            out["best_tree_word_perplexity"] = _exp(-self.best.value / n)  # one tree per sentence: looser
        return out
