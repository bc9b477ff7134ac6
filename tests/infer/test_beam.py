"""Word-synchronous beam search and the prefix scorer, against exhaustive enumeration with the same model.

The oracle: for a tiny vocabulary and short sentences, every well-formed
action sequence (under the same caps) is enumerated and scored by the model
read the usual way (the masking rule's segments, `model.__call__`, labels at
prediction events); p(x) = Σ_y p(x, y) is then exact. A beam wide enough to
keep everything must give the same p(x), the same prefix probabilities and
the same best tree.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.special import logsumexp

from tgjax.data.vocab import WordDictionary
from tgjax.infer.beam import BeamConfig, TerminalScorer, WordSynchronousBeamSearch, make_word_scorer
from tgjax.infer.choe_charniak import ActionSpace
from tgjax.infer.incremental import PrefixScorer, hidden_states, project, rule_of
from tgjax.models import build_model, model_config, model_spec
from tgjax.syntax import actions as cc
from tgjax.syntax import masks
from tgjax.syntax import token_types as tt

SMALL = dict(d_model=32, num_layers=2, num_heads=4, ffw_hidden_size=64, embedding_dropout=0.0, core_dropout=0.0,
             final_dropout=0.0, sequence_length=32, memory_length=32)
LABELS = ["A", "B"]
WORDS = ["a", "b", "c"]
MAX_OPEN, MAX_CONSECUTIVE = 3, 2
# One row bucket for every call: few compilations.
EXHAUSTIVE = BeamConfig(word_beam=10**6, action_beam=10**6, fast_track=10**6, max_open_nts=MAX_OPEN,
                        max_consecutive_opens=MAX_CONSECUTIVE, min_batch=64, max_batch=64)


@functools.cache
def tiny_vocab() -> WordDictionary:
    """The vocabulary of every test here and in test_sampling / test_parse (shared compilations)."""
    return WordDictionary(WORDS, LABELS)


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocab()


_MODELS = {}


def get_model(name: str, vocab_size: int, seed: int = 0):
    key = (name, vocab_size, seed)
    if key not in _MODELS:
        _MODELS[key] = build_model(name, vocab_size, rngs=nnx.Rngs(seed), **SMALL)
    return _MODELS[key]


# ---------------------------------------------------------------------------
# The oracle.


def enumerate_actions(words, labels, max_open, max_consecutive, upto_word=None):
    """Every well-formed Choe–Charniak sequence over `words` (or every prefix ending with word `upto_word`).

    The rules, written independently of the search: the first action opens
    the root; a word needs an open constituent; at most `max_open` open at
    once and `max_consecutive` opens in a row; a closing NT closes the
    innermost open label, only if it is non-empty, and the root only after
    the last word; after the last word, everything closes.
    """
    n = len(words)
    out = []

    def rec(prefix, stack, opens, t):
        if upto_word is not None and t == upto_word + 1:
            out.append(prefix)
            return
        if t == n:
            out.append(prefix + [cc.closing(label) for label, _ in reversed(stack)])
            return
        if len(stack) < max_open and opens < max_consecutive:
            for label in labels:
                rec(prefix + [cc.opening(label)], stack + [(label, False)], opens + 1, t)
        if len(stack) >= 2 and stack[-1][1]:
            rec(prefix + [cc.closing(stack[-1][0])], stack[:-2] + [(stack[-2][0], True)], 0, t)
        if stack:
            rec(prefix + [words[t]], stack[:-1] + [(stack[-1][0], True)], 0, t + 1)

    rec([], [], 0, 0)
    return out


@functools.partial(jax.jit, static_argnums=0)
def _sequence_log_probs(graphdef, state, batch):
    """`[B]`: Σ log p(label) over prediction events, by `model.__call__` (the standard reading)."""
    model = nnx.merge(graphdef, state)
    memory = model.init_memory(batch["inputs"].shape[0])
    logits, _ = model(batch, memory, deterministic=True)
    log_softmax = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    log_probs = jnp.take_along_axis(log_softmax, batch["labels"][..., None].astype(jnp.int32), -1)[..., 0]
    return jnp.where(batch["labels_ttypes"] != tt.PAD, log_probs, 0.0).sum(-1)


@functools.partial(jax.jit, static_argnums=0)
def _log_softmax(graphdef, state, batch):
    """`[B, T, V]`: the log-softmax of `model.__call__`'s logits (one plain forward pass, jitted: one compilation
    per shape, not one per operation of an eager pass)."""
    model = nnx.merge(graphdef, state)
    logits, _ = model(batch, model.init_memory(batch["inputs"].shape[0]), deterministic=True)
    return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


def exact_log_probs(model, name, vocab, sequences, rows=64):
    """log p(actions) of each token sequence, by the model's standard reading (one segment per sequence)."""
    config = model.config
    fields = model_spec(name).pipeline_fields(config)
    encoded = []
    for tokens in sequences:
        ids = vocab.encode(tokens)
        types = vocab.token_types(ids)
        encoded.append((np.concatenate([[vocab.bos_id], ids]), np.concatenate([[tt.BOS], types]),
                        np.concatenate([ids, [0]]), np.concatenate([types, [tt.PAD]])))
    if fields["rule"] == "tg":
        rule = masks.TGMasking(config.sequence_length, config.memory_length)
    else:
        rule = masks.TXLMasking(config.sequence_length, config.memory_length)
    graphdef, state = nnx.split(model)
    out = []
    for start in range(0, len(encoded), rows):  # fixed-size batches: one compilation
        chunk = encoded[start:start + rows]
        chunk = chunk + [chunk[0]] * (rows - len(chunk))
        compact, seq_index = rule.compact_chunks_many(chunk)
        assert len(seq_index) == rows  # one segment each
        batch = {k: jnp.asarray(v) for k, v in compact._asdict().items()}
        out.append(np.asarray(_sequence_log_probs(graphdef, state, batch), np.float64))
    return np.concatenate(out)[:len(sequences)]


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_exhaustive_beam_equals_enumeration(vocab, name):
    model = get_model(name, vocab.size)
    search = WordSynchronousBeamSearch(model, vocab, rule_of(name), EXHAUSTIVE)
    sentences = [["a", "b", "c"], ["c", "a"], ["b"]]
    results = search.search(sentences)
    for words, result in zip(sentences, results):
        trees = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE)
        exact = exact_log_probs(model, name, vocab, trees)
        # The same hypotheses, with the same joint probabilities.
        found = {tuple(actions): lp for actions, lp in result.hypotheses}
        assert set(found) == {tuple(t) for t in trees}
        np.testing.assert_allclose([found[tuple(t)] for t in trees], exact, atol=1e-5)
        # p(x) and the best tree.
        assert abs(result.log_prob - logsumexp(exact)) < 1e-5
        assert result.best_actions == trees[int(np.argmax(exact))]
        assert abs(result.best_log_prob - exact.max()) < 1e-5
        assert cc.tree_from_choe_charniak(result.best_actions).leaves() == words
        # Prefix probabilities: every well-formed prefix that ends with word t.
        for t in range(len(words)):
            prefixes = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE, upto_word=t)
            assert abs(result.prefix_log_probs[t + 1] - logsumexp(exact_log_probs(model, name, vocab, prefixes))) < 1e-5
        # Surprisals add up to -log p(x).
        assert abs(result.surprisals.sum() + result.end_surprisal + result.log_prob) < 1e-9


