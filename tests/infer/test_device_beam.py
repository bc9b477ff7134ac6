"""The device beam engine against the host search (its oracle) and against exhaustive enumeration.

Same settings, same random small models and sentences: the device engine
must find the same complete trees with the same joint log-probabilities,
the same best tree, the same log p(x) and prefix marginals (1e-4; the
device sums in float32). A beam wide enough to keep everything must equal
the enumeration of every well-formed tree (`tests/infer/test_beam.py`'s
oracle, scored by `model.__call__`).
"""

from __future__ import annotations

import functools
import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.infer.test_beam import (
    LABELS,
    MAX_CONSECUTIVE,
    MAX_OPEN,
    WORDS,
    enumerate_actions,
    exact_log_probs,
    get_model,
    tiny_vocab,
)
from tgjax.infer.beam import BeamConfig, WordSynchronousBeamSearch, logsumexp
from tgjax.infer.device_beam import DeviceBeamSearch, _assign_rows
from tgjax.infer.incremental import rule_of
from tgjax.syntax import actions as cc

TOL = 1e-4
CONFIGS = {
    "bound": BeamConfig(word_beam=3, action_beam=6, fast_track=1, max_open_nts=MAX_OPEN,
                        max_consecutive_opens=MAX_CONSECUTIVE, batch_sentences=4),
    "count": BeamConfig(word_beam=2, action_beam=5, fast_track=0, max_open_nts=MAX_OPEN,
                        max_consecutive_opens=MAX_CONSECUTIVE, batch_sentences=4, stop="count"),
}


@functools.cache
def searches(names: tuple[str, ...], setting: str):
    """(host, device) searches of a model or an ensemble, built once (the device one compiles once per shape)."""
    vocab = tiny_vocab()
    models = [get_model(name, vocab.size, seed=k) for k, name in enumerate(names)]
    rules = [rule_of(name) for name in names]
    model, rule = (models[0], rules[0]) if len(names) == 1 else (models, rules)
    config = CONFIGS[setting]
    return WordSynchronousBeamSearch(model, vocab, rule, config), DeviceBeamSearch(model, vocab, rule, config)


def assert_same(host_results, device_results):
    for h, d in zip(host_results, device_results):
        assert d.words == h.words
        assert d.best_actions == h.best_actions
        assert abs(d.log_prob - h.log_prob) < TOL
        assert abs(d.best_log_prob - h.best_log_prob) < TOL
        np.testing.assert_allclose(d.prefix_log_probs, h.prefix_log_probs, atol=TOL)
        np.testing.assert_allclose(d.surprisals, h.surprisals, atol=TOL)
        assert [a for a, _ in d.hypotheses] == [a for a, _ in h.hypotheses]
        np.testing.assert_allclose([s for _, s in d.hypotheses], [s for _, s in h.hypotheses], atol=TOL)
        assert d.num_unknown == h.num_unknown
        assert abs(d.surprisals.sum() + d.end_surprisal + d.log_prob) < 1e-6


sentence_batches = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=4, max_size=4)


# TXL (CC) alone: slow (a compiled search of its own); in CI its device scoring is checked against the host's in
# the ensemble with TG (`test_ensemble_of_tg_and_txl_cc_one_beam_over_the_per_action_mixture`).
@pytest.mark.parametrize("name", ["tg", pytest.param("txl_cc", marks=pytest.mark.slow)])
@settings(max_examples=3, deadline=None)
@given(sentences=sentence_batches)
def test_same_trees_and_log_probs_as_the_host_search(name, sentences):
    host, device = searches((name,), "bound")
    host_steps, device_steps = host.steps, device.steps
    assert_same(host.search(sentences), device.search(sentences))
    # The same action steps too: the bound stops each word's search where the host's does.
    assert device.steps - device_steps == host.steps - host_steps


def test_stop_by_count_without_fast_track_as_the_host_search():
    host, device = searches(("tg",), "count")
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]]
    host_steps, device_steps = host.steps, device.steps
    assert_same(host.search(sentences), device.search(sentences))
    assert device.steps - device_steps == host.steps - host_steps


def test_ensemble_of_tg_and_txl_cc_one_beam_over_the_per_action_mixture():
    host, device = searches(("tg", "txl_cc"), "bound")
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]]
    host_results = host.search(sentences)
    assert_same(host_results, device.search(sentences))
    # The mixture is not either member's: the log p(x) differs from the TG member's own search.
    alone = searches(("tg",), "bound")[1].search(sentences)
    assert max(abs(a.log_prob - b.log_prob) for a, b in zip(alone, host_results)) > 1e-3


