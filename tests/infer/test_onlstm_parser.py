"""tgjax.infer.onlstm: per-layer word distances of an ON-LSTM LM, and (`tgjax.load`) a workdir that is no run."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

import tgjax
from tests.models.test_onlstm_lm import oracle_lm, release_state_dict, small_config
from tgjax.infer import onlstm as O
from tgjax.infer.loading import CheckpointError
from tgjax.models.onlstm_lm import OnLSTMLM

# 13 ids, as the LM test's released-layout state dict (tests/models/test_onlstm_lm.py).
WORDS = ["the", "dog", "cat", "barks", "sleeps", "a", "bird", "sings", "sees", "old", "big", "<eos>", "<unk>"]
WEIGHT_DROP = 0.3


@pytest.fixture(scope="module")
def released():
    """A small LM with random released-layout weights, and those weights (for the NumPy oracle)."""
    state_dict = release_state_dict(np.random.default_rng(7))
    model = OnLSTMLM(small_config(weight_drop=WEIGHT_DROP), rngs=nnx.Rngs(0))
    model.load_released(state_dict)
    return model, state_dict


def _alone_by_prefix(state_dict, words: list[str]) -> np.ndarray:
    """Oracle (NumPy float64, eval mode): word i's distance is the last step of the prefix `<eos> w_1 .. w_i`."""
    index = {w: i for i, w in enumerate(WORDS)}
    ids = [index["<eos>"]] + [index.get(w, index["<unk>"]) for w in words]
    out = np.zeros((3, len(words)))
    for i in range(1, len(words) + 1):
        _, _, forgets = oracle_lm(state_dict, np.asarray([ids[: i + 1]]), hh_scale=(1 - WEIGHT_DROP,) * 3)
        for layer, gate in enumerate(forgets):
            out[layer, i - 1] = 1.0 - gate[0, -1].mean()
    return out


def test_word_distances_are_the_steps_that_read_the_words(released):
    model, state_dict = released
    parser = O.from_model(model, WORDS, batch_size=3, length_bucket=4)
    sentences = [["the", "dog", "barks"], ["the", "cat", "sleeps", "the", "dog", "barks", "cat"], ["dog"],
                 ["cat", "the"], []]
    got = parser.layer_distances(sentences)  # two batches, rows padded to different lengths
    assert [g.shape for g in got] == [(3, 3), (3, 7), (3, 1), (3, 2), (3, 0)]
    for words, distances in zip(sentences, got):
        np.testing.assert_allclose(distances, _alone_by_prefix(state_dict, words), rtol=1e-4, atol=1e-5)
    # The step that *predicts* w_i (input w_{i-1}) gives other numbers: the alignment is not a no-op.
    predicting = _alone_by_prefix(state_dict, ["<eos>", *sentences[1][:-1]])
    assert not np.allclose(got[1], predicting, atol=1e-3)


def test_unknown_words_are_counted_and_read_as_unk(released):
    model, _ = released
    parser = O.from_model(model, WORDS, batch_size=4)
    (with_unknown,) = parser.layer_distances([["the", "zebra", "barks"]])
    (with_unk,) = parser.layer_distances([["the", "<unk>", "barks"]])
    np.testing.assert_allclose(with_unknown, with_unk)
    assert (parser.num_words_read, parser.num_unknown) == (6, 1)
    assert "1 of 6 words not in the vocabulary" in parser.describe()


def test_vocabulary_must_fit_the_model(released):
    model, _ = released
    with pytest.raises(ValueError, match="no '<eos>'"):
        O.from_model(model, [w if w != "<eos>" else "eos" for w in WORDS])
    with pytest.raises(ValueError, match="14 words in the vocabulary, the model has 13"):
        O.from_model(model, WORDS + ["extra"])


def test_loading_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError):
        tgjax.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoints"):
        tgjax.load(tmp_path / "empty")


def _chain_rule_oracle(state_dict, words: list[str]) -> tuple[np.ndarray, float]:
    """(per-word log p [n], log p(<eos> | x)) from the release's forward in float64 (tests/models/test_onlstm_lm.py)."""
    index = {w: i for i, w in enumerate(WORDS)}
    ids = [index["<eos>"]] + [index.get(w, index["<unk>"]) for w in words] + [index["<eos>"]]
    logits, _, _ = oracle_lm(state_dict, np.asarray([ids[:-1]]), hh_scale=(1 - WEIGHT_DROP,) * 3)
    shifted = logits[0] - logits[0].max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    steps = log_probs[np.arange(len(ids) - 1), ids[1:]]
    return steps[:-1], float(steps[-1])


def test_sentence_log_probs_are_the_chain_rule_of_the_release_forward(released):
    model, state_dict = released
    scorer = O.from_model(model, WORDS, batch_size=2, length_bucket=4)
    sentences = [["the", "dog", "barks"], ["a", "zebra", "sings", "the", "old", "bird", "sees"], [], ["cat"]]
    results = scorer.search(sentences)  # two batches of mixed lengths, padded
    for words, result in zip(sentences, results):
        words_log_p, end_log_p = _chain_rule_oracle(state_dict, words)
        np.testing.assert_allclose(-result.surprisals, words_log_p, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result.end_surprisal, -end_log_p, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(result.log_prob, words_log_p.sum() + end_log_p, rtol=1e-5, atol=1e-5)
        assert result.surprisals.sum() + result.end_surprisal == pytest.approx(-result.log_prob, abs=1e-9)
        np.testing.assert_allclose(result.prefix_log_probs, np.concatenate([[0.0], np.cumsum(words_log_p)]),
                                   atol=1e-4)
    assert [r.num_unknown for r in results] == [0, 1, 0, 0]
    assert scorer.space.encode_word("zebra") == (WORDS.index("<unk>"), True)