def test_enumeration_counts_match_a_hand_count():
    # One word, one label: (A w A), (A (A w A) A): at most 2 open.
    assert enumerate_actions(["w"], ["A"], 2, 2) == [["(A", "(A", "w", "A)", "A)"], ["(A", "w", "A)"]]
    # Two words, one label, one open at most: only (A w v A).
    assert enumerate_actions(["w", "v"], ["A"], 1, 1) == [["(A", "w", "v", "A)"]]


def up_to_word(actions: list[str], t: int) -> tuple[str, ...]:
    """The prefix of `actions` that ends with word t (0-based); words are the tokens that are not labels."""
    brackets = {cc.opening(label) for label in LABELS} | {cc.closing(label) for label in LABELS}
    word_at = [i for i, a in enumerate(actions) if a not in brackets]
    return tuple(actions[:word_at[t] + 1])


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_small_beam_scores_and_prefix_marginals_against_the_standard_reading(vocab, name):
    """A beam that prunes: what it keeps is scored right, and its prefix marginals sit between two exact sums.

    Every probability below is recomputed by `exact_log_probs` (whole sequences, `model.__call__`), not by the
    incremental scorer. The word beam after word t holds distinct prefixes ending with word t, so
    log p_beam(x_<=t) is at most the exact sum over all of them (`enumerate_actions`), and at least the sum
    over the prefixes of the final hypotheses (each one's ancestor was in that beam). After the last word the
    beam is exactly those prefixes, and each closes in one way: p_beam(x) is the sum over the hypotheses.
    """
    model = get_model(name, vocab.size)
    config = BeamConfig(word_beam=3, action_beam=4, fast_track=1, max_open_nts=MAX_OPEN,
                        max_consecutive_opens=MAX_CONSECUTIVE, min_batch=64, max_batch=64, batch_sentences=2)
    sentences = [["c", "a", "b"], ["c"], ["b", "b", "a"]]  # three words: 554 prefixes to sum at the last, four 5,722
    results = WordSynchronousBeamSearch(model, vocab, name, config).search(sentences)
    pruned = 0
    for words, result in zip(sentences, results):
        hypotheses = [actions for actions, _ in result.hypotheses]
        assert 1 <= len(hypotheses) <= config.word_beam
        assert all(cc.tree_from_choe_charniak(h).leaves() == words for h in hypotheses)
        exact = exact_log_probs(model, name, vocab, hypotheses)
        np.testing.assert_allclose([lp for _, lp in result.hypotheses], exact, atol=1e-5)
        assert all(np.diff(exact) <= 1e-5)  # best first
        assert abs(result.log_prob - logsumexp(exact)) < 1e-5
        for t in range(len(words)):
            kept = sorted({up_to_word(h, t) for h in hypotheses})
            lower = logsumexp(exact_log_probs(model, name, vocab, kept))
            everything = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE, upto_word=t)
            upper = logsumexp(exact_log_probs(model, name, vocab, everything))
            beam = result.prefix_log_probs[t + 1]
            assert lower - 1e-5 <= beam <= upper + 1e-5
            if t == len(words) - 1:
                assert abs(beam - lower) < 1e-5
            pruned += upper - beam > 1e-3
        # Surprisals are differences of the prefix marginals, and the end cost is what closing takes away.
        np.testing.assert_allclose(result.surprisals, -np.diff(result.prefix_log_probs), atol=1e-12)
        assert result.end_surprisal >= 0
        assert abs(result.surprisals.sum() + result.end_surprisal + result.log_prob) < 1e-9
    assert pruned >= 3  # the beam did drop prefixes: the bounds were not met trivially


