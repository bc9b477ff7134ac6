"""Pushdown-LM synchronous inference (`tgjax.infer.pushdown_search`) against its oracle (`pushdown_oracle`).

* the vectorised tape update equals Algorithm 1 (`stack_tape.replay`) on random attachment sequences;
* a beam wide enough to keep every tree gives the exact log p(x) of the exhaustive enumeration (each
  tree scored by one teacher-forced pass of the whole model), and its best tree, for the paper's
  head and the release's switches;
* the device beam (`tgjax.infer.device_beam`'s engine with the Pushdown family) equals the host beam (one
  whole forward pass per hypothesis and step) on random small models and strings: final scores, both
  surprisal definitions, each string of a batch of several lengths as alone, every switch (hypothesis,
  slow; a few fixed cases in CI); a string long enough to read its memory in two compiled sizes, alone and in a
  batch (slow; in CI, in a batch of 3, each string's best parse's score against one teacher-forced pass);
* the beam surprisal is the definition −log Σ p(x_<=t, y_<t) / Σ p(x_<t, y_<t), summed over every
  attachment prefix by enumeration;
* parses: the paper's "The dog is happy", sub-word pieces merged back into words (Appendix C);
* bad input: an empty sentence, a beam of 0, a tape that does not match its tokens.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.infer import pushdown_oracle as oracle
from tgjax.infer.pushdown_search import (
    PushdownBeamConfig,
    PushdownSearch,
    apply_attachment,
    gold_joint_log_prob,
    merge_subword_bracketing,
)
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig
from tgjax.syntax import stack_tape as stt

TOL = 2e-4  # the device sums in float32
BOS, EOS, VOCAB = 1, 2, 12
SWITCHES = {
    "paper": {},
    "release": {"head_scaled": False, "head_self_key_input": "query", "head_relative_positions": True,
                "attachment_normalise": "causal", "depth_space": "model"},
    "binary": {"num_depths": 2, "binary_tape": True},
}


@functools.cache
def get_model(switches: str = "paper", seed: int = 0) -> PushdownLM:
    fields = {"vocab_size": VOCAB, "d_model": 16, "num_layers": 2, "num_heads": 2, "ffw_hidden_size": 32,
              "sequence_length": 16, "num_depths": 6, "dropout": 0.0, "embedding_dropout": 0.0}
    fields.update(SWITCHES[switches])
    return PushdownLM(PushdownLMConfig(**fields), rngs=nnx.Rngs(seed))


class _Vocab:
    """Words "w3".."w11" are ids 3..11; "ab", "ra", "ca", "dabra" spell a word of four pieces."""

    bos_id, eos_id, unk_id = BOS, EOS, 3

    def encode_with_alignment(self, words):
        ids, index = [], []
        for i, word in enumerate(words):
            pieces = [4, 5, 6, 7] if word == "abracadabra" else [int(word[1:]) if word[1:].isdigit() else 3]
            ids += pieces
            index += [i] * len(pieces)
        return np.asarray(ids, np.int32), np.asarray(index, np.int32)

    def encode(self, words):
        return self.encode_with_alignment(words)[0]


def search(switches="paper", seed=0, **config) -> PushdownSearch:
    return PushdownSearch(get_model(switches, seed), _Vocab(), PushdownBeamConfig(**config))


def string(words: list[int]) -> np.ndarray:
    return np.asarray([BOS, *words, EOS], np.int32)


def random_attachments(rng: np.random.Generator, n: int) -> list[int]:
    tape = stt.IncrementalStackTape(n)
    attach = []
    for _ in range(n):
        r = int(rng.choice(tape.candidates()))
        tape.step(r)
        attach.append(r)
    return attach


# -----------------------------------------------------------------------------
# The tape update.


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 15), st.integers(0, 2**31 - 1))
def test_vectorised_tape_update_is_algorithm_1(n, seed):
    attach = random_attachments(np.random.default_rng(seed), n)
    depths, _ = stt.replay(np.asarray(attach))
    state = (np.zeros(16, np.int32), np.zeros(16, np.int32), np.zeros(16, bool))
    step = jax.jit(apply_attachment)
    for k, r in enumerate(attach):
        state = step(*state, k, r)
        np.testing.assert_array_equal(np.asarray(state[1])[:k + 1], depths[k, :k + 1])
        tape = stt.IncrementalStackTape(n)
        for earlier in attach[:k + 1]:
            tape.step(earlier)
        # ends = the stack's rightmost tokens = the next token's candidates other than itself
        np.testing.assert_array_equal(np.flatnonzero(np.asarray(state[2])), tape.candidates()[:-1])


def test_paper_example_the_dog_is_happy():
    """Fig. 2: [[The dog] [is happy]]: "happy" attaches to "dog"; the tape becomes [2, 2, 2, 2]."""
    attach = np.asarray([0, 1, 1, 3, 2, 0])  # <s> The dog is happy <eos>
    # The tape of 16 positions and the jitted update of test_vectorised_tape_update_is_algorithm_1: one compiled
    # program for both (op by op, each of the update's operations compiles a program of its own).
    state = (np.zeros(16, np.int32), np.zeros(16, np.int32), np.zeros(16, bool))
    step = jax.jit(apply_attachment)
    for k, r in enumerate(attach[:5]):
        state = step(*state, k, int(r))
    np.testing.assert_array_equal(np.asarray(state[1])[1:5], [2, 2, 2, 2])
    tree = PushdownSearch.word_tree(attach, np.arange(4))
    assert tree.to_string() == "(X (X 0 1) (X 2 3))"


# -----------------------------------------------------------------------------
# Exhaustive beam == enumeration.


@pytest.mark.parametrize("switches,final", [("paper", "scored"), ("release", "forced"), ("binary", "scored")])
def test_wide_beam_equals_enumeration(switches, final):
    tokens = string([5, 9, 4, 7])
    trees = oracle.enumerate_joint(get_model(switches), tokens, final_attachment=final)
    assert len(trees) == 14  # Catalan(4): every binary tree over 4 words (an unfinished stack folds under ROOT)
    exact = np.logaddexp.reduce([score for _, score in trees])
    result = search(switches, beam_size=16, final_attachment=final).search_ids(tokens)
    assert result.final_scores.size == 14
    assert abs(result.log_prob - exact) < TOL
    best_attach, best_score = max(trees, key=lambda t: t[1])
    np.testing.assert_array_equal(result.best_attach, best_attach)
    assert abs(result.best_log_prob - best_score) < TOL
    np.testing.assert_allclose(result.final_scores, sorted((s for _, s in trees), reverse=True), atol=TOL)


@pytest.mark.parametrize("switches", ["paper", "binary"])
@pytest.mark.parametrize("seed", [0, 1])
def test_exhaustive_beam_surprisals_sum_to_minus_log_p(switches, seed):
    """A beam that holds every tree, the legal softmax: Σ_t surprisal_t = −log p(x), p(x) = Σ_y p(x, y).

    Each step's attachment distribution must sum to one over the slots the search may take: ROOT legal in
    training at a word but forbidden in the search leaves p(x) deficient, and the surprisals no longer sum to it.
    """
    tokens = string(np.random.default_rng(seed).integers(3, VOCAB, size=4).tolist())
    result = search(switches, seed, beam_size=16).search_ids(tokens)
    assert result.final_scores.size == 14  # Catalan(4): every tree
    assert abs(result.token_surprisals.sum() + result.log_prob) < 1e-5


@pytest.mark.parametrize("switches,final", [("paper", "scored"), ("release", "forced")])
def test_one_pass_joint_equals_the_prefix_by_prefix_oracle(switches, final):
    """`eval score`'s gold joint (one teacher-forced pass) == eq. 7 summed over per-prefix forward passes."""
    tokens = string([5, 9, 4, 7])
    for attach in list(oracle.valid_attachment_sequences(tokens.size))[::3]:
        expected = oracle.joint_log_prob(get_model(switches), tokens, attach, final_attachment=final)
        assert abs(gold_joint_log_prob(get_model(switches), tokens, attach, final_attachment=final) - expected) < TOL


