"""The Choe–Charniak search family (TG, TXL (CC)) against independent oracles.

Walking every well-formed prefix of a sentence through the family (each
successor built by `advance` with the memory its parent's `score` returned,
as a search does): the allowed actions are exactly the next tokens of the
well-formed sequences (`enumerate_actions`, written without the family),
and every allowed action's log-probability, and the cost of ending, are
differences of whole-sequence log p by `model.__call__` (`exact_log_probs`).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.infer.test_beam import (  # noqa: F401
    LABELS,
    MAX_CONSECUTIVE,
    MAX_OPEN,
    enumerate_actions,
    exact_log_probs,
    get_model,
    vocab,
)
from tgjax.infer.choe_charniak import ActionSpace, ChoeCharniakFamily
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.search import SearchFamily
from tgjax.syntax import actions as cc

WORDS = ["a", "c", "b"]


def make_family(model, rule, vocab, use_cache=True) -> ChoeCharniakFamily:
    space = ActionSpace.from_vocab(vocab)
    scorer = PrefixScorer(model, rule, space.token_types, bos_id=vocab.bos_id,
                          candidate_ids=np.concatenate([space.open_ids, space.close_ids]), min_batch=64, max_batch=64)
    return ChoeCharniakFamily([scorer], space, max_open_nts=MAX_OPEN, max_consecutive_opens=MAX_CONSECUTIVE,
                              use_cache=use_cache)


def action_token(family, tokens, action, word):
    """The Choe–Charniak token of an action code after the prefix `tokens`."""
    L = family.space.num_labels
    if action < L:
        return cc.opening(family.space.labels[action])
    return innermost_closing(tokens) if action == L else word


def innermost_closing(tokens):
    """The closing token of the innermost open constituent of a prefix (oracle: a plain stack of labels)."""
    stack = []
    for token in tokens:
        if token.startswith("("):
            stack.append(token[1:])
        elif token.endswith(")"):
            stack.pop()
    return cc.closing(stack[-1])


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_family_walk_matches_enumeration_and_the_standard_reading(vocab, name):
    model = get_model(name, vocab.size)
    family = make_family(model, name, vocab)
    assert isinstance(family, SearchFamily)  # structurally: every method and attribute is there
    complete = enumerate_actions(WORDS, LABELS, MAX_OPEN, MAX_CONSECUTIVE)
    # Oracle: the next tokens of every proper prefix that has not yet generated the last word.
    expected: dict[tuple[str, ...], set[str]] = {}
    for sequence in complete:
        seen = 0
        for k, token in enumerate(sequence):
            if seen == len(WORDS):
                break
            expected.setdefault(tuple(sequence[:k]), set()).add(token)
            seen += token in WORDS
    level = [((), family.initial_state())]
    walked, checks = 0, []  # checks: (prefix tokens, extended tokens, the family's log p)
    ends = []  # (prefix tokens, complete tokens, the family's end log p)
    while level:
        states = [state for _, state in level]
        num_words = [sum(t in WORDS for t in tokens) for tokens, _ in level]
        next_words = [family.encode_word(WORDS[w])[0] if w < len(WORDS) else None for w in num_words]
        scores = family.score(states, next_words)
        allowed = family.allowed(states)
        assert allowed.shape == scores.log_probs.shape == (len(states), family.num_actions)
        following = []
        for n, (tokens, state) in enumerate(level):
            if next_words[n] is None:  # every word generated: the sentence ends
                ends.append((tokens, family.tokens(state, WORDS), scores.end_log_probs[n]))
                continue
            walked += 1
            word = WORDS[num_words[n]]
            got = {action_token(family, tokens, a, word) for a in np.flatnonzero(allowed[n])}
            assert got == expected[tokens], tokens
            for a in np.flatnonzero(allowed[n]):
                token = action_token(family, tokens, a, word)
                checks.append((tokens, tokens + (token,), scores.log_probs[n, a]))
                following.append((tokens + (token,), family.advance(state, int(a), next_words[n], scores.memories[n])))
        level = following
    assert walked == len(expected) and len(ends) == len(complete)
    assert sorted(tuple(t) for _, t, _ in ends) == sorted(tuple(s) for s in complete)
    # Log-probabilities: differences of whole-sequence log p (only distinct sequences are scored).
    sequences = sorted({s for c in checks for s in c[:2]} | {s for e in ends for s in (e[0], tuple(e[1]))})
    exact = dict(zip(sequences, exact_log_probs(model, name, vocab, [list(s) for s in sequences])))
    want = [exact[longer] - exact[prefix] for prefix, longer, _ in checks]
    np.testing.assert_allclose([lp for _, _, lp in checks], want, atol=2e-5)
    np.testing.assert_allclose([lp for *_, lp in ends], [exact[tuple(t)] - exact[p] for p, t, _ in ends], atol=2e-5)


def test_scores_from_memories_equal_scores_from_scratch(vocab):
    model = get_model("tg", vocab.size)
    cached, scratch = make_family(model, "tg", vocab), make_family(model, "tg", vocab, use_cache=False)
    word = cached.encode_word("a")[0]
    state = cached.initial_state()
    for action in [0, 1, cached.word_action, cached.space.num_labels, cached.word_action]:  # (A (B a B) a
        scores = cached.score([state], [word])
        state = cached.advance(state, action, word, scores.memories[0])
    a, b = cached.score([state], [word]), scratch.score([state], [word])
    np.testing.assert_allclose(a.log_probs, b.log_probs, atol=1e-5)
    assert cached.tokens(state, ["a", "a"]) == ["(A", "(B", "a", "B)", "a", "A)"]
