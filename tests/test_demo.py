"""The main job (`tgjax demo`): its table, on a few training steps."""

import math
import sys

import numpy as np
import pytest

from tgjax import demo
from tgjax.data.corpora import agreement_minimal_pairs
from tgjax.infer.beam import BeamConfig, BeamResult


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
    accuracy, by_construction = demo.agreement_accuracy(_ScoreByWords(table), pairs)
    assert accuracy == pytest.approx(4 / 6)
    assert [p.construction for p in pairs] == ["pp", "subject_relative", "object_relative"] * 2
    assert by_construction == pytest.approx({"pp": 1.0, "subject_relative": 0.5, "object_relative": 0.5})

def test_the_pushdown_lm_takes_the_overrides_of_keys_its_config_leaves_unset(capsys):
    # Its corpus sizes are unset (None: the whole built-in treebank); an override of them applies all the same.
    config = demo._pushdown_config(["data.num_train_sentences=200", "training.no_such_key=1"], sys.stderr)
    assert config.data.num_train_sentences == 200
    assert "no key for, not applied: training.no_such_key=1" in capsys.readouterr().err


# One layer (the demo's three are for the agreement figures, which these tests do not judge): the same code, less
# to compile.
OVERRIDES = ["training.num_steps=4", "evaluation.interval_steps=4", "checkpointing.interval_steps=4",
             "logging.interval_steps=2", "model.d_model=16", "model.ffw_hidden_size=32", "model.num_layers=1",
             "model.sequence_length=32", "model.memory_length=32", "data.num_train_sentences=200",
             "data.num_valid_sentences=20"]


def run_and_check_demo(tmp_path, monkeypatch, models):
    """`demo.run_demo` of `models` on a few steps; checks each row and the table."""
    scored = []  # (depths of the pairs, how many, the accuracy) of each agreement_accuracy call

    def recording_agreement(scorer, pairs):
        accuracy, by_construction = real_agreement(scorer, pairs)
        scored.append((sorted({p.depth for p in pairs}), len(pairs), accuracy))
        return accuracy, by_construction

    real_agreement = demo.agreement_accuracy
    monkeypatch.setattr(demo, "agreement_accuracy", recording_agreement)
    report = demo.run_demo(tmp_path, models=models, overrides=OVERRIDES, num_valid=4, num_simple_pairs=2,
                           num_pairs=3, num_deep_pairs=3,
                           beam_config=BeamConfig(word_beam=4, action_beam=8, fast_track=1, batch_sentences=4))
    assert [r.model for r in report.rows] == list(models)
    # Per model: simple, attractor, then the depth-2 and depth-3 pairs, each row holding its own results.
    assert [(depths, n) for depths, n, _ in scored] == [([0], 2), ([1], 3), ([2], 3), ([3], 3)] * len(models)
    for row, calls in zip(report.rows, [scored[i:i + 4] for i in range(0, len(scored), 4)]):
        assert [row.simple_accuracy, row.agreement_accuracy, row.deep_accuracy[2], row.deep_accuracy[3]] == [
            accuracy for _, _, accuracy in calls]
    for row in report.rows:
        assert row.num_parameters > 0 and math.isfinite(row.valid_loss)
        assert 1.0 < row.word_perplexity < math.inf
        assert 0.0 <= row.agreement_accuracy <= 1.0 and row.simple_accuracy in (0.0, 0.5, 1.0)
        assert set(row.agreement_by_construction) == {"pp", "subject_relative", "object_relative"}
        assert set(row.deep_accuracy) == set(row.deep_by_construction) == {2, 3}
        for depth in (2, 3):  # three pairs, one per construction
            by_construction = row.deep_by_construction[depth]
            assert set(by_construction) == {"pp", "subject_relative", "object_relative"}
            assert set(by_construction.values()) <= {0.0, 1.0}
            assert row.deep_accuracy[depth] == pytest.approx(sum(by_construction.values()) / 3)
        assert (tmp_path / row.model / ("vocab.txt" if row.model == "pushdown_lm" else "vocab.json")).exists()
    rows = {row.model: row for row in report.rows}
    if "pushdown_lm" in rows:
        pushdown = rows["pushdown_lm"]
        assert pushdown.labeled_f1 is None and 0.0 <= pushdown.unlabeled_f1 <= 100.0
        assert not pushdown.exact_perplexity
    if "txl_terminals" in rows:
        terminals = rows["txl_terminals"]
        assert terminals.exact_perplexity and terminals.labeled_f1 is None
    for name in ("tg", "txl_cc"):
        if name in rows:
            assert not rows[name].exact_perplexity
            assert 0.0 <= rows[name].labeled_f1 <= 100.0 and 0.0 <= rows[name].unlabeled_f1 <= 100.0
    assert 0.0 <= report.baseline_unlabeled_f1 <= 100.0
    table = report.format()
    assert "right-branching" in table and "—" in table
    assert all(demo.TITLES[name] in table for name in models)
    assert "depth 2" in table and "depth 3" in table and "3 at each depth" in table


def test_demo_trains_and_tabulates_the_exact_and_the_pushdown_models(tmp_path, monkeypatch):
    """The CI twin of the four-model test below: TXL (terminals) and the Pushdown-LM, which take every branch of
    `demo` (the exact scorer without F1; the beam's bound and unlabelled F1 beside the right-branching baseline;
    the Pushdown-LM's own config). TG and TXL (CC) differ from the Pushdown-LM only in their scorer, which
    tests/eval/test_parse.py and tests/infer/test_device_beam.py check."""
    run_and_check_demo(tmp_path, monkeypatch, ("txl_terminals", "pushdown_lm"))


@pytest.mark.slow
def test_demo_trains_and_tabulates_four_models(tmp_path, monkeypatch):
    run_and_check_demo(tmp_path, monkeypatch, demo.MODELS)


def test_table_puts_each_depth_in_its_column():
    row = demo.ModelReport("tg", 1000, 10.0, 2.0, 30.0, False, 90.0, 95.0, 1.0, 0.875,
                           {"pp": 0.875}, {2: 0.75, 3: 0.25}, {2: {"pp": 0.75}, 3: {"pp": 0.25}}, 5.0)
    table = demo.DemoReport([row], 0.0, 40.0, 10, 4, 8, 4, (2, 3)).format().splitlines()
    header = next(line for line in table if line.startswith("model"))
    tg = next(line for line in table if line.startswith("TG"))
    assert header.split()[-6:] == ["simple", "attractor", "depth", "2", "depth", "3"]
    assert tg.split()[-4:] == ["100.0%", "87.5%", "75.0%", "25.0%"]
    assert len(tg) == len(header)  # the columns line up
    assert "  depth 2: TG pp 75%" in table and "  depth 3: TG pp 25%" in table