def test_count_stop_and_batching_give_the_same_results_per_sentence(vocab):
    model = get_model("tg", vocab.size)
    sentences = [["a", "b"], ["c", "c", "a"], ["b"]]
    base = dict(word_beam=2, action_beam=3, fast_track=1, max_open_nts=3, max_consecutive_opens=2,
                min_batch=64, max_batch=64)
    together = WordSynchronousBeamSearch(model, vocab, "tg", BeamConfig(**base, batch_sentences=3)).search(sentences)
    alone = [WordSynchronousBeamSearch(model, vocab, "tg", BeamConfig(**base, batch_sentences=1)).search([s])[0]
             for s in sentences]
    for a, b in zip(together, alone):
        assert a.best_actions == b.best_actions
        np.testing.assert_allclose(a.prefix_log_probs, b.prefix_log_probs, atol=1e-5)
    counted = WordSynchronousBeamSearch(model, vocab, "tg", BeamConfig(**base, stop="count")).search(sentences)
    for result, words in zip(counted, sentences):
        assert cc.tree_from_choe_charniak(result.best_actions).leaves() == words


def test_unknown_words_are_counted_and_kept_in_the_tree(vocab):
    model = get_model("tg", vocab.size)
    config = BeamConfig(word_beam=2, action_beam=4, fast_track=1, min_batch=64, max_batch=64, max_open_nts=3,
                        max_consecutive_opens=2)
    (result,) = WordSynchronousBeamSearch(model, vocab, "tg", config).search([["a", "zebra", "b"]])
    assert result.num_unknown == 1
    assert cc.tree_from_choe_charniak(result.best_actions).leaves() == ["a", "zebra", "b"]


