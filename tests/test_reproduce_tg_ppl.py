"""tg-ppl-bound: the demo's three LMs over five seeds, scored on the built-in test split at their best validation
checkpoint, TG judged against TXL (terminals) with lower perplexity better and TXL (CC) shown beside."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tgjax.reproduce import command, runner
from tgjax.reproduce.recipes import recipes, tg_ppl


def _scored(name: str, role: str, values: list[float], group: str = "") -> list:
    return [(dataclasses.replace(spec, name=f"{name}-{i}"), runner.RunProgress(10, 10, finished=True,
                                                                                 train_seconds=160.0),
             {"word_perplexity": v})
            for i, (spec, v) in enumerate(zip([s for s in tg_ppl.runs(False) if s.name.startswith(name)], values))]


def test_tg_is_judged_against_txl_terminals_lower_being_better_and_txl_cc_only_shown():
    recipe = recipes()["tg-ppl-bound"]
    tg = _scored("tg", "model", [30.0, 30.2, 30.1, 29.9, 30.0])
    terminals = _scored("txl_terminals", "baseline", [31.0, 31.2, 30.9, 31.1, 31.0])
    # TXL (CC) lowest of all: were it judged, TG would be behind the best baseline.
    cc = _scored("txl_cc", "baseline", [28.0, 28.1, 27.9, 28.0, 28.2])
    summary = runner.summarise(recipe, tg + terminals + cc)
    assert summary["verdict"] == "in direction" and summary["baseline_name"] == "txl_terminals"
    assert summary["baseline"]["mean"] == pytest.approx(31.04) and summary["beside"]["txl_cc"]["mean"] == \
        pytest.approx(28.04)
    worse = _scored("tg", "model", [32.0, 32.1, 31.9, 32.2, 32.0])  # above TXL (terminals): the paper's other way
    assert runner.summarise(recipe, worse + terminals + cc)["verdict"] == "contradicted"
    # Four seeds of runs under five minutes are too few for a direction.
    assert runner.summarise(recipe, tg[:4] + terminals[:4] + cc)["verdict"] == "not yet"


def test_the_runs_are_the_demo_models_with_lm_tables_seeds():
    from tgjax.train.config import load_config

    specs = tg_ppl.runs(tiny=False)
    assert [(s.role, s.group) for s in specs[::5]] == [("model", ""), ("baseline", "txl_terminals"),
                                                          ("baseline", "txl_cc")]
    default_seed = load_config("configs/tiny.py", []).training.seed  # lm_table.py's first seed of each model
    for spec in specs:
        config = load_config(spec.config, list(spec.overrides))
        assert config.model.name == spec.name.split("-seed")[0] and config.model.num_layers == 3
        assert config.training.num_steps == 1500
    assert sorted({s.seed for s in specs}) == [default_seed + k for k in range(5)]
    assert len(specs) == 15 and len({s.name for s in specs}) == 15


class _FakeScorer:
    """Each sentence's log p = -1.5 nats a word: the exact perplexity is e^1.5 whatever the sentences."""

    def __init__(self, asked: list):
        self.asked = asked

    def search(self, sentences):
        self.asked.extend(sentences)
        return [type("Result", (), {"words": list(w), "log_prob": -1.5 * len(w)})() for w in sentences]


def test_a_run_is_scored_on_the_test_split_at_its_best_validation_checkpoint(tmp_path, monkeypatch):
    import tgjax
    from tgjax.data.corpora import get_corpus

    asked, loaded = [], []

    def fake_load(workdir, step="best"):
        loaded.append(step)
        return type("Model", (), {"scores_exactly": True, "rule": "txl_terminals", "step": 6,
                                  "scorer": lambda self, **kw: _FakeScorer(asked)})()

    monkeypatch.setattr(tgjax, "load", fake_load)
    (spec,) = [s for s in tg_ppl.runs(tiny=True) if s.group == "txl_terminals"]
    workdir = tmp_path / "run"
    workdir.mkdir()
    scores = tg_ppl.evaluate(spec, workdir, True, True)  # no validation yet: the latest checkpoint
    (workdir / "metrics.jsonl").write_text(json.dumps({"split": "valid", "step": 3, "loss": 2.0}) + "\n")
    again = tg_ppl.evaluate(spec, workdir, True, True)
    test = [t.leaves() for t in get_corpus("builtin", "test")[:tg_ppl.TINY_TEST_SENTENCES]]
    assert loaded == ["latest", "best"] and asked == test + test
    assert asked[0] != get_corpus("builtin", "valid")[0].leaves()
    assert scores["word_perplexity"] == pytest.approx(math.exp(1.5)) and scores["perplexity"] == "exact"
    assert scores["words"] == sum(map(len, test)) and "unlabeled_f1" not in scores
    assert (scores["checkpoint"], again["checkpoint"]) == ("latest", "best")


@pytest.mark.slow
def test_tiny_claim_run_scores_every_model_and_judges_tg(tmp_path):
    results = tmp_path / "runs.jsonl"
    assert command.main(["tg-ppl-bound", "--tiny", "--quiet", "--budget-s", "600", "--output", str(tmp_path / "out"),
                         "--results", str(results)]) == 0
    (record,) = [json.loads(line) for line in results.read_text().splitlines()]
    scores = {r["name"]: r["scores"] for r in record["runs"]}
    assert {s["perplexity"] for name, s in scores.items() if not name.startswith("txl_terminals")} == {"bound"}
    assert scores["txl_terminals-seed1"]["perplexity"] == "exact"
    assert all(1.0 < s["word_perplexity"] < math.inf for s in scores.values())
    assert "unlabeled_f1" in scores["tg-seed1"] and record["summary"]["beside"]["txl_cc"]["n"] == 1
