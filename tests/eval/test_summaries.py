"""The corpus summaries the score and ppl commands write (`tgjax.eval.summaries`)."""

from __future__ import annotations

import itertools
import math

import pytest

from tgjax.eval.summaries import ExactSum, PplSummary


def test_exact_sum_is_exact_in_every_order():
    """1e16 + 1 − 1e16 is 1 exactly whatever the order; plain float addition loses the 1 in some orders."""
    terms = [1e16, 1.0, -1e16, 0.1, 0.2]
    for order in itertools.permutations(terms):
        total = ExactSum()
        for x in order:
            total.add(x)
        assert total.value == 1.3  # the correctly rounded sum (math.fsum)
    assert sum([1e16, 1.0, -1e16]) == 0.0  # what the exact sum guards against


@pytest.mark.parametrize("rule, documents, dedup, key", [
    ("tg", False, True, "word_perplexity_upper_bound"),
    ("tg", False, False, "word_perplexity_with_duplicates"),
    ("txl_cc", True, True, "word_perplexity_greedy_documents"),
    ("tg", True, False, "word_perplexity_greedy_documents_with_duplicates"),
    ("txl_terminals", True, False, "word_perplexity"),
])
def test_summary_names_the_perplexity_for_what_it_is(rule, documents, dedup, key):
    """Only distinct proposals at sentence level give the paper's upper bound; the rest are named otherwise."""
    summary = PplSummary(rule, documents=documents, dedup=dedup)
    for bound, words in [(-2.0, 1), (-4.0, 2)]:  # Σ log = -6 over 3 words: perplexity e^2
        summary.add({"bound": bound, "best_logp": bound - 1, "num_words": words, "num_proposals": 2,
                     "num_duplicates": 0, "num_unk": 0})
    result = summary.result()
    perplexities = {k for k in result if k.startswith("word_perplexity")}
    assert perplexities == {key}
    assert result[key] == pytest.approx(math.exp(2.0))
    assert ("total_log_bound" in result) == (key == "word_perplexity_upper_bound")
    if rule != "txl_terminals":
        assert result["best_tree_word_perplexity"] == pytest.approx(math.exp(8.0 / 3))