def test_beam_surprisal_is_the_definition():
    """Wide beam: surprisal_t = −log Σ_{y_<t} p(x_<=t, y_<t) / Σ_{y_<t} p(x_<t, y_<t), over every attachment prefix."""
    model = get_model("paper")
    tokens = string([8, 3, 10])
    result = search("paper", beam_size=16).search_ids(tokens)
    for t in range(1, tokens.size):
        with_word, without = [], []
        for attach in oracle.valid_attachment_sequences(t, prefix=True):
            prefix_score = oracle.joint_log_prob(model, tokens[:t], attach, prefix=True) if t > 1 else 0.0
            token_lp, _ = oracle.prefix_step_log_probs(model, tokens, attach)
            with_word.append(prefix_score + token_lp[tokens[t]])
            without.append(prefix_score)
        expected = -(np.logaddexp.reduce(with_word) - np.logaddexp.reduce(without))
        assert abs(result.token_surprisals[t - 1] - expected) < TOL, t
    assert abs(result.end_surprisal - result.token_surprisals[-1]) < 1e-12
    np.testing.assert_allclose(result.surprisals, result.token_surprisals[:-1])


# -----------------------------------------------------------------------------
# Device beam == host beam.


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 3), words=st.lists(st.integers(3, VOCAB - 1), min_size=4, max_size=4),
       beam=st.sampled_from([1, 3]))