def test_terminal_scorer_is_exact(vocab):
    name = "txl_terminals"
    model = get_model(name, vocab.size)
    scorer = make_word_scorer(model, vocab, "txl_terminals", BeamConfig(min_batch=64, max_batch=64))
    assert isinstance(scorer, TerminalScorer)
    sentences = [["a", "b", "c"], ["c"], ["a", "zebra"]]
    results = scorer.search(sentences)
    # The whole sentence, ended by </s> as in training.
    exact = exact_log_probs(model, name, vocab, [words + ["</s>"] for words in sentences])
    np.testing.assert_allclose([r.log_prob for r in results], exact, atol=1e-5)
    # Word by word: prefixes of each sentence; the end is p(</s> | words).
    for words, whole, result in zip(sentences, exact, results):
        prefixes = exact_log_probs(model, name, vocab, [words[:t + 1] for t in range(len(words))])
        np.testing.assert_allclose(result.prefix_log_probs[1:], prefixes, atol=1e-5)
        np.testing.assert_allclose(result.surprisals, -np.diff(np.concatenate([[0.0], prefixes])), atol=1e-5)
        np.testing.assert_allclose(result.end_surprisal, prefixes[-1] - whole, atol=1e-5)
        np.testing.assert_allclose(result.surprisals.sum() + result.end_surprisal, -result.log_prob, atol=1e-9)
        assert result.end_surprisal > 0
    assert results[2].num_unknown == 1


def test_terminal_scorer_log_prob_is_the_log_softmax_of_the_whole_sentence(vocab):
    """Oracle: one plain forward pass over `<s> w1 .. wn </s>`, the log-softmax at each position read by hand."""
    model = get_model("txl_terminals", vocab.size)
    ids = {"a": 4, "b": 5, "c": 6, "zebra": vocab.unk_id}  # the WordDictionary's ids (reserved 0..3 first)
    assert all(vocab.encode([w])[0] == i for w, i in ids.items())
    eos = vocab.eos_id
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "zebra", "b"]]
    results = TerminalScorer(model, vocab, min_batch=64, batch_size=64).search(sentences)
    graphdef, state = nnx.split(model)
    for words, result in zip(sentences, results):
        word_ids = [ids[w] for w in words]
        inputs = np.array([vocab.bos_id, *word_ids, eos])  # <s> w1 .. wn </s>
        labels = np.array([*word_ids, eos, 0])  # each position predicts the next token; </s> nothing
        ttypes = np.array([tt.BOS] + [tt.TERMINAL] * (len(words) + 1))
        label_types = np.array([tt.TERMINAL] * (len(words) + 1) + [tt.PAD])
        (segment,) = masks.TXLMasking(32, 32).compact_chunks(*(np.asarray(a, np.int32) for a in
                                                                (inputs, ttypes, labels, label_types)))
        batch = {k: jnp.asarray(v)[None] for k, v in segment._asdict().items()}
        log_softmax = np.asarray(_log_softmax(graphdef, state, batch)[0], np.float64)
        per_position = np.array([log_softmax[i, labels[i]] for i in range(len(words) + 1)])
        np.testing.assert_allclose(result.log_prob, per_position.sum(), atol=1e-5)
        np.testing.assert_allclose(result.surprisals, -per_position[:-1], atol=1e-5)
        np.testing.assert_allclose(result.end_surprisal, -per_position[-1], atol=1e-5)
        np.testing.assert_allclose(result.surprisals.sum() + result.end_surprisal, -result.log_prob, atol=1e-9)


@pytest.mark.parametrize("name", ["tg", "tg_distinct_mha", "tg_head_hybrid", "tg_layer_hybrid",
                                  "tg_txl_memory_linear_pos", "txl_cc"])
def test_hidden_states_project_to_the_model_logits(vocab, name):
    model = build_model(name, vocab.size, rngs=nnx.Rngs(1), **SMALL)
    tokens = ["(A", "a", "(B", "b", "c", "B)", "A)"]
    ids = vocab.encode(tokens)
    types = vocab.token_types(ids)
    seq = (np.concatenate([[1], ids]), np.concatenate([[tt.BOS], types]), np.concatenate([ids, [0]]),
           np.concatenate([types, [tt.PAD]]))
    config = model_config(name, vocab.size, **SMALL)
    fields = model_spec(name).pipeline_fields(config)
    rule = (masks.TGMasking(32, 32, smart_memory=fields["smart_memory"], distinct_compose=fields["distinct_compose"],
                            linear_relpos=fields["linear_relpos"]) if fields["rule"] == "tg"
            else masks.TXLMasking(32, 32))
    compact, _ = rule.compact_chunks_many([seq])
    batch = {k: jnp.asarray(v) for k, v in compact._asdict().items()}
    graphdef, state = nnx.split(model)

    @jax.jit
    def both(state, batch):
        m = nnx.merge(graphdef, state)
        memory = m.init_memory(1)
        logits, _ = m(batch, memory, deterministic=True)
        return project(m, hidden_states(m, batch, memory)), logits

    mine, theirs = both(state, batch)
    np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs), atol=1e-5, rtol=1e-5)


