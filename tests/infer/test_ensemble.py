"""Ensembles are per action (Sartran et al. 2022, §3.7): p_ens(a_i | a_<i) = 1/K Σ_k p_k(a_i | a_<i).

Three levels, each against values computed without the code under test:

* a hand-worked two-member case (members [0.9, 0.1] and [0.1, 0.9] on a
  two-token sequence: per action 2·log 0.5, the sequence mixture log 0.09);
* `Ensemble` (eval score / ppl / rerank) of two different random models,
  against each member scored alone and mixed here with `np.logaddexp`;
* one beam searched with the mixed next-action distribution (and the
  per-token mixture of `TerminalScorer`), against every final hypothesis
  scored in full by each member alone with the ordinary `Scorer` (no
  prefix caches), and, with an exhaustive beam, against enumerating every
  tree of the sentence.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tgjax
from tgjax.data import corpora
from tgjax.infer.beam import BeamConfig, TerminalScorer, WordSynchronousBeamSearch, make_word_scorer
from tgjax.infer.ensemble import Ensemble, mix_log_probs, mixed_sequence_log_prob
from tgjax.infer.loading import from_model
from tgjax.infer.scoring import Scorer, encode, score_trees, surprisals_from_score
from tgjax.models import build_model

from .test_beam import EXHAUSTIVE, LABELS, MAX_CONSECUTIVE, MAX_OPEN, SMALL, enumerate_actions, get_model, tiny_vocab
from .test_scoring import corpus, fresh_scorer, trained_workdir

LOG_HALF = math.log(0.5)


@pytest.fixture(scope="module")
def vocab():
    return tiny_vocab()


# -----------------------------------------------------------------------------
# The hand-worked case.

# Two members' probabilities of the two tokens of one sequence: they disagree on every token.
MEMBER_PROBS = np.array([[0.9, 0.1], [0.1, 0.9]])
PER_ACTION = 2 * math.log(0.5)  # each token: (0.9 + 0.1) / 2 = 0.5
SEQUENCE = math.log(0.5 * 0.9 * 0.1 + 0.5 * 0.1 * 0.9)  # each member gives the sequence 0.09


def test_hand_worked_mixtures():
    assert PER_ACTION == pytest.approx(-1.386294, abs=1e-6)
    assert SEQUENCE == pytest.approx(-2.407946, abs=1e-6)
    pieces = np.log(MEMBER_PROBS)
    np.testing.assert_allclose(mix_log_probs(pieces, axis=0), [LOG_HALF, LOG_HALF], rtol=1e-12)
    assert mixed_sequence_log_prob(pieces) == pytest.approx(PER_ACTION, rel=1e-12)
    assert mixed_sequence_log_prob(pieces, "sequence") == pytest.approx(SEQUENCE, rel=1e-12)
    # A member that rules a token out leaves the other's half of it.
    assert mix_log_probs([[-np.inf, 0.0], [math.log(0.4), 0.0]], axis=0)[0] == pytest.approx(math.log(0.2))
    with pytest.raises(ValueError, match="ensemble mixture"):
        mixed_sequence_log_prob(pieces, "product")


class _StubLoaded:
    def __init__(self, name: str, fingerprint: str = "one vocabulary"):
        self.name, self.vocab_fingerprint = name, fingerprint

    def describe(self) -> str:
        return self.name


class _StubScorer:
    """A scorer whose every sequence gets the given per-id log probs."""

    def __init__(self, name: str, piece_logprobs, vocab, rule: str = "txl_terminals", fingerprint="one vocabulary"):
        self.loaded = _StubLoaded(name, fingerprint)
        self.vocab, self.rule = vocab, rule
        self.values = np.asarray(piece_logprobs, np.float64)

    def piece_logprobs(self, encoded):
        return [self.values.copy() for _ in encoded]


def test_hand_worked_case_through_the_ensemble(vocab):
    encoded = [encode(vocab, ["a", "</s>"])]  # one word, then the end of the sentence: two prediction events
    members = [_StubScorer(f"member {k}", np.log(p), vocab) for k, p in enumerate(MEMBER_PROBS)]
    (score,) = Ensemble(members).score_encoded(encoded)
    assert score.logp == pytest.approx(PER_ACTION, rel=1e-12)
    np.testing.assert_allclose(score.token_logprobs, [LOG_HALF, LOG_HALF], rtol=1e-12)
    np.testing.assert_allclose(score.member_logps, [math.log(0.09)] * 2, rtol=1e-12)
    # Per action, the word surprisals and the end add up to -logp.
    surprisals = surprisals_from_score(score)
    np.testing.assert_allclose(surprisals.surprisals, [-LOG_HALF], rtol=1e-12)
    assert surprisals.end == pytest.approx(-LOG_HALF, rel=1e-12)
    (sequence,) = Ensemble(members, mixture="sequence").score_encoded(encoded)
    assert sequence.logp == pytest.approx(SEQUENCE, rel=1e-12)
    np.testing.assert_allclose(sequence.token_logprobs, [LOG_HALF, LOG_HALF], rtol=1e-12)  # per action still
    with pytest.raises(ValueError, match="ensemble mixture"):
        Ensemble(members, mixture="product")
    other = _StubScorer("member 2", [0.0, 0.0], vocab, fingerprint="another vocabulary")
    with pytest.raises(ValueError, match="member 1 .*member 2.* another vocabulary"):
        Ensemble([members[0], other])


# -----------------------------------------------------------------------------
# Ensemble (eval score / ppl / rerank) of two different models.


def test_ensemble_of_one_is_the_model():
    scorer = fresh_scorer("tg")
    tree_list = list(corpus()[:6])
    for mixture in ("per-action", "sequence"):
        for mixed, alone in zip(score_trees(Ensemble([scorer], mixture), tree_list), score_trees(scorer, tree_list)):
            assert mixed.logp == pytest.approx(alone.logp, rel=1e-12)
            np.testing.assert_allclose(mixed.token_logprobs, alone.token_logprobs, rtol=1e-12)


def test_ensemble_of_two_models_mixes_per_action():
    """Oracle: each member scored alone; the mixture written here with logaddexp."""
    members = [fresh_scorer("tg"), fresh_scorer("txl_cc", seed=5)]
    tree_list = list(corpus()[:5])
    a_scores, b_scores = (score_trees(m, tree_list) for m in members)
    mixed = score_trees(Ensemble(members), tree_list)
    sequence = score_trees(Ensemble(members, mixture="sequence"), tree_list)
    for s, q, a, b in zip(mixed, sequence, a_scores, b_scores):
        per_action = np.logaddexp(a.piece_logprobs, b.piece_logprobs) - math.log(2)
        assert s.logp == pytest.approx(math.fsum(per_action), rel=1e-12)
        np.testing.assert_allclose(s.piece_logprobs, per_action, rtol=1e-12)
        np.testing.assert_allclose(s.member_logps, [a.logp, b.logp])
        assert q.logp == pytest.approx(np.logaddexp(a.logp, b.logp) - math.log(2), rel=1e-12)
        # The members differ enough that the two mixtures are told apart.
        assert abs(s.logp - q.logp) > 1e-3


def test_ensemble_refuses_mixing_p_x_with_p_x_y():
    with pytest.raises(ValueError, match="cannot be mixed|another vocabulary"):
        Ensemble([fresh_scorer("tg"), fresh_scorer("txl_terminals")])


def test_score_command_reports_the_mixture(tmp_path, capsys):
    """Two checkpoints (steps 2 and 4) of one run are two different members."""
    from tgjax.eval.commands import main_score

    workdir, _ = trained_workdir()
    treebank = tmp_path / "valid.txt"
    tree_list = list(corpus()[:4])
    corpora.write_treebank(treebank, tree_list)
    members = [tgjax.load(workdir, step=step).tree_scorer(batch_size=4) for step in ("2", "4")]
    a_scores, b_scores = (score_trees(m, tree_list) for m in members)
    for mixture in ("per-action", "sequence"):
        out = tmp_path / f"{mixture}.jsonl"
        argv = ["--workdir", str(workdir), "--workdir", str(workdir), "--step", "2,4", "--input", str(treebank),
                "-o", str(out), "--batch-size", "4"]
        assert main_score(argv + ([] if mixture == "per-action" else ["--ensemble-mixture", mixture])) == 0
        assert f"ensemble_mixture {mixture}" in " ".join(capsys.readouterr().err.split())
        records = [json.loads(line) for line in out.read_text().splitlines()]
        meta = json.loads((tmp_path / f"{mixture}.jsonl.meta.json").read_text())
        assert meta["settings"]["ensemble_mixture"] == meta["summary"]["ensemble_mixture"] == mixture
        for r, a, b in zip(records, a_scores, b_scores):
            if mixture == "per-action":
                want = math.fsum(np.logaddexp(a.piece_logprobs, b.piece_logprobs) - math.log(2))
            else:
                want = np.logaddexp(a.logp, b.logp) - math.log(2)
            assert r["logp"] == pytest.approx(want, rel=1e-9)
            assert r["member_logps"] == pytest.approx([a.logp, b.logp], rel=1e-9)


# -----------------------------------------------------------------------------
# One beam over the mixed next-action distribution.


@functools.cache
def member_model(name: str, seed: int):
    """A test_beam-sized random model with far-from-uniform next-action distributions.

    A fresh model predicts nearly uniformly, and members that all do so have
    nearly equal mixtures of every kind; sharpened (larger embeddings, a
    random output bias), two members disagree and the mixtures differ.
    """
    model = build_model(name, tiny_vocab().size, rngs=nnx.Rngs(seed), **SMALL)
    rng = np.random.default_rng(seed)
    model.embedding[...] = model.embedding[...] * 4.0
    model.output_bias[...] = jnp.asarray(rng.normal(0.0, 2.0, model.output_bias[...].shape), jnp.float32)
    return model


@functools.cache
def full_sequence_scorer(name: str, seed: int) -> Scorer:
    """The ordinary (training-pipeline) scorer of a member: the oracle, which uses no prefix caches."""
    return Scorer(from_model(member_model(name, seed), tiny_vocab(), name), batch_size=8)


def oracle_log_probs(members, token_sequences) -> np.ndarray:
    """`[N]`: Σ_i log (1/K) Σ_k p_k(a_i | a_<i) of each sequence, each member scoring the whole sequence alone."""
    encoded = [encode(tiny_vocab(), tokens) for tokens in token_sequences]
    per_member = [full_sequence_scorer(*m).piece_logprobs(encoded) for m in members]  # [K][N][n_actions]
    out = []
    for n in range(len(encoded)):
        probs = np.exp(np.stack([member[n] for member in per_member]))  # [K, n_actions]
        out.append(math.fsum(np.log(probs.mean(axis=0))))
    return np.array(out)


def sequence_mixture(members, token_sequences) -> np.ndarray:
    """`[N]`: log (1/K) Σ_k p_k(x, y) of each sequence (the mixture the beam must not use)."""
    encoded = [encode(tiny_vocab(), tokens) for tokens in token_sequences]
    totals = np.array([[math.fsum(p) for p in full_sequence_scorer(*m).piece_logprobs(encoded)] for m in members])
    return np.log(np.exp(totals).mean(axis=0))


def log_sum_exp(values) -> float:
    values = np.asarray(values, np.float64)
    return float(values.max() + np.log(np.exp(values - values.max()).sum()))


def ensemble_search(members, config) -> WordSynchronousBeamSearch:
    vocab = tiny_vocab()
    return WordSynchronousBeamSearch([member_model(name, seed) for name, seed in members], vocab,
                                     [name for name, _ in members], config)


# A heterogeneous ensemble (each member laid out by its own masking rule) and a homogeneous one.
ENSEMBLES = [(("tg", 0), ("txl_cc", 0)), (("tg", 0), ("tg", 1))]


@pytest.mark.parametrize("members", ENSEMBLES, ids=["tg+txl_cc", "tg+tg"])
def test_one_beam_equals_its_hypotheses_scored_in_full(members):
    """Small beams (pruning, caches carried across steps): p(x) is the sum over the final hypotheses."""
    config = BeamConfig(word_beam=2, action_beam=3, fast_track=1, max_open_nts=3, max_consecutive_opens=2,
                        min_batch=64, max_batch=64, batch_sentences=2)
    sentences = [["a", "b", "c", "a"], ["c", "b"], ["b", "a", "a"]]
    results = ensemble_search(members, config).search(sentences)
    for _words, result in zip(sentences, results):
        tokens = [t for t, _ in result.hypotheses]
        oracle = oracle_log_probs(members, tokens)
        np.testing.assert_allclose([lp for _, lp in result.hypotheses], oracle, atol=1e-5)
        assert result.log_prob == pytest.approx(log_sum_exp(oracle), abs=1e-5)
        assert result.best_actions == tokens[int(np.argmax(oracle))]
        assert result.surprisals.sum() + result.end_surprisal == pytest.approx(-result.log_prob, abs=1e-9)
        # Not the members' sequence mixture.
        assert np.max(np.abs(sequence_mixture(members, tokens) - oracle)) > 1e-3


@pytest.mark.parametrize("members", ENSEMBLES[:1], ids=["tg+txl_cc"])
def test_exhaustive_ensemble_beam_equals_enumeration(members):
    config = dataclasses.replace(EXHAUSTIVE, max_open_nts=MAX_OPEN, max_consecutive_opens=MAX_CONSECUTIVE)
    sentences = [["a", "b"], ["c"]]
    results = ensemble_search(members, config).search(sentences)
    for words, result in zip(sentences, results):
        trees = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE)
        oracle = oracle_log_probs(members, trees)
        found = {tuple(t): lp for t, lp in result.hypotheses}
        assert set(found) == {tuple(t) for t in trees}
        np.testing.assert_allclose([found[tuple(t)] for t in trees], oracle, atol=1e-5)
        assert result.log_prob == pytest.approx(log_sum_exp(oracle), abs=1e-5)
        # Word-level prefixes: every well-formed prefix that ends with word t, mixed per action.
        for t in range(len(words)):
            prefixes = enumerate_actions(words, LABELS, MAX_OPEN, MAX_CONSECUTIVE, upto_word=t)
            assert result.prefix_log_probs[t + 1] == pytest.approx(
                log_sum_exp(oracle_log_probs(members, prefixes)), abs=1e-5)


def test_terminal_scorer_ensemble_mixes_per_token(vocab):
    members = [("txl_terminals", 0), ("txl_terminals", 1)]
    scorer = make_word_scorer([member_model(name, seed) for name, seed in members], vocab,
                              ["txl_terminals"] * 2, BeamConfig(min_batch=64, max_batch=64))
    assert isinstance(scorer, TerminalScorer)
    sentences = [["a", "b", "c"], ["c"], ["b", "zebra"]]
    results = scorer.search(sentences)
    encoded = [encode(vocab, words + ["</s>"]) for words in sentences]
    per_member = [full_sequence_scorer(*m).piece_logprobs(encoded) for m in members]
    for n, result in enumerate(results):
        mixed = np.logaddexp(per_member[0][n], per_member[1][n]) - math.log(2)  # [words + 1]
        np.testing.assert_allclose(result.surprisals, -mixed[:-1], atol=1e-5)
        assert result.end_surprisal == pytest.approx(-mixed[-1], abs=1e-5)
        assert result.log_prob == pytest.approx(math.fsum(mixed), abs=1e-5)
        sequence = np.logaddexp(math.fsum(per_member[0][n]), math.fsum(per_member[1][n])) - math.log(2)
        assert abs(result.log_prob - sequence) > 1e-3


def test_beam_ensembles_refuse_mixed_kinds(vocab):
    models = [get_model("tg", vocab.size), get_model("txl_terminals", vocab.size)]
    with pytest.raises(ValueError, match="not both"):
        make_word_scorer(models, vocab, ["tg", "txl_terminals"])
    with pytest.raises(ValueError, match="syntactic models"):
        WordSynchronousBeamSearch(models, vocab, ["tg", "txl_terminals"])
    with pytest.raises(ValueError, match="2 models and 3 rules"):
        WordSynchronousBeamSearch(models, vocab, ["tg", "tg", "tg"])