def test_device_beam_equals_host_beam(seed, words, beam):
    tokens = string(words)
    model = get_model("paper", seed)
    host = oracle.host_beam(model, tokens, beam)
    device = search("paper", seed, beam_size=beam).search_ids(tokens)
    np.testing.assert_allclose(device.final_scores, [s for _, s in host.final], atol=TOL)
    np.testing.assert_array_equal(device.best_attach, host.final[0][0])
    assert abs(device.log_prob - host.log_prob) < TOL
    np.testing.assert_allclose(device.token_surprisals, host.beam_surprisals[1:], atol=TOL)
    release = search("paper", seed, beam_size=beam, surprisal="release").search_ids(tokens)
    np.testing.assert_allclose(release.token_surprisals, -np.diff(host.release_prefix), atol=TOL)


def check_batched_engine_against_the_host_beam(seed, switches, final, beam, batch, strings):
    """`strings` searched `batch` at a time by the engine: each one's answer is the host beam's for it alone."""
    model = get_model(switches, seed)
    lengths = [len(tokens) - 2 for tokens in strings]
    found = {}
    for surprisal in ("beam", "release"):
        engine = search(switches, seed, beam_size=beam, final_attachment=final, surprisal=surprisal,
                        batch_sentences=batch)
        found[surprisal] = engine.search([[f"w{i}" for i in tokens[1:-1]] for tokens in strings])
    for tokens, result, release in zip(strings, found["beam"], found["release"]):
        host = oracle.host_beam(model, tokens, beam, final_attachment=final)
        np.testing.assert_array_equal(result.best_attach, host.final[0][0])
        np.testing.assert_allclose(result.final_scores, [s for _, s in host.final], atol=TOL)
        assert abs(result.log_prob - host.log_prob) < TOL
        np.testing.assert_allclose(result.token_surprisals, host.beam_surprisals[1:], atol=TOL)
        np.testing.assert_allclose(release.token_surprisals, -np.diff(host.release_prefix), atol=TOL)
    if switches != "release":  # the legal softmax: a beam holding every tree sums the surprisals to -log p(x)
        wide = search(switches, seed, beam_size=64, batch_sentences=batch).search(
            [[f"w{i}" for i in tokens[1:-1]] for tokens in strings])
        for n, result in zip(lengths, wide):
            assert result.final_scores.size == math.comb(2 * n, n) // (n + 1)  # Catalan(n): every tree
            assert abs(result.token_surprisals.sum() + result.log_prob) < 1e-5