@functools.cache
def stack_and_full():
    """TG's default device search (the stack-only cache, `searches`') and, of the same model, one that caches
    every position and runs 3 hypotheses per model call (one more compiled search, not two)."""
    vocab = tiny_vocab()
    model = get_model("tg", vocab.size)
    return (searches(("tg",), "bound")[1],
            DeviceBeamSearch(model, vocab, "tg", CONFIGS["bound"], stack_cache=False, chunk=3))


@settings(max_examples=3, deadline=None)
@given(sentences=sentence_batches)
def test_stack_only_cache_and_small_chunks_equal_the_full_cache_path(sentences):
    """TG with only the stack's keys and values cached equals every position's run 3 hypotheses per model call."""
    stack, full = stack_and_full()
    assert stack._family.stack_only == (True,) and full._family.stack_only == (False,)
    assert full.chunk == 3 and stack.chunk is None  # the default: the pool in a few model calls
    assert_same(full.search(sentences), stack.search(sentences))
    assert stack.last_stats["rows_run"] == full.last_stats["rows_run"] < full.last_stats["rows_offered"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tg_distinct_mha", "tg_head_hybrid", "tg_layer_hybrid", "tg_txl_memory_linear_pos"])
def test_tg_variants_as_the_host_search(name):
    host, device = searches((name,), "bound")
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]]
    assert_same(host.search(sentences), device.search(sentences))


@pytest.mark.parametrize("name", ["tg", pytest.param("txl_cc", marks=pytest.mark.slow)])
def test_exhaustive_device_beam_equals_enumeration(name):
    vocab = tiny_vocab()
    model = get_model(name, vocab.size)
    config = BeamConfig(word_beam=64, action_beam=256, fast_track=64, max_open_nts=MAX_OPEN,
                        max_consecutive_opens=MAX_CONSECUTIVE, batch_sentences=2)
    sentences = [["c", "a"], ["b"]]
    for words, result in zip(sentences, DeviceBeamSearch(model, vocab, rule_of(name), config).search(sentences)):
        trees = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE)
        exact = exact_log_probs(model, name, vocab, trees)
        found = {tuple(actions): lp for actions, lp in result.hypotheses}
        assert set(found) == {tuple(t) for t in trees}
        np.testing.assert_allclose([found[tuple(t)] for t in trees], exact, atol=TOL)
        assert abs(result.log_prob - logsumexp(exact)) < TOL
        assert result.best_actions == trees[int(np.argmax(exact))]
        for t in range(len(words)):
            prefixes = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE, upto_word=t)
            assert abs(result.prefix_log_probs[t + 1] - logsumexp(exact_log_probs(model, name, vocab, prefixes))) < TOL
        assert cc.tree_from_choe_charniak(result.best_actions).leaves() == words


# ---------------------------------------------------------------------------
# Bad input.


def test_sentence_longer_than_the_capacity_is_an_error_naming_it_and_the_limit():
    vocab = tiny_vocab()
    device = DeviceBeamSearch(get_model("tg", vocab.size), vocab, "tg", CONFIGS["bound"], capacity=8)
    with pytest.raises(ValueError, match=r"sentence 1 \(7 words.*capacity is 8"):
        device.search([["a"], ["a"] * 7])


def test_beam_sizes_below_one_are_errors():
    vocab = tiny_vocab()
    model = get_model("tg", vocab.size)
    for field in ("word_beam", "action_beam"):
        with pytest.raises(ValueError, match=field):
            DeviceBeamSearch(model, vocab, "tg", BeamConfig(**{field: 0}))
    with pytest.raises(ValueError, match="capacity"):
        DeviceBeamSearch(model, vocab, "tg", capacity=0)


def test_bad_words_and_empty_sentences_name_the_sentence():
    vocab = tiny_vocab()
    device = DeviceBeamSearch(get_model("tg", vocab.size), vocab, "tg", CONFIGS["bound"])
    with pytest.raises(ValueError, match="sentence 1: no words"):
        device.search([["a"], []])
    with pytest.raises(ValueError, match="sentence 0: '\\(A'"):
        device.search([["(A"]])


