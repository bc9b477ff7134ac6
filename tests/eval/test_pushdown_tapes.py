"""The Pushdown-LM tape diagnostic (`tgjax.eval.pushdown_tapes`) against independent computations.

A tiny random Pushdown-LM (in memory, as `tgjax.load` would give it) scores
three minimal pairs of four-word sentences, with the paper's head (final
attachment scored) and the release's switches (causal softmax, final
attachment forced):

* (b) log p(x, y_gold) is the oracle's eq. 7 (a whole forward pass per prefix)
  on the gold attachments written out by hand (the trainer's conversion:
  right-binarised, ``<s>`` ROOT, ``<eos>`` attached to it);
* (c) is the oracle's word terms under the gold tape, and (c) plus the oracle's
  attachment terms is (b); (d) is the oracle's word terms under the beam's tape;
* with a beam wide enough for every tree (Catalan(4) = 14), (a) is
  logsumexp over all tapes (as `enumerate_joint`: each valid tape's eq. 7
  from the oracle's passes, one per distinct prefix), at least (b), and the
  beam's best tape is the enumeration's best;
* a pair whose two sentences are the same ties under every scoring and counts
  as wrong, as in the demo.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from flax import nnx
from scipy.special import logsumexp

from tgjax.data.corpora import MinimalPair
from tgjax.data.vocab import WordDictionary
from tgjax.eval.pushdown_tapes import SCORINGS, score_pairs
from tgjax.infer import pushdown_oracle as oracle
from tgjax.infer.api import LoadedModel
from tgjax.infer.pushdown_loading import LoadedPushdown
from tgjax.infer.pushdown_search import PushdownBeamConfig
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig
from tgjax.syntax.trees import parse

TOL = 1e-5
VOCAB = WordDictionary(["the", "dog", "dogs", "bark", "barks", "near", "."], [])
SWITCHES = {
    "paper": ({}, "scored"),
    "release": ({"head_scaled": False, "head_self_key_input": "query", "head_relative_positions": True,
                 "attachment_normalise": "causal", "depth_space": "model"}, "forced"),
}
# (good tree, bad tree, construction, depth, the gold attachments of both, <s> .. <eos>)
PAIRS = [
    ("(S (NP (DT the) (NNS dogs)) (VP (VBP bark)) (. .))", "(S (NP (DT the) (NNS dogs)) (VP (VBZ barks)) (. .))",
     "simple", 0, [0, 1, 1, 3, 2, 0]),  # ((the dogs) (bark .)): the ternary S right-binarised
    ("(S (NP (NP (NNS dogs)) (PP (IN near) (NP (NN dog)))) (VP (VBP bark)))",
     "(S (NP (NP (NNS dogs)) (PP (IN near) (NP (NN dog)))) (VP (VBZ barks)))",
     "pp", 1, [0, 1, 2, 1, 3, 0]),  # ((dogs (near dog)) bark): "dog" reduces [dogs] [near]
    ("(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))", "(S (NP (DT the) (NN dog)) (VP (VBZ barks)) (. .))",
     "pp", 1, [0, 1, 1, 3, 2, 0]),  # the same sentence twice: a tie
]


def minimal_pairs() -> list[MinimalPair]:
    return [MinimalPair(good=parse(good), bad=parse(bad), construction=construction, subject_number="pl",
                        verb_index=2, depth=depth) for good, bad, construction, depth, _ in PAIRS]


@functools.cache
def model(switches: str) -> PushdownLM:
    fields = {"vocab_size": VOCAB.size, "d_model": 16, "num_layers": 2, "num_heads": 2, "ffw_hidden_size": 32,
              "sequence_length": 16, "num_depths": 6, "dropout": 0.0, "embedding_dropout": 0.0,
              **SWITCHES[switches][0]}
    return PushdownLM(PushdownLMConfig(**fields), rngs=nnx.Rngs(3))


@functools.cache
def scored(switches: str):
    """The diagnostic on the three pairs, beam 16 (every tree of four words)."""
    loaded = LoadedModel.in_memory("pushdown_lm", LoadedPushdown(model(switches), VOCAB, -1, "memory", {}))
    beam = PushdownBeamConfig(beam_size=16, final_attachment=SWITCHES[switches][1])
    return score_pairs(loaded, minimal_pairs(), beam=beam)


def sentences(switches: str):
    """(tokens, gold attachments, its scores) of every sentence, good ones first."""
    result = scored(switches)
    for side, scores in (("good", result.good), ("bad", result.bad)):
        for pair, spec, score in zip(minimal_pairs(), PAIRS, scores):
            tokens, _ = VOCAB.encode_with_alignment(getattr(pair, side).leaves())
            yield np.r_[VOCAB.bos_id, tokens, VOCAB.eos_id], spec[4], score


@functools.cache
def prefix_step(switches: str, tokens: tuple[int, ...], attach: tuple[int, ...], final: bool):
    """The oracle's forward pass over a prefix (`prefix_step_log_probs`), once per prefix: the tapes of a sentence
    share their prefixes, and the tie's two sentences are one."""
    return oracle.prefix_step_log_probs(model(switches), np.asarray(tokens), list(attach), final=final)


