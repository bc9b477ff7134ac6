"""Ancestral sampling: every sample is a well-formed tree within the caps; greedy limits; log-probabilities."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data import corpora
from tgjax.data import pipeline as pl
from tgjax.data.vocab import train_sentencepiece
from tgjax.eval import sample_command
from tgjax.eval.sample_command import main_sample
from tgjax.infer.api import LoadedModel
from tgjax.infer.choe_charniak import ActionSpace, ChoeCharniakFamily
from tgjax.infer.incremental import PrefixScorer
from tgjax.infer.loading import from_model
from tgjax.infer.sampling import Sampler, SamplingConfig, choose
from tgjax.infer.scoring import Scorer, encode
from tgjax.infer.search import SamplingFamily, TokenScores
from tgjax.models import build_model
from tgjax.syntax import actions as cc
from tgjax.syntax import token_types as tt
from tgjax.syntax import trees

from .test_beam import exact_log_probs, get_model, tiny_vocab

BATCH = 16


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocab()


def check_well_formed(tokens, config):
    """The tree reads back; caps and length hold; no reserved tokens."""
    tree = cc.tree_from_choe_charniak(tokens)  # raises on anything malformed, a second root included
    assert len(tokens) <= config.max_actions
    depth = consecutive = 0
    for token in tokens:
        kind = cc.token_type(token)
        assert token not in ("<s>", "<PAD>", "</s>")
        if kind == tt.OPENING_NT:
            depth += 1
            consecutive += 1
            assert depth <= config.max_open_nts and consecutive <= config.max_consecutive_opens
        else:
            consecutive = 0
            depth -= kind == tt.CLOSING_NT
    return tree


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_sample_is_a_well_formed_tree(vocab, name, seed):
    model = get_model(name, vocab.size)
    settings = [SamplingConfig(max_actions=12, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH),
                SamplingConfig(temperature=2.0, top_k=3, max_actions=20, max_open_nts=2, max_consecutive_opens=1,
                               batch_size=BATCH),
                SamplingConfig(temperature=0.7, top_p=0.8, max_actions=16, batch_size=BATCH, allow_unk=False)]
    config = settings[seed]
    samples = Sampler(model, vocab, name, config).sample(48, seed=seed)
    assert len(samples) == 48
    for s in samples:
        tree = check_well_formed(s.actions, config)
        assert tree.leaves()  # at least one word
        if not config.allow_unk:
            assert "<XXX>" not in s.actions
    if seed == 0:  # at temperature 1, samples of several lengths
        assert len({len(s.actions) for s in samples}) > 1


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_greedy_limits(vocab, name):
    model = get_model(name, vocab.size)
    base = dict(max_actions=14, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH)
    greedy = Sampler(model, vocab, name, SamplingConfig(temperature=0.0, **base)).sample(4, seed=0)
    assert all(s.actions == greedy[0].actions for s in greedy)
    for config in (SamplingConfig(top_k=1, **base), SamplingConfig(temperature=1e-4, **base),
                   SamplingConfig(top_p=1e-6, **base)):
        for seed in (0, 5):
            for s in Sampler(model, vocab, name, config).sample(4, seed=seed):
                assert s.actions == greedy[0].actions
    # A higher temperature gives variety.
    varied = Sampler(model, vocab, name, SamplingConfig(temperature=3.0, **base)).sample(BATCH, seed=1)
    assert len({tuple(s.actions) for s in varied}) > 1


@pytest.mark.parametrize("name", ["tg", "txl_cc"])
def test_log_prob_is_the_models_own_and_prompts_are_continued(vocab, name):
    model = get_model(name, vocab.size)
    config = SamplingConfig(max_actions=16, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH)
    sampler = Sampler(model, vocab, name, config)
    samples = sampler.sample(6, seed=3)
    np.testing.assert_allclose([s.log_prob for s in samples],
                               exact_log_probs(model, name, vocab, [s.actions for s in samples]), atol=1e-4)
    prompt = ["(A", "(B", "b"]
    continued = sampler.sample(6, seed=4, prompt=" ".join(prompt))
    full = exact_log_probs(model, name, vocab, [s.actions for s in continued])
    head = exact_log_probs(model, name, vocab, [prompt])[0]
    for s, total in zip(continued, full):
        assert s.actions[:3] == prompt and s.num_prompt_actions == 3
        check_well_formed(s.actions, config)
        assert abs(s.log_prob - (total - head)) < 1e-4
    # A complete prompt is returned as it is; an unknown word in a prompt is kept.
    (done,) = sampler.sample(1, prompt="(A a A)")
    assert done.actions == ["(A", "a", "A)"] and done.log_prob == 0.0
    (unknown,) = sampler.sample(1, prompt="(A zebra")
    assert unknown.actions[:2] == ["(A", "zebra"]


def test_bad_prompts_and_configs(vocab):
    sampler = Sampler(get_model("tg", vocab.size), vocab, "tg", SamplingConfig(max_actions=6, batch_size=BATCH))
    for prompt, message in [("a", "outside any constituent"), ("(A b B)", "innermost open constituent"),
                            ("(A A)", "empty constituent"), ("(A a A) (B", "already complete"),
                            ("(C a", "unknown non-terminal"), ("(A (A (A (A (A", "no room")]:
        with pytest.raises(ValueError, match=message):
            sampler.sample(1, prompt=prompt)
    for kwargs, message in [(dict(temperature=-1), "temperature"), (dict(top_k=-1), "top_k"),
                            (dict(top_p=0.0), "top_p"), (dict(max_actions=2), "max_actions")]:
        with pytest.raises(ValueError, match=message):
            SamplingConfig(**kwargs)
    with pytest.raises(ValueError, match="syntactic model"):
        Sampler(get_model("tg", vocab.size), vocab, "txl_terminals")


def test_choose_truncates_as_asked():
    log_probs = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]] * 2000))
    allowed = jnp.ones((2000, 4), bool).at[:, 0].set(False)  # the best is not allowed
    key = jax.random.PRNGKey(0)

    def draw(temperature=1.0, top_k=0, top_p=1.0, greedy=False):
        return np.asarray(choose(key, log_probs, allowed, jnp.float32(temperature), jnp.int32(top_k),
                                 jnp.float32(top_p), greedy=greedy))

    assert set(draw(greedy=True)) == {1}
    assert set(draw(top_k=1)) == {1}
    assert set(draw(top_k=2)) == {1, 2}
    counts = np.bincount(draw(), minlength=4) / 2000
    np.testing.assert_allclose(counts, [0, 0.6, 0.3, 0.1], atol=0.04)  # renormalised over the allowed
    # top_p=0.7 of (0.6, 0.3, 0.1): the first two (0.6 < 0.7 <= 0.9).
    assert set(draw(top_p=0.7)) == {1, 2}
    assert set(draw(top_p=0.5)) == {1}
    assert set(draw(temperature=1e-3)) == {1}


def test_main_sample(vocab, monkeypatch, capsys, tmp_path):
    loaded = LoadedModel.in_memory("lm", from_model(get_model("tg", vocab.size), vocab, "tg"), workdir="W")
    monkeypatch.setattr(sample_command, "_load", lambda workdir, step: loaded)
    assert main_sample(["--workdir", "W", "--num-samples", "3", "--max-actions", "12", "--batch-size",
                       str(BATCH), "--max-open-nts", "3", "--log-probs"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 3
    for line in lines:
        log_prob, tree = line.split("\t")
        assert float(log_prob) < 0 and tree.startswith("(")
    out = tmp_path / "samples.txt"
    assert main_sample(["--workdir", "W", "--num-samples", "2", "--temperature", "0", "--prompt", "(B c",
                       "--max-actions", "12", "--batch-size", str(BATCH), "-o", str(out)]) == 0
    trees = out.read_text().strip().split("\n")
    assert len(trees) == 2 and trees[0] == trees[1] and trees[0].startswith("(B c")
    assert main_sample(["--workdir", "W", "--prompt", "a", "--batch-size", str(BATCH)]) == 2
    assert "outside any constituent" in capsys.readouterr().err


# -----------------------------------------------------------------------------
# Pinned samples: the same trees and log p on the same seed as before sampling went through `SamplingFamily`
# (recorded from the sampler of commit 8867bee), and the log p of each is the one `Scorer` gives the sequence.

PINNED_CONFIG = SamplingConfig(max_actions=16, max_open_nts=3, max_consecutive_opens=2, batch_size=BATCH)
PINNED = {  # (model, seed, prompt, extra config) -> the first samples drawn
    ("tg", 3, None, ()): [
        ("(B (B c a (B b b b b b b b b B) B) B)", -28.01898616552353),
        ("(A (A <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> <XXX> A) A)", -15.271875083446503),
        ("(A (A c c c c c c c c (A <XXX> <XXX> A) A) A)", -19.755080178380013)],
    ("txl_cc", 4, "(A (B b", ()): [
        ("(A (B b b b b b c (A <XXX> <XXX> <XXX> <XXX> A) B) A)", -22.503148779273033),
        ("(A (B b b b b b b b b b b b b B) A)", -11.074721649289131),
        ("(A (B b b b b b b b b b b b <XXX> B) A)", -14.122072502970695)],
    ("tg", 1, None, (("temperature", 2.0), ("top_k", 3))): [
        ("(B (B c c b <XXX> <XXX> <XXX> <XXX> <XXX> (A <XXX> <XXX> A) B) B)", -31.572540432214737),
        ("(A b (A (A b <XXX> c A) A) A)", -25.490728497505188),
        ("(A (A b <XXX> b b (A c A) A) (A b b b A) A)", -34.93881045281887),
        ("(B c (A <XXX> <XXX> <XXX> (A c c c c c b A) A) B)", -33.12883850932121),  # after a finished sample
        ("(A (A b (A c c b b b <XXX> <XXX> <XXX> <XXX> A) A) A)", -26.756888434290886)],
}


@pytest.mark.parametrize("case", list(PINNED), ids=lambda c: f"{c[0]}-seed{c[1]}")
def test_pinned_samples_and_their_scorer_log_probs(vocab, case):
    name, seed, prompt, extra = case
    model = get_model(name, vocab.size)
    config = SamplingConfig(**{**PINNED_CONFIG.__dict__, **dict(extra)})
    samples = Sampler(model, vocab, name, config).sample(len(PINNED[case]), seed=seed, prompt=prompt)
    assert [" ".join(s.actions) for s in samples] == [actions for actions, _ in PINNED[case]]
    np.testing.assert_allclose([s.log_prob for s in samples], [lp for _, lp in PINNED[case]], rtol=0, atol=1e-5)
    # Independently: the whole sequence read by the evaluation scorer (one segment per sequence, no caches).
    scores = Scorer(from_model(model, vocab, name), batch_size=4).score_encoded([encode(vocab, s.actions)
                                                                                 for s in samples])
    for s, score in zip(samples, scores):
        assert s.log_prob == pytest.approx(float(np.sum(score.token_logprobs[s.num_prompt_actions:])), abs=1e-4)


@functools.cache
def sentencepiece_model():
    """A SentencePiece vocabulary of the built-in corpus (400 pieces, byte fallback) and a fresh TG for it."""
    trees = corpora.get_corpus("builtin", "train", num_sentences=200, seed=0)
    vocab = train_sentencepiece([pl.tokens_for_rule(t, "tg", pos_tags=True) for t in trees], 400)
    model = build_model("tg", vocab.size, rngs=nnx.Rngs(params=0, dropout=0), sequence_length=16, memory_length=16,
                        d_model=32, num_layers=2, num_heads=4, ffw_hidden_size=64)
    return vocab, model


def test_sentencepiece_pieces_one_id_at_a_time():
    """A word of several pieces: continuation pieces only right after a piece; one word action; decoded whole."""
    vocab, model = sentencepiece_model()
    space = ActionSpace.from_vocab(vocab)
    scorer = PrefixScorer(model, "tg", space.token_types, candidate_ids=None)
    family = ChoeCharniakFamily([scorer], space, max_open_nts=4, max_consecutive_opens=3)
    word_start, continuation = space.word_pieces
    pieces = [int(i) for i in vocab.encode(["elephan"])]
    assert len(pieces) >= 2 and word_start[pieces[0]] and not word_start[pieces[1:]].any()
    state = family.state_after(["(S", "(NP"])
    allowed = family.allowed_tokens([state], 20)[0]
    assert continuation.any() and not allowed[continuation].any() and allowed[pieces[0]]
    assert not allowed[[vocab.pad_id, vocab.bos_id, vocab.eos_id]].any()
    for piece in pieces:
        assert family.allowed_tokens([state], 20)[0, piece]
        state = family.advance_token(state, piece, None)
        allowed = family.allowed_tokens([state], 20)[0]
        # the word may go on, with any piece but those that would break it (tgjax.infer.word_guard)
        assert allowed[continuation & ~space.word_guard.never].all() and not allowed[space.word_guard.never].any()
    assert family.decode(state) == ["(S", "(NP", "elephan"]
    assert family.state_after(["(S", "(NP", "elephan"])[:4] == state[:4]  # one word action, all its pieces
    assert family.steps_to_finish(state) == 2
    # Near the cap: only what still closes in time (NP) then S)): no opening, no word.
    tight = family.allowed_tokens([state], len(state.ids) + 2)[0]
    assert np.flatnonzero(tight).tolist() == [int(vocab.encode(["NP)"])[0])]


@pytest.mark.slow
def test_sentencepiece_samples_as_pinned():
    """Samples and log p as the sampler of commit 8867bee drew them, a prompt's last word continued by pieces;
    the first and third fresh samples as redrawn once the word guard (54f3ad4) kept whitespace bytes out.

    (No `Scorer` check: a sampled word's pieces need not be the segmentation that encoding its text gives.
    That every such sample reads back as its tree is test_every_sentencepiece_sample_reads_back_as_its_tree.)
    """
    vocab, model = sentencepiece_model()
    config = SamplingConfig(max_actions=14, max_open_nts=3, max_consecutive_opens=2, batch_size=4, temperature=1.5)
    sampler = Sampler(model, vocab, "tg", config)
    fresh = sampler.sample(4, seed=0)
    np.testing.assert_allclose([s.log_prob for s in fresh], [-87.27928495407104, -86.33950519561768,
                                                             -84.57964789867401, -88.31448698043823], atol=1e-4)
    assert [len(s.actions) for s in fresh] == [5, 5, 4, 6]
    continued = sampler.sample(4, seed=1, prompt="(S (NP the elephan")
    assert [s.actions for s in continued] == [
        ["(S", "(NP", "the", "elephan", "dancer", "NP)", "S)"], ["(S", "(NP", "the", "elephan", "che", "NP)", "S)"],
        ["(S", "(NP", "the", "elephanQ", "NP)", "S)"], ["(S", "(NP", "the", "elephan\ufffd", "NP)", "S)"]]
    np.testing.assert_allclose([s.log_prob for s in continued], [-19.14188289642334, -16.767935752868652,
                                                                 -18.050346851348877, -20.077448844909668], atol=1e-4)


# -----------------------------------------------------------------------------
# SentencePiece words that a tree can hold (tgjax.infer.word_guard): byte pieces decode to any character.


@settings(max_examples=3, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_every_sentencepiece_sample_reads_back_as_its_tree(seed):
    """A near-uniform model samples byte pieces often; before the guard about 1 sample in 5 held a word with
    whitespace (`\\x0b`, a space byte), a bracket, or nothing in it."""
    vocab, model = sentencepiece_model()
    config = SamplingConfig(max_actions=14, max_open_nts=3, max_consecutive_opens=2, batch_size=16, temperature=1.5)
    for sample in Sampler(model, vocab, "tg", config).sample(16, seed=seed):
        tree = sample.tree
        assert trees.parse(tree.to_string()) == tree, sample.actions
        assert cc.choe_charniak(tree, pos_tags=False) == sample.actions


def piece(vocab, text: str) -> int:
    i = vocab.processor.piece_to_id(text)
    assert vocab.processor.id_to_piece(i) == text
    return i


def test_word_guard_by_hand():
    vocab, _ = sentencepiece_model()
    guard = ActionSpace.from_vocab(vocab).word_guard
    bare, c2, a0, copyright_byte = (piece(vocab, t) for t in ("\u2581", "<0xC2>", "<0xA0>", "<0xA9>"))
    assert guard.never[[piece(vocab, t) for t in ("<0x20>", "<0x0B>", "<0x1C>", "<0x28>", "<0x29>")]].all()
    assert not guard.never[[piece(vocab, t) for t in ("<0x41>", "<0xC2>", "s")]].any()
    assert guard.start_needs_more[bare] and guard.start_needs_more.sum() == 1
    # A bare "▁" is an empty word: it must go on.
    must_continue, allowed = guard.after([bare], can_grow=True)
    assert must_continue and allowed[copyright_byte] and not allowed[piece(vocab, "<0x20>")]
    # C2 A0 is U+00A0 (no-break space): after C2, A0 is out and A9 ("©") is in; C2 alone decodes as U+FFFD.
    must_continue, allowed = guard.after([bare, c2], can_grow=True)
    assert not must_continue and not allowed[a0] and allowed[copyright_byte]
    # "<s" then ">" spells BOS: only where one more piece fits, and then the word goes on.
    less, s_piece, more = piece(vocab, "<0x3C>"), piece(vocab, "s"), piece(vocab, "<0x3E>")
    assert not guard.after([bare, less, s_piece], can_grow=False)[1][more]
    assert guard.after([bare, less, s_piece], can_grow=True)[1][more]
    assert guard.after([bare, less, s_piece, more], can_grow=True)[0]


def test_an_empty_word_start_needs_room_for_one_more_piece():
    vocab, model = sentencepiece_model()
    space = ActionSpace.from_vocab(vocab)
    family = ChoeCharniakFamily([PrefixScorer(model, "tg", space.token_types, candidate_ids=None)], space,
                                max_open_nts=4, max_consecutive_opens=3)
    state = family.state_after(["(S", "(NP"])
    bare = piece(vocab, "\u2581")
    used = len(state.ids)
    assert not family.allowed_tokens([state], used + 3)[0, bare]  # ▁, NP), S): nothing left for a second piece
    assert family.allowed_tokens([state], used + 4)[0, bare]
    after = family.advance_token(state, bare, None)
    allowed = family.allowed_tokens([after], used + 4)[0]
    assert allowed.any() and not allowed[space.close_ids].any() and not allowed[space.word_pieces[0]].any()


# -----------------------------------------------------------------------------
# The family's sampling interface against a brute-force oracle: an id is allowed iff some completion of the
# prefix with it is a well-formed tree within the caps and the length; steps_to_finish is the shortest completion.

ORACLE_TOKENS = ("(A", "(B", "A)", "B)", "a", "b", "c", "<XXX>")


def oracle_prefix_ok(tokens, max_open, max_consecutive):
    """Whether `tokens` is a prefix of a well-formed tree within the caps; written from the rules alone."""
    stack, consecutive, complete = [], 0, False
    for token in tokens:
        if complete:
            return False
        if token.startswith("("):
            stack.append([token[1:], False])
            consecutive += 1
            if len(stack) > max_open or consecutive > max_consecutive:
                return False
        elif token.endswith(")"):
            if not stack or stack[-1][0] != token[:-1] or not stack[-1][1]:
                return False
            stack.pop()
            consecutive = 0
            if stack:
                stack[-1][1] = True
            else:
                complete = True
        else:
            if not stack:
                return False
            stack[-1][1] = True
            consecutive = 0
    return True


def oracle_is_tree(tokens):
    try:
        return tokens and len(cc.tree_from_choe_charniak(list(tokens)).leaves()) > 0
    except ValueError:
        return False


@functools.cache
def shortest_completion(prefix, max_length, max_open, max_consecutive):
    """The fewest tokens that make `prefix` a whole tree within the caps and `max_length` (inf: none)."""
    if not oracle_prefix_ok(prefix, max_open, max_consecutive):
        return math.inf
    if oracle_is_tree(prefix):
        return 0
    if len(prefix) >= max_length:
        return math.inf
    return 1 + min(shortest_completion(prefix + (t,), max_length, max_open, max_consecutive) for t in ORACLE_TOKENS)


@pytest.mark.parametrize("max_length,max_open,max_consecutive", [(6, 2, 2), (7, 3, 1)])
def test_allowed_tokens_and_steps_to_finish_against_brute_force(vocab, max_length, max_open, max_consecutive):
    space = ActionSpace.from_vocab(vocab)
    scorer = PrefixScorer(get_model("tg", vocab.size), "tg", space.token_types, candidate_ids=None)
    family = ChoeCharniakFamily([scorer], space, max_open_nts=max_open, max_consecutive_opens=max_consecutive)
    assert isinstance(family, SamplingFamily)
    ids = {t: int(vocab.encode([t])[0]) for t in ORACLE_TOKENS}
    checked = 0
    frontier = [((), family.initial_state())]
    while frontier:  # every prefix that can still be completed, each reached by advance_token
        prefix, state = frontier.pop()
        need = shortest_completion(prefix, max_length, max_open, max_consecutive)
        assert family.steps_to_finish(state) == (need if prefix else 3), prefix
        assert family.length(state) == len(prefix)
        assert family.decode(state) == list(prefix)
        allowed = family.allowed_tokens([state], max_length)[0]
        expected = np.zeros(vocab.size, bool)
        for t in ORACLE_TOKENS:
            expected[ids[t]] = shortest_completion(prefix + (t,), max_length, max_open, max_consecutive) < math.inf
        assert (allowed == expected).all(), (prefix, np.flatnonzero(allowed), np.flatnonzero(expected))
        assert family.state_after(list(prefix))[:4] == state[:4]  # same ids, actions, stack, opens as advancing
        checked += 1
        for t in ORACLE_TOKENS:
            if expected[ids[t]]:
                frontier.append((prefix + (t,), family.advance_token(state, ids[t], None)))
    assert checked > 200
    no_unk = ChoeCharniakFamily([scorer], space, max_open_nts=2, max_consecutive_opens=2, allow_unk=False)
    state = no_unk.state_after(["(A"])
    assert not no_unk.allowed_tokens([state], 6)[0, vocab.unk_id]
    assert family.allowed_tokens([state], 6)[0, vocab.unk_id]


def test_next_token_scores_needs_the_whole_vocabulary(vocab):
    model = get_model("tg", vocab.size)
    space = ActionSpace.from_vocab(vocab)
    nts = PrefixScorer(model, "tg", space.token_types, candidate_ids=np.concatenate([space.open_ids, space.close_ids]))
    family = ChoeCharniakFamily([nts], space, max_open_nts=3, max_consecutive_opens=2)
    with pytest.raises(ValueError, match="whole vocabulary"):
        family.next_token_scores([family.initial_state()])
    with pytest.raises(ValueError, match="candidate_ids"):
        ChoeCharniakFamily([PrefixScorer(model, "tg", space.token_types, candidate_ids=space.open_ids)], space,
                           max_open_nts=3, max_consecutive_opens=2)


def test_full_vocabulary_family_scores_as_the_search_family(vocab):
    """`score` reads the same action log p from full-vocabulary scorers; `next_token_scores` agrees with it."""
    model = get_model("tg", vocab.size)
    space = ActionSpace.from_vocab(vocab)
    caps = dict(max_open_nts=3, max_consecutive_opens=2)
    nts = np.concatenate([space.open_ids, space.close_ids])
    rows = dict(max_batch=BATCH, min_batch=BATCH)  # the sampler's shapes: compiled once for the whole file
    search = ChoeCharniakFamily([PrefixScorer(model, "tg", space.token_types, candidate_ids=nts, **rows)], space,
                                **caps)
    full = ChoeCharniakFamily([PrefixScorer(model, "tg", space.token_types, candidate_ids=None, **rows)], space,
                              **caps)
    prompts = [["(A"], ["(A", "(B", "b"], ["(B", "a", "(A", "c", "A)"]]
    states = [full.state_after(p) for p in prompts]
    word = tuple(int(i) for i in vocab.encode(["c"]))
    expected = search.score(states, [word] * 3)
    got = full.score(states, [word] * 3)
    np.testing.assert_allclose(got.log_probs, expected.log_probs, atol=1e-5)
    tokens = full.next_token_scores(states).log_probs  # [3, V]
    L = space.num_labels
    expected = expected.log_probs
    np.testing.assert_allclose(tokens[:, space.open_ids], expected[:, :L], atol=1e-5)
    np.testing.assert_allclose(tokens[:, word[0]], expected[:, L + 1], atol=1e-5)
    innermost = [space.close_ids[s.stack[-1] >> 1] for s in states]
    np.testing.assert_allclose(tokens[np.arange(3), innermost], expected[:, L], atol=1e-5)
    np.testing.assert_allclose(np.exp(tokens).sum(-1), 1.0, atol=1e-5)


class ToyFamily:
    """A `SamplingFamily` that is not a model: bracketings over one label and one word, fixed next-id log p.

    Ids: 0 "(X", 1 "X)", 2 "w". States are token tuples.
    """

    TOKENS = ("(X", "X)", "w")
    LOG_PROBS = np.log([0.5, 0.2, 0.3])
    num_actions, word_action, vocab_size = 3, 2, 3

    def encode_word(self, word):
        return (2,), False

    def initial_state(self):
        return ()

    def allowed(self, states):  # pragma: no cover - searches only
        raise NotImplementedError

    def score(self, states, next_words):  # pragma: no cover
        raise NotImplementedError

    def advance(self, state, action, word, memory):  # pragma: no cover
        raise NotImplementedError

    def tokens(self, state, words):  # pragma: no cover
        raise NotImplementedError

    def state_after(self, tokens):
        return tuple(tokens)

    def length(self, state):
        return len(state)

    @staticmethod
    def _depth(state):
        return state.count("(X") - state.count("X)")

    def steps_to_finish(self, state):
        if not state:
            return 3
        return self._depth(state) + (state[-1] == "(X")  # an empty innermost needs a word first

    def allowed_tokens(self, states, max_length):
        out = np.zeros((len(states), 3), bool)
        for n, s in enumerate(states):
            if s and not self._depth(s):
                continue  # finished
            for t, token in enumerate(self.TOKENS):
                if oracle_prefix_ok(s + (token,), 99, 99):
                    out[n, t] = len(s) + 1 + self.steps_to_finish(s + (token,)) <= max_length
        return out

    def next_token_scores(self, states):
        return TokenScores(np.tile(self.LOG_PROBS, (len(states), 1)), [None] * len(states))

    def advance_token(self, state, token, memory):
        return state + (self.TOKENS[token],)

    def decode(self, state, since=None):
        return list(state[len(since) if since is not None else 0:])


def test_any_sampling_family_can_be_sampled():
    family = ToyFamily()
    config = SamplingConfig(max_actions=9, batch_size=8)
    samples = Sampler.from_family(family, config).sample(20, seed=0)
    assert len({tuple(s.actions) for s in samples}) > 1
    for s in samples:
        check_well_formed(s.actions, config)
        expected = sum(family.LOG_PROBS[family.TOKENS.index(t)] for t in s.actions)
        assert s.log_prob == pytest.approx(expected, abs=1e-5)
    (continued,) = Sampler.from_family(family, config).sample(1, seed=2, prompt="(X w")
    assert continued.actions[:2] == ["(X", "w"] and continued.num_prompt_actions == 2
    with pytest.raises(TypeError, match="SamplingFamily"):
        Sampler.from_family(object(), config)
