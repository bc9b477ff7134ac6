"""onlstm-targeted-syntax: ON-LSTM against the same config as a plain LSTM, judged on agreement across one
embedding (the thesis' long-term rows), with each construction, simple agreement and deeper embeddings beside."""

from __future__ import annotations

import json

import pytest

from tgjax.data.corpora import agreement_minimal_pairs
from tgjax.reproduce.recipes import onlstm_syntax, recipes


class _Scorer:
    """log p(x) from a table keyed by the words (a sentence not in it scores -100)."""

    def __init__(self, table):
        self.table = table

    def search(self, sentences):
        return [type("Result", (), {"log_prob": self.table.get(tuple(s), -100.0)})() for s in sentences]


def _table(pairs, right) -> dict:
    """The fake model prefers the good sentence of the pairs `right(pair)` holds for, the bad one otherwise."""
    table = {}
    for pair in pairs:
        good, bad = (-5.0, -10.0) if right(pair) else (-10.0, -5.0)
        table[tuple(pair.good_words)], table[tuple(pair.bad_words)] = good, bad
    return table


def test_the_judged_number_pools_the_three_constructions_one_embedding_deep(tmp_path, monkeypatch):
    import tgjax

    num_simple, n, num_deep = onlstm_syntax.TINY_PAIRS
    across = agreement_minimal_pairs(n, seed=0)  # the demo's sets (tgjax.demo.evaluation_data)
    simple = agreement_minimal_pairs(num_simple, seed=1, constructions=("simple",))
    deep = {d: agreement_minimal_pairs(num_deep, seed=0, depth=d) for d in onlstm_syntax.DEEP}
    # Right on the object relatives only across one embedding; wrong on every simple pair; right at depth 2 only.
    table = {**_table(across, lambda p: p.construction == "object_relative"), **_table(simple, lambda p: False),
             **_table(deep[2], lambda p: True), **_table(deep[3], lambda p: False)}
    loaded = []

    def fake_load(workdir, step="best"):
        loaded.append(step)
        return type("Model", (), {"step": 6, "scorer": lambda self: _Scorer(table)})()

    monkeypatch.setattr(tgjax, "load", fake_load)
    (run,) = [s for s in onlstm_syntax.runs(tiny=True) if s.role == "model"]
    records = [{"split": "valid", "step": 3, "loss": 3.5, "perplexity": 33.1},
               {"split": "valid", "step": 6, "loss": 3.0, "perplexity": 20.1},
               {"split": "valid", "step": 9, "loss": 3.1, "perplexity": 22.2}, {"step": 9, "loss": 2.9}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    scores = onlstm_syntax.evaluate(run, tmp_path, True, True)
    assert loaded == ["best"] and scores["pairs"] == n
    assert scores["valid_perplexity"] == 20.1  # the scored checkpoint's, not the last or the first
    assert scores["across_accuracy"] == pytest.approx(100.0 / 3)  # 2 of the 6 pairs are object relatives
    assert (scores["across_pp"], scores["across_subject_relative"], scores["across_object_relative"]) == (0, 0, 100)
    assert (scores["simple_accuracy"], scores["depth2_accuracy"], scores["depth3_accuracy"]) == (0, 100, 0)


def test_the_baseline_is_the_same_config_with_the_master_gates_fixed():
    from tgjax.train.config import load_config

    specs = onlstm_syntax.runs(tiny=False)
    models = [s for s in specs if s.role == "model"]
    baselines = [s for s in specs if s.role == "baseline"]
    assert [s.seed for s in models] == [s.seed for s in baselines] == list(onlstm_syntax.SEEDS)
    assert {s.group for s in baselines} == {"lstm"} and len(models) == 5
    for model, baseline in zip(models, baselines):
        a, b = (load_config(s.config, list(s.overrides)).to_dict() for s in (model, baseline))
        assert (a["model"].pop("ordered"), b["model"].pop("ordered")) == (True, False)
        assert a == b  # nothing else differs
        assert a["training"]["num_epochs"] == 10 and a["model"]["hidden_size"] == 128
    comparison = recipes()["onlstm-targeted-syntax"].comparison
    assert comparison.higher_is_better and comparison.model_metric == comparison.baseline_metric == "across_accuracy"
