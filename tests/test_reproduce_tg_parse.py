"""tg-parse-f1: TG and TXL (CC) trained alike on Tale of Two Cities over three seeds, each run's best-validation
checkpoint parsing the test split with twice `tgjax eval parse`'s default beam, TG judged by labelled F1 (higher
better)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tgjax.reproduce import command, runner
from tgjax.reproduce.recipes import recipes, tg_parse
from tgjax.syntax.trees import strip_preterminals


def _scored(name: str, values: list[float]) -> list:
    specs = [s for s in tg_parse.runs(False) if s.name.startswith(name)]
    return [(dataclasses.replace(spec, name=f"{name}-{i}"),
             runner.RunProgress(3000, 3000, finished=True, train_seconds=1600.0), {"labeled_f1": v})
            for i, (spec, v) in enumerate(zip(specs, values))]


def test_tg_is_judged_against_txl_cc_by_labelled_f1_higher_being_better():
    recipe = recipes()["tg-parse-f1"]
    assert recipe.one_run_at_a_time  # two ~20 MB checkpoints a run: a pack carries one unfinished run
    tg, cc = _scored("tg", [81.4, 81.6, 81.2]), _scored("txl_cc", [80.0, 80.2, 79.9])
    summary = runner.summarise(recipe, tg + cc)
    assert summary["verdict"] == "in direction" and summary["model"]["mean"] == pytest.approx(81.4)
    assert runner.summarise(recipe, _scored("tg", [79.0, 79.1, 78.9]) + cc)["verdict"] == "contradicted"
    # Two seeds of a run over five minutes are too few for a direction.
    assert runner.summarise(recipe, tg[:2] + cc[:2])["verdict"] == "not yet"


def test_both_models_train_the_totc_config_alike_over_three_seeds():
    from tgjax.train.config import load_config

    specs = tg_parse.runs(tiny=False)
    assert [(s.name, s.role) for s in specs] == [
        ("tg-seed1", "model"), ("tg-seed2", "model"), ("tg-seed3", "model"),
        ("txl_cc-seed1", "baseline"), ("txl_cc-seed2", "baseline"), ("txl_cc-seed3", "baseline")]
    configs = [load_config(s.config, list(s.overrides)) for s in specs]
    assert [c.model.name for c in configs] == ["tg"] * 3 + ["txl_cc"] * 3
    assert [c.training.seed for c in configs] == [1, 2, 3, 1, 2, 3]
    default = load_config(tg_parse.CONFIG, [])
    for config in configs:  # only the model and the seed differ from the shipped config
        assert (config.model.num_layers, config.model.d_model) == (default.model.num_layers, default.model.d_model)
        assert config.training.num_steps == default.training.num_steps == 3000
        assert config.data.train_path == default.data.train_path and config.data.min_word_count == 2
    assert tg_parse.test_treebank().name == "test.txt"
    assert tg_parse.test_treebank().parent == type(tg_parse.test_treebank())(default.data.valid_path).parent


def test_the_totc_test_split_is_what_a_full_run_parses():
    path = tg_parse.test_treebank()
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/data not beside the checkout)")
    trees = tg_parse.test_trees(tiny=False)
    assert len(trees) == 293 and sum(len(t.leaves()) for t in trees) == 6126


class _GoldParser:
    """A search that returns each sentence's gold tree (no pre-terminals): every F1 of its parses is 100."""

    def __init__(self, gold, asked):
        self.by_words = {tuple(t.leaves()): strip_preterminals(t) for t in gold}
        self.asked = asked
        self.space = type("Space", (), {"encode_word": lambda self, word: (0, False)})()

    def search(self, sentences):
        self.asked.extend(sentences)
        return [type("Result", (), {"words": list(w), "log_prob": -2.0 * len(w),
                                    "best_tree": self.by_words[tuple(w)]})() for w in sentences]


def test_a_run_is_scored_on_the_test_split_at_its_best_checkpoint_with_twice_the_default_beam(tmp_path, monkeypatch):
    import math

    import tgjax
    import tgjax.infer.api as api
    from tgjax.data.corpora import get_corpus
    from tgjax.eval import search_errors
    from tgjax.infer.beam import BeamConfig

    gold = tg_parse.test_trees(tiny=True)
    asked, loaded, beams, split = [], [], [], []

    def fake_load(workdir, step="best"):
        loaded.append(step)
        return type("Model", (), {"step": 6, "require": lambda self, *a, **k: None,
                                  "tree_scorer": lambda self, **k: "the model's tree scorer"})()

    def fake_split(scorer, gold_trees, predicted):
        split.append((scorer, gold_trees, predicted))
        return search_errors.classify([-1.0] * len(predicted), [-2.0] * len(predicted), [True] * len(predicted))

    def fake_scorer(models, *, command=None, beam=None, pushdown=None, search="auto"):
        beams.append(beam)
        return _GoldParser(gold, asked)

    monkeypatch.setattr(tgjax, "load", fake_load)
    monkeypatch.setattr(api, "sentence_scorer", fake_scorer)
    monkeypatch.setattr(search_errors, "count_search_errors", fake_split)
    spec = tg_parse.runs(tiny=True)[0]
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "metrics.jsonl").write_text(json.dumps({"split": "valid", "step": 3, "loss": 2.0}) + "\n")
    scores = tg_parse.evaluate(spec, workdir, True, True)
    # Twice tgjax eval parse's default width (word 10, action 50, fast-track 2), every other setting the default's.
    default = BeamConfig()
    assert loaded == ["best"] and beams == [BeamConfig(word_beam=2 * default.word_beam,
                                                       action_beam=2 * default.action_beam,
                                                       fast_track=2 * default.fast_track)]
    assert (beams[0].word_beam, beams[0].action_beam, beams[0].fast_track) == (20, 100, 4)
    assert asked == [t.leaves() for t in get_corpus("builtin", "test")[:tg_parse.TINY_TEST_SENTENCES]]
    assert scores["labeled_f1"] == scores["unlabeled_f1"] == pytest.approx(100.0)
    assert scores["right_branching_unlabeled_f1"] < 100.0  # the right-branching trees are scored, not the parses
    assert scores["word_perplexity_bound"] == pytest.approx(math.exp(2.0))
    assert scores["sentences"] == len(gold) and scores["words"] == sum(len(t.leaves()) for t in gold)
    # The wrong parses' split: the same model's tree scorer, over the test trees and the beam's parses of them.
    ((scorer, split_gold, predicted),) = split
    assert scorer == "the model's tree scorer" and split_gold == gold
    assert [strip_preterminals(t) for t in predicted] == [strip_preterminals(t) for t in gold]
    assert scores["search_errors"]["exact"] == len(gold)


@pytest.mark.slow
def test_tiny_claim_run_trains_and_parses_both_models(tmp_path):
    results = tmp_path / "runs.jsonl"
    assert command.main(["tg-parse-f1", "--tiny", "--quiet", "--budget-s", "600", "--output", str(tmp_path / "out"),
                         "--results", str(results)]) == 0
    (record,) = [json.loads(line) for line in results.read_text().splitlines()]
    scores = {r["name"]: r["scores"] for r in record["runs"]}
    assert set(scores) == {"tg-seed1", "txl_cc-seed1"}
    for s in scores.values():
        assert 0.0 <= s["labeled_f1"] <= s["unlabeled_f1"] <= 100.0 and s["sentences"] == tg_parse.TINY_TEST_SENTENCES
        split = s["search_errors"]
        assert split["exact"] + split["search_errors"] + split["model_errors"] + split["unscored"] == s["sentences"]
    assert record["summary"]["verdict"] == "not yet"