@pytest.mark.parametrize("seed,switches,final,beam,batch,lengths", [
    (0, "binary", "scored", 3, 3, [3, 1, 4]),      # one batch of three lengths; the wide beam too
    (1, "release", "forced", 2, 2, [2, 5, 1, 3]),  # two batches of two
])
def test_batched_engine_equals_the_host_beam_for_each_string(seed, switches, final, beam, batch, lengths):
    """Strings of different lengths searched `batch` at a time by the engine (one compiled loop per batch, sorted
    by length, finished strings idling): each string's answer is the host beam's for it alone, both surprisals.
    (Two cases, a compilation or two each; the paper's head is searched in a batch in
    `test_long_string_reads_the_memory_in_growing_sizes`; `test_batched_engine_equals_the_host_beam_for_random_
    strings`, slow, draws models, settings and strings.)"""
    rng = np.random.default_rng(seed)
    strings = [string(rng.integers(3, VOCAB, size=n).tolist()) for n in lengths]
    check_batched_engine_against_the_host_beam(seed, switches, final, beam, batch, strings)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 3), switches=st.sampled_from(["paper", "release", "binary"]),
       final=st.sampled_from(["scored", "forced"]), beam=st.integers(1, 5), batch=st.integers(1, 3),
       lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4), data=st.data())
def test_batched_engine_equals_the_host_beam_for_random_strings(seed, switches, final, beam, batch, lengths, data):
    """As `test_batched_engine_equals_the_host_beam_for_each_string`, on drawn models, settings and strings."""
    strings = [string(data.draw(st.lists(st.integers(3, VOCAB - 1), min_size=n, max_size=n))) for n in lengths]
    check_batched_engine_against_the_host_beam(seed, switches, final, beam, batch, strings)


def long_string_engine():
    """(model, 35 tokens, an engine at capacity 48 with 3 strings per batch): the engine reads 32 cached positions,
    then 48 (two compiled sizes), and copies caches by the size in use."""
    model = get_model("paper", 1)
    tokens = string(np.random.default_rng(5).integers(3, VOCAB, size=33).tolist())
    return model, tokens, search("paper", 1, beam_size=3, batch_sentences=3, bucket=48)


def long_string_searched_alone_and_with_others():
    """(model, the 35 tokens, the engine's result for them alone, searched with 2 shorter strings)."""
    model, tokens, engine = long_string_engine()
    alone = engine.search_ids(tokens)
    together = engine.search([["w5"], [f"w{i}" for i in tokens[1:-1]], ["w7", "w8"]])[1]
    return model, tokens, alone, together


def test_long_string_reads_the_memory_in_growing_sizes():
    """35 tokens at capacity 48 (`long_string_engine`) searched with 2 shorter strings: each string's best parse's
    score is its joint log-probability from one teacher-forced pass of the whole string. (One compiled search, of 3
    strings; `test_long_string_equals_the_host_beam`, slow: every hypothesis and surprisal against the host beam,
    the string alone (a compiled search of 1 string) and with the others.)"""
    model, tokens, engine = long_string_engine()
    strings = [string([5]), tokens, string([7, 8])]
    together = engine.search([[f"w{i}" for i in ids[1:-1]] for ids in strings])
    assert [r.final_scores.size for r in together] == [1, 3, 2]  # 1 tree over 1 word, 2 over 2; a beam of 3
    for ids, result in zip(strings, together):
        assert abs(result.final_scores[0] - gold_joint_log_prob(model, ids, result.best_attach)) < TOL
        assert abs(result.best_log_prob - result.final_scores[0]) < 1e-9


