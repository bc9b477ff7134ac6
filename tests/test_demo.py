"""The main job (`tgjax demo`): its table, on a few training steps."""

import math

import numpy as np
import pytest

from tgjax import demo
from tgjax.data.corpora import agreement_minimal_pairs
from tgjax.eval.beam import BeamConfig, BeamResult


class _ScoreByWords:
    """A fake scorer: log p(x) from a table keyed by the sentence's words."""

    def __init__(self, table):
        self.table = table

    def search(self, sentences):
        return [BeamResult(words=list(s), prefix_log_probs=np.zeros(len(s) + 1), surprisals=np.zeros(len(s)),
                           log_prob=self.table[tuple(s)], end_surprisal=0.0) for s in sentences]


def test_agreement_accuracy_counts_pairs_by_construction():
    pairs = agreement_minimal_pairs(6, seed=3)  # constructions cycle: pp, subject_relative, object_relative
    wrong = {1, 5}  # pair indices the fake model gets wrong
    table = {}
    for i, pair in enumerate(pairs):
        good, bad = (-10.0, -5.0) if i in wrong else (-5.0, -10.0)
        table[tuple(pair.good_words)], table[tuple(pair.bad_words)] = good, bad
    accuracy, by_construction = demo._agreement(_ScoreByWords(table), pairs)
    assert accuracy == pytest.approx(4 / 6)
    assert [p.construction for p in pairs] == ["pp", "subject_relative", "object_relative"] * 2
    assert by_construction == pytest.approx({"pp": 1.0, "subject_relative": 0.5, "object_relative": 0.5})

def test_demo_trains_and_tabulates_three_models(tmp_path, capsys):
    overrides = ["training.num_steps=12", "evaluation.interval_steps=12", "checkpointing.interval_steps=12",
                 "logging.interval_steps=6", "model.d_model=32", "model.ffw_hidden_size=64",
                 "model.sequence_length=32", "model.memory_length=32", "data.num_train_sentences=200",
                 "data.num_valid_sentences=20"]
    report = demo.run_demo(tmp_path, overrides=overrides, num_valid=4, num_simple_pairs=2, num_pairs=3,
                           beam_config=BeamConfig(word_beam=4, action_beam=8, fast_track=1, batch_sentences=4))
    assert [r.model for r in report.rows] == list(demo.MODELS)
    for row in report.rows:
        assert row.num_parameters > 0 and math.isfinite(row.valid_loss)
        assert 1.0 < row.word_perplexity < math.inf
        assert 0.0 <= row.agreement_accuracy <= 1.0 and row.simple_accuracy in (0.0, 0.5, 1.0)
        assert set(row.agreement_by_construction) == {"pp", "subject_relative", "object_relative"}
        assert (tmp_path / row.model / "vocab.json").exists()
    tg, cc, terminals = report.rows
    assert terminals.exact_perplexity and not tg.exact_perplexity
    assert terminals.labeled_f1 is None and 0.0 <= tg.unlabeled_f1 <= 100.0 and 0.0 <= cc.labeled_f1 <= 100.0
    assert 0.0 <= report.baseline_unlabeled_f1 <= 100.0
    table = report.format()
    assert "right-branching" in table and "TXL (terminals)" in table and "—" in table