def test_prefix_scorer_next_distribution_and_continuations(vocab):
    """The query row is log p(. | prefix); continuation entries are the sequence's own log-probabilities."""
    model = get_model("tg", vocab.size)
    space = ActionSpace.from_vocab(vocab)
    scorer = PrefixScorer(model, "tg", space.token_types, min_batch=64, max_batch=64)
    tokens = ["(A", "a", "(B", "b", "B)", "c", "A)"]
    ids = vocab.encode(tokens)
    full = exact_log_probs(model, "tg", vocab, [tokens[:k] for k in range(1, len(tokens) + 1)])
    per_action = np.diff(np.concatenate([[0.0], full]))
    scored = scorer.score([ids] * len(tokens), list(range(len(tokens))))
    for q in range(len(tokens)):
        np.testing.assert_allclose(scored.continuation_log_probs[q], per_action[q:], atol=1e-5)
        np.testing.assert_allclose(scored.next_log_probs[q, ids[q]], per_action[q], atol=1e-5)
        np.testing.assert_allclose(np.exp(scored.next_log_probs[q]).sum(), 1.0, atol=1e-5)


def test_errors(vocab):
    model = get_model("tg", vocab.size)
    with pytest.raises(ValueError, match="no words"):
        WordSynchronousBeamSearch(model, vocab, "tg", EXHAUSTIVE).search([[]])
    with pytest.raises(ValueError, match="syntactic model"):
        WordSynchronousBeamSearch(model, vocab, "txl_terminals")
    with pytest.raises(ValueError, match="word_beam must be at least 1"):
        BeamConfig(word_beam=0)
    with pytest.raises(ValueError, match="stop must be one of"):
        BeamConfig(stop="never")
    with pytest.raises(ValueError, match="cannot be a word"):
        ActionSpace.from_vocab(vocab).encode_word("(A")
    with pytest.raises(ValueError, match="does not match the model"):
        PrefixScorer(model, "txl_cc", ActionSpace.from_vocab(vocab).token_types)
    with pytest.raises(ValueError, match="query 5 outside"):
        PrefixScorer(model, "tg", ActionSpace.from_vocab(vocab).token_types).score([[4]], [5])


def test_rule_of():
    assert rule_of("tg_distinct_mha") == "tg"
    assert rule_of("txl_cc") == "txl_cc"
    assert rule_of("txl_terminals") == "txl_terminals"


@pytest.mark.parametrize("name", ["tg", "tg_head_hybrid", "txl_cc"])
def test_scoring_from_a_cache_equals_scoring_from_scratch(vocab, name):
    """The layer inputs of a prefix, as memory, give the log-probabilities of a full recompute."""
    model = get_model(name, vocab.size) if name != "tg_head_hybrid" else build_model(
        name, vocab.size, rngs=nnx.Rngs(2), **SMALL)
    space = ActionSpace.from_vocab(vocab)
    scorer = PrefixScorer(model, rule_of(name), space.token_types, min_batch=64, max_batch=64)
    tokens = ["(A", "a", "(B", "b", "c", "B)", "(A", "a", "A)", "A)"]
    ids = vocab.encode(tokens)
    scratch = scorer.score([ids] * 4, [2, 5, 6, 9])
    first = scorer.score([ids[:2], ids[:5]], [2, 5])  # caches of BOS + 2 and BOS + 5 actions
    assert [c.length for c in first.caches] == [3, 6]
    resumed = scorer.score([ids] * 4, [2, 5, 6, 9], [None, first.caches[0], first.caches[1], scratch.caches[2]])
    for k in range(4):
        np.testing.assert_allclose(resumed.next_log_probs[k], scratch.next_log_probs[k], atol=1e-5)
        np.testing.assert_allclose(resumed.continuation_log_probs[k], scratch.continuation_log_probs[k], atol=1e-5)
        np.testing.assert_allclose(resumed.caches[k].states, scratch.caches[k].states, atol=1e-5)
    # TG: the closing NTs B) and A) among the first 9 actions are two layout positions each (CNT1, CNT2).
    assert scratch.caches[3].length == (1 + 9 if name == "txl_cc" else 1 + 9 + 2)
    with pytest.raises(ValueError, match="past the query"):
        scorer.score([ids], [5], [first.caches[1]])  # the query's own position must be computed