@pytest.mark.slow
def test_long_string_equals_the_host_beam():
    """The host beam (whole forward passes) agrees with the engine on 35 tokens, alone and with 2 other strings (so
    the two agree)."""
    model, tokens, alone, together = long_string_searched_alone_and_with_others()
    host = oracle.host_beam(model, tokens, 3)
    for result in (alone, together):
        np.testing.assert_array_equal(result.best_attach, host.final[0][0])
        np.testing.assert_allclose(result.final_scores, [s for _, s in host.final], atol=TOL)
        np.testing.assert_allclose(result.token_surprisals, host.beam_surprisals[1:], atol=TOL)


def test_release_surprisal_differs_from_the_definition():
    """The release's indexing (candidate o instead of origin o) changes the numbers once the beam prunes."""
    tokens = string([5, 9, 4, 7, 6])
    paper = search("paper", beam_size=3).search_ids(tokens)
    release = search("paper", beam_size=3, surprisal="release").search_ids(tokens)
    assert abs(paper.token_surprisals[0] - release.token_surprisals[0]) < TOL  # one hypothesis: they agree
    assert np.max(np.abs(paper.token_surprisals - release.token_surprisals)) > 1e-3


def test_prefix_entry_point():
    """`prefix`: the top hypothesis of the host beam (no end) and the next-token log-probs under its tape."""
    model = get_model("binary")
    tokens = np.asarray([BOS, 5, 9, 4, 7], np.int32)
    host = oracle.host_beam(model, tokens, 3, prefix=True)
    result = search("binary", beam_size=3).prefix(tokens)
    np.testing.assert_array_equal(result.best_attach, host.final[0][0])
    assert abs(result.log_prob - host.log_prob) < TOL
    for k in range(1, tokens.size + 1):
        expected, _ = oracle.prefix_step_log_probs(model, tokens, result.best_attach[:k])
        np.testing.assert_allclose(result.log_probs[k - 1], expected, atol=TOL)


PREFIX_STRINGS = st.lists(st.lists(st.integers(4, VOCAB - 1), min_size=0, max_size=9), min_size=1, max_size=5)


@settings(max_examples=4, deadline=None)
@given(PREFIX_STRINGS, st.sampled_from([1, 2]))
def test_prefixes_searched_together_are_each_searched_alone(words, num_parallel):
    """`prefix_attachments` (several strings per compiled loop, each stopping at its own length) finds what
    the host beam finds for each string alone, whatever the others in its group. Groups of 1 or 2 in CI (compiled
    loops of 1 string, `test_prefix_entry_point`'s, and of 2); of 3 too in the slow twin."""
    check_prefixes_searched_together(words, num_parallel)


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(PREFIX_STRINGS, st.integers(1, 3))
def test_prefixes_searched_together_are_each_searched_alone_more_examples(words, num_parallel):
    check_prefixes_searched_together(words, num_parallel)


def check_prefixes_searched_together(words, num_parallel):
    model = get_model("binary")
    strings = [np.asarray([BOS, *w], np.int32) for w in words]
    together = search("binary", beam_size=3).prefix_attachments(strings, num_parallel=num_parallel)
    assert len(together) == len(strings)
    for tokens, (best_attach, log_prob) in zip(strings, together):
        if tokens.size == 1:
            assert best_attach.tolist() == [0] and log_prob == 0.0
            continue
        host = oracle.host_beam(model, tokens, 3, prefix=True)
        np.testing.assert_array_equal(best_attach, host.final[0][0])
        assert abs(log_prob - host.log_prob) < TOL


# -----------------------------------------------------------------------------
# Parses over words.


def test_subword_pieces_merge_into_words():
    """Appendix C: (ab, (ra, (ca, dabra))) merges into abracadabra."""
    assert merge_subword_bracketing((0, (1, (2, 3))), [0, 0, 0, 0]) == "0"
    tree = merge_subword_bracketing((0, (1, (2, (3, 4)))), [0, 1, 1, 1, 1])
    assert tree.to_string() == "(X 0 1)"
    # A node that cuts a word is dropped: its pieces join the parent.
    assert merge_subword_bracketing(((0, 1), (2, 3)), [0, 1, 1, 2]).to_string() == "(X 0 1 2)"
    assert merge_subword_bracketing(((0, (1, 2)), 3), [0, 1, 1, 2]).to_string() == "(X (X 0 1) 2)"


