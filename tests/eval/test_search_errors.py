"""Search errors against model errors (`tgjax.eval.search_errors`): by hand, under an exhaustive beam (where
there can be none), and against the beam's own scores of its trees."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.eval.test_parse import fake_load, vocab  # noqa: F401  (fixtures: `main_parse` loads through them)
from tests.infer.test_beam import EXHAUSTIVE, get_model, tiny_vocab
from tgjax.eval import parse
from tgjax.eval.search_errors import classify, count_search_errors
from tgjax.infer.api import LoadedModel
from tgjax.infer.beam import WordSynchronousBeamSearch
from tgjax.infer.loading import from_model
from tgjax.infer.scoring import score_trees
from tgjax.syntax import trees as trees_lib

# Gold trees in the tiny model's labels (A, B) and words (a, b, c), tagged X, within EXHAUSTIVE's caps (3 open,
# 2 opens in a row): every one is a tree the exhaustive beam could return.
GOLD = [
    "(A (X a) (X b))",
    "(A (B (X a) (X b)) (X c))",
    "(B (X c) (A (X a) (X a)))",
    "(A (X b) (B (X c) (X a)) (X b))",
    "(B (A (X a) (X c)) (A (X b) (X b)))",
    "(A (X c) (X c) (X a))",
]
NARROW = dataclasses.replace(EXHAUSTIVE, word_beam=1, action_beam=1, fast_track=0)


def _gold():
    return [trees_lib.parse(t) for t in GOLD]


def _tree_scorer(name: str = "tg", seed: int = 0):
    vocab = tiny_vocab()
    return LoadedModel.in_memory("lm", from_model(get_model(name, vocab.size, seed), vocab, name)).tree_scorer()


def _parses(config, name: str = "tg", seed: int = 0):
    vocab = tiny_vocab()
    search = WordSynchronousBeamSearch(get_model(name, vocab.size, seed), vocab, name, config)
    return parse.parse_treebank(search, _gold())


def test_classify_by_hand():
    # Sentence 1: the beam's tree is gold. 2: gold -11 beats the beam's -12 (a search error, gap 1). 3: the beam's
    # -9 beats gold -9.5 (a model error). 4: a tie is the model's. 5: gold unscorable. 6: gold ahead by 3.
    found = classify([-10.0, -12.0, -9.0, -7.0, -5.0, -8.0], [-10.0, -11.0, -9.5, -7.0, None, -5.0],
                     [True, False, False, False, False, False])
    assert (found.exact, found.search_errors, found.model_errors, found.unscored) == (1, 2, 2, 1)
    assert found.search_gap == pytest.approx(2.0) and found.sentences == 6
    assert "search errors" in found.format() and "50.0% of the 4 wrong parses" in found.format()
    assert math.isnan(classify([-1.0], [-2.0], [False]).search_gap)
    with pytest.raises(ValueError, match="one of each per sentence"):
        classify([-1.0], [-1.0, -2.0], [False])


@pytest.mark.parametrize("name", ("tg", "txl_cc"))
def test_an_exhaustive_beam_makes_no_search_errors(name):
    """The exhaustive beam returns the model's best tree within the caps, and every gold tree is within them:
    the model can never prefer a gold tree to the beam's."""
    report = _parses(EXHAUSTIVE, name)
    found = count_search_errors(_tree_scorer(name), report.gold, report.predicted)
    assert found.search_errors == 0 and found.unscored == 0
    assert found.exact == sum(p == g for p, g in zip(report.predicted, report.gold))
    assert found.exact + found.model_errors == len(GOLD)


def test_a_narrow_beam_split_agrees_with_the_beams_own_scores():
    """With one hypothesis a step the beam loses trees the model prefers. The split from teacher-forced scores
    equals one made from the beam's own score of its tree (`best_log_prob`) and trees compared as trees."""
    report = _parses(NARROW)
    found = count_search_errors(_tree_scorer(), report.gold, report.predicted)
    gold_scores = [s.logp for s in score_trees(_tree_scorer(), report.gold, pos_tags=True)]
    expected = classify([r.best_log_prob for r in report.results], gold_scores,
                        [p == g for p, g in zip(report.predicted, report.gold)])
    assert dataclasses.astuple(found)[:4] == dataclasses.astuple(expected)[:4]
    assert found.search_gap == pytest.approx(expected.search_gap, abs=1e-3)
    assert found.search_errors > 0  # the case under test happens here


def test_a_gold_label_outside_the_vocabulary_is_counted_unscored():
    gold = [trees_lib.parse("(S (X a) (X b))"), *_gold()[1:2]]
    found = count_search_errors(_tree_scorer(), gold, [trees_lib.parse("(A (X a) (X b))"), gold[1]])
    assert (found.exact, found.unscored, found.sentences) == (1, 1, 2)
    assert "1 gold trees not scored" in found.format()


def test_main_parse_prints_the_split_and_refuses_it_on_merge(tmp_path, fake_load, capsys):  # noqa: F811
    treebank = tmp_path / "gold.txt"
    treebank.write_text("".join(t + "\n" for t in GOLD))
    assert parse.main_parse(["--workdir", "tg", "--treebank", str(treebank), "--word-beam", "1", "--action-beam",
                             "1", "--fast-track", "0", "--search-errors"]) == 0
    printed = capsys.readouterr().out
    assert "parses equal to the gold tree" in printed and f"of {len(GOLD)}; search errors" in printed
    with pytest.raises(SystemExit):
        parse.main_parse(["--treebank", str(treebank), "--merge", str(tmp_path / "p.txt"), "--search-errors"])
    assert "not on --merge" in capsys.readouterr().err