def oracle_terms(switches: str, tokens, attach) -> tuple[float, float]:
    """(Σ word terms, Σ attachment terms) of eq. 7 from the oracle's per-prefix forward passes."""
    final = SWITCHES[switches][1]
    words = attachments = 0.0
    last = len(tokens) - 1
    for k in range(1, len(tokens)):
        token_lp, slot_lp = prefix_step(switches, tuple(int(t) for t in tokens), tuple(int(a) for a in attach[:k]),
                                        k == last)
        words += token_lp[tokens[k]]
        if not (k == last and final == "forced"):
            attachments += slot_lp[attach[k]]
    return words, attachments


@pytest.mark.parametrize("switches", sorted(SWITCHES))
def test_gold_joint_is_the_oracles_joint_on_the_gold_tape(switches):
    for tokens, gold, score in sentences(switches):
        assert list(score.gold_attach) == gold  # the trainer's conversion of the gold tree
        expected = oracle.joint_log_prob(model(switches), tokens, gold, final_attachment=SWITCHES[switches][1])
        assert abs(score.gold_joint - expected) < TOL, (score.words, score.gold_joint, expected)


@pytest.mark.parametrize("switches", sorted(SWITCHES))
def test_word_terms_and_attachment_terms_make_the_joint(switches):
    for tokens, gold, score in sentences(switches):
        words, attachments = oracle_terms(switches, tokens, gold)
        assert abs(score.gold_words - words) < TOL
        assert abs(score.gold_words + attachments - score.gold_joint) < TOL
        beam_words, _ = oracle_terms(switches, tokens, list(score.beam_attach))
        assert abs(score.beam_words - beam_words) < TOL


@pytest.mark.parametrize("switches", sorted(SWITCHES))
def test_exhaustive_beam_marginal_is_the_sum_over_every_tape(switches):
    for tokens, _, score in sentences(switches):
        # `oracle.enumerate_joint`, each tape's joint summed from the passes over its prefixes (`oracle_terms`)
        trees = [(attach, sum(oracle_terms(switches, tokens, attach)))
                 for attach in oracle.valid_attachment_sequences(len(tokens))]
        assert len(trees) == 14
        assert abs(score.beam_marginal - logsumexp([s for _, s in trees])) < TOL
        assert score.beam_marginal >= score.gold_joint
        best_attach, best = max(trees, key=lambda tree: tree[1])
        assert list(score.beam_attach) == best_attach and abs(score.beam_best_joint - best) < TOL
        assert score.beam_is_gold == (list(score.gold_attach) == best_attach)


def test_ties_count_as_wrong_and_groups_are_the_pairs_of_each_depth_and_construction():
    result = scored("paper")
    summary = result.summary()
    assert list(summary) == ["simple", "attractor"]
    for scoring in SCORINGS:
        good = np.asarray([s.score(scoring) for s in result.good])
        bad = np.asarray([s.score(scoring) for s in result.bad])
        assert good[2] == bad[2]  # the same sentence: a tie, wrong
        assert not result.correct(scoring)[2]
        assert result.accuracy(scoring, depth=0) == float(good[0] > bad[0])
        assert result.accuracy(scoring, depth=1) == float(good[1] > bad[1]) / 2
        assert summary["attractor"]["accuracy"][scoring] == {"all": float(good[1] > bad[1]) / 2,
                                                             "pp": float(good[1] > bad[1]) / 2}
    assert summary["attractor"]["num_pairs"] == 2
    rate = np.mean([s.beam_is_gold for side in (result.good, result.bad) for s in side[1:]])
    assert summary["attractor"]["beam_is_gold"]["all"] == rate