def test_search_words_gives_a_tree_over_words():
    result = search(beam_size=3).search([["w5", "abracadabra", "w9"]])[0]
    assert result.best_tree.leaves() == ["w5", "abracadabra", "w9"]
    assert result.surprisals.shape == (3,)
    assert abs(result.surprisals[1] - result.token_surprisals[1:5].sum()) < 1e-9
    assert math.isfinite(result.log_prob) and result.log_prob <= result.best_log_prob + np.log(3) + TOL


# -----------------------------------------------------------------------------
# Bad input.


def test_bad_input_names_the_sentence():
    with pytest.raises(ValueError, match="sentence 1: empty sentence"):
        search(beam_size=3).search([["w5"], []])
    with pytest.raises(ValueError, match="beam size must be at least 1"):
        PushdownBeamConfig(beam_size=0)
    with pytest.raises(ValueError, match="tree 7: 2 attachments for 3 tokens"):
        oracle.joint_log_prob(get_model(), string([5]), [0, 1], name="tree 7")
    with pytest.raises(ValueError, match="tree 8: the attachments are not a valid stack tape"):
        oracle.joint_log_prob(get_model(), string([5, 6]), [0, 1, 0, 0], name="tree 8")
    with pytest.raises(ValueError, match="word_index has 2 entries for 3 ids"):
        search(beam_size=3).search_ids(string([5]), word_index=[-1, 0])
    with pytest.raises(ValueError, match=r"prefix 1: expected <s> \(id 1\) first, got id 5"):
        search(beam_size=3).prefix_attachments([[BOS, 5], [5, 6]])


# -----------------------------------------------------------------------------
# Sampling.


def renormalised_joint(model, ids, attach) -> float:
    """Σ_k log p(x_k) + log p(r_k), each attachment renormalised over its legal slots (the oracle's masks)."""
    total = 0.0
    for k in range(1, len(ids)):
        token_lp, slot_lp = oracle.prefix_step_log_probs(model, ids, attach[:k], final=k == len(ids) - 1)
        total += token_lp[ids[k]] + slot_lp[attach[k]] - np.logaddexp.reduce(slot_lp[np.isfinite(slot_lp)])
    return total


@pytest.mark.parametrize("switches", ["paper", "release"])
def test_samples_are_parses_with_their_joint_log_prob(switches):
    """The sampler's log-probability is what it drew from: the head renormalised over the legal slots. With the
    legal softmax that is the gold joint; with the causal one (the release) it is more than the beam's score."""
    from tgjax.infer.pushdown_sampling import PushdownSamplingConfig, sample

    vocab = _Vocab()
    vocab.pad_id = 0
    vocab.decode = lambda ids: [f"w{i}" for i in ids]
    model = get_model(switches)
    samples = sample(model, vocab, 3, config=PushdownSamplingConfig(max_tokens=6), seed=1)
    for s in samples:
        assert s.ids[0] == BOS and s.ids[-1] == EOS and EOS not in s.ids[1:-1] and BOS not in s.ids[1:]
        assert s.attach[-1] == 0 and 0 not in s.attach[1:-1]  # only <eos> attaches to ROOT
        assert abs(s.log_prob - renormalised_joint(model, s.ids, s.attach)) < TOL
        gold = gold_joint_log_prob(model, s.ids, s.attach)
        assert abs(s.log_prob - gold) < TOL if switches == "paper" else s.log_prob > gold + 1e-3
        assert s.tree.leaves() == [f"w{i}" for i in s.ids[1:-1]]
        assert s.truncated == (len(s.ids) == 7)
    greedy = PushdownSamplingConfig(temperature=0, max_tokens=6)
    first, second = (sample(model, vocab, 1, config=greedy, seed=seed)[0] for seed in (0, 5))
    np.testing.assert_array_equal(first.ids, second.ids)