@pytest.mark.parametrize("room", [dict(positions_per_piece=1, max_capacity=64), dict(stack_slots=4)],
                         ids=["capacity", "stack_slots"])
def test_too_little_room_is_retried_with_more_and_gives_the_host_results(room):
    """Too few layout positions, or 4 stack slots (BOS, the root and two more): successors are refused, and
    the sentences are searched again with more room."""
    vocab = tiny_vocab()
    host = searches(("tg",), "bound")[0]
    device = DeviceBeamSearch(get_model("tg", vocab.size), vocab, "tg", CONFIGS["bound"], **room)
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = device.search(sentences)
    assert device.last_stats["retried"] > 0 and not device.last_stats["capacity_pruned"]
    assert_same(host.search(sentences), results)


def test_the_default_stack_slots_bound_every_stack():
    default = searches(("tg",), "bound")[1]
    default.search([["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]])
    assert default.last_stats["retried"] == 0


# Each pool size is a compiled program of its own: in CI four sizes (one slot, two, an odd middle one and twelve),
# 200 examples drawn over them; every size from 1 to 12 with -m slow.
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_memory_rows_after_a_selection_hold_each_childs_parent_memory(data):
    """Copy on write (`_assign_rows`): after the copies, every kept slot's row holds its parent's memory.

    Memories are modelled as one id per row; the copies are applied in any
    order (they read rows no copy writes), and the rows stay a permutation.
    """
    check_memory_rows_after_a_selection(data, data.draw(st.sampled_from([1, 2, 5, 12])))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_memory_rows_after_a_selection_hold_each_childs_parent_memory_at_every_pool_size(data):
    check_memory_rows_after_a_selection(data, data.draw(st.integers(1, 12)))


assign_rows = jax.jit(_assign_rows)


def check_memory_rows_after_a_selection(data, pool):
    rows = np.asarray(data.draw(st.permutations(range(pool))), np.int32)
    src = np.asarray(data.draw(st.lists(st.integers(0, pool - 1), min_size=pool, max_size=pool)), np.int32)
    kept = np.asarray(data.draw(st.lists(st.booleans(), min_size=pool, max_size=pool)))
    new_rows, copy_from, copy_to = (np.asarray(x) for x in assign_rows(rows, src, kept))
    assert sorted(new_rows.tolist()) == list(range(pool))
    memory = np.arange(pool) * 10  # row r holds memory 10 r; parent slot p's memory is 10 rows[p]
    copies = [(f, t) for f, t in zip(copy_from, copy_to) if t >= 0]
    assert not {f for f, _ in copies} & {t for _, t in copies}
    for f, t in data.draw(st.permutations(copies)):
        memory[t] = memory[f]
    for slot in np.flatnonzero(kept):
        assert memory[new_rows[slot]] == 10 * rows[src[slot]]
    # Nothing is copied that a row already holds: one copy per kept child beyond its parent's first.
    assert len(copies) == int(kept.sum()) - len(set(src[kept].tolist()))


def test_successors_refused_for_capacity_are_counted_and_reported():
    """A tight capacity: hypotheses that would not fit are pruned, counted per sentence, and warned about.

    16 positions (and so 16 stack slots): the first search of `test_too_little_room_is_retried_with_more_and_gives_
    the_host_results[capacity]` (`positions_per_piece=1`), one compiled search for both in one process."""
    vocab = tiny_vocab()
    config = CONFIGS["bound"]
    device = DeviceBeamSearch(get_model("tg", vocab.size), vocab, "tg", config, capacity=16)
    sentences = [["a", "b", "c", "a"], ["c"], ["b", "b", "a"], ["c", "a"]]
    with pytest.warns(UserWarning, match="cache capacity"):
        results = device.search(sentences)
    pruned = device.last_stats["capacity_pruned"]
    assert 0 in pruned and pruned[0] > 0  # 4 words: 1 + 4 + 3 positions of the flattest tree, deeper ones need more
    for words, result in zip(sentences, results):
        # Whatever was kept still fits: at most 16 layout positions (BOS, actions, doubled closes) minus the last close.
        for actions, _ in result.hypotheses:
            positions = 1 + len(actions) + sum(a.endswith(")") for a in actions)
            assert positions - 2 <= 16
            assert cc.tree_from_choe_charniak(actions).leaves() == words
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        searches(("tg",), "bound")[1].search([["c"], ["a"], ["b"], ["a", "b"]])  # enough room: no warning
