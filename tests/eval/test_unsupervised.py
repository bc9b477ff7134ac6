"""Unsupervised parsing metrics and command (tgjax.eval.unsupervised): the release's sentence F1, EVALB corpus F1."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import shared_data_dir
from tgjax.eval import unsupervised as U
from tgjax.syntax import distance as D
from tgjax.syntax import trees as trees_lib
from tgjax.syntax.trees import parse

# ---------------------------------------------------------------------------
# Slow, obvious oracles written from the definitions
# ---------------------------------------------------------------------------


def _oracle_spans(tree, include_root: bool) -> list[tuple[int, int]]:
    """Every constituent's (first word, last word + 1), by numbering the leaves and recursing."""
    counter = iter(range(10**6))

    def number(node):
        return next(counter) if isinstance(node, str) else [number(c) for c in node]

    def walk(node, out, is_root):
        if isinstance(node, int):
            return node, node
        bounds = [walk(c, out, False) for c in node]
        lo, hi = bounds[0][0], bounds[-1][1]
        if hi > lo and (include_root or not is_root):
            out.append((lo, hi + 1))
        return lo, hi

    out: list[tuple[int, int]] = []
    walk(number(tree), out, True)
    return out


def _oracle_sentence_f1(predicted, gold) -> float:
    p, g = set(_oracle_spans(predicted, False)), set(_oracle_spans(gold, False))
    if not g:
        return (2 / (2 + 1e-8)) if not p else 0.0
    if not p:
        return 0.0
    precision, recall = len(p & g) / len(p), len(p & g) / len(g)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _oracle_corpus_f1(predicted_trees, gold_trees) -> float:
    """Summed over sentences: matched / predicted and matched / gold spans, root included, as multisets."""
    matched = n_pred = n_gold = 0
    for p, g in zip(predicted_trees, gold_trees):
        ps, gs = _oracle_spans(p, True), _oracle_spans(g, True)
        n_pred, n_gold = n_pred + len(ps), n_gold + len(gs)
        remaining = list(ps)
        for span in gs:
            if span in remaining:
                remaining.remove(span)
                matched += 1
    precision, recall = 100 * matched / n_pred, 100 * matched / n_gold
    return 2 * precision * recall / (precision + recall)


WORDS = ["a", "b", "c", "d", "e", "f"]


@st.composite
def gold_and_predicted(draw, max_words: int = 14):
    """A random gold tree (any arity, no unary) and a greedy tree from random distances, over the same words."""
    n = draw(st.integers(1, max_words))
    words = [f"w{i}" for i in range(n)]

    def gold(lo, hi):
        if hi - lo == 1:
            return words[lo]
        cuts = sorted(draw(st.sets(st.integers(lo + 1, hi - 1), min_size=1, max_size=min(3, hi - lo - 1))))
        bounds = [lo, *cuts, hi]
        return [gold(a, b) for a, b in zip(bounds, bounds[1:])]

    distances = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    return words, gold(0, n), U.greedy_tree(distances, words)


@settings(max_examples=300, deadline=None)
@given(gold_and_predicted())
def test_sentence_f1_matches_the_slow_oracle(example):
    _, gold, predicted = example
    assert U.sentence_f1(predicted, gold) == pytest.approx(_oracle_sentence_f1(predicted, gold), abs=1e-7)
    assert U.sentence_f1(gold, gold) == pytest.approx(1.0, abs=1e-7)


@settings(max_examples=40, deadline=None)
@given(st.lists(gold_and_predicted(), min_size=1, max_size=6))
def test_corpus_f1_is_evalb_on_the_same_trees(examples):
    golds = [g for _, g, _ in examples]
    predicted = [p for _, _, p in examples]
    if all(isinstance(g, str) for g in golds):  # only one-word sentences: no bracket anywhere
        assert np.isnan(U.corpus_f1(predicted, golds))
        return
    assert U.corpus_f1(predicted, golds) == pytest.approx(_oracle_corpus_f1(predicted, golds), abs=1e-9)


# ---------------------------------------------------------------------------
# Hand-worked scores
# ---------------------------------------------------------------------------

GOLD_TEXT = [
    "(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))",  # the dog saw a cat
    "(S (NP (PRP it)) (VP (VBD rained)) (. .))",  # two words: no span below the root
    "(S (VP (VB Go)) (. !))",  # one word
    "(FRAG (. .) (: --))",  # no word left: left out, counted
]


def _prepared():
    return U.prepare_treebank([parse(t) for t in GOLD_TEXT], "hand")


def test_prepare_counts_what_is_left_out():
    prepared = _prepared()
    assert [s.words for s in prepared.sentences] == [["the", "dog", "saw", "a", "cat"], ["it", "rained"], ["Go"]]
    assert prepared.sentences[0].tree == [["the", "dog"], ["saw", ["a", "cat"]]]
    assert (prepared.num_trees, prepared.num_no_words) == (4, 1)
    assert prepared.dropped_tags == {".": 4, ":": 1}
    assert "1 with no word left after the tag filter" in prepared.describe()
    assert U.prepare_treebank([parse(t) for t in GOLD_TEXT], max_length=2).num_too_long == 1


def test_baselines_on_a_hand_made_gold_tree():
    sentences = _prepared().sentences
    scores = U.baseline_scores(sentences)
    eps = 1e-6
    # Sentence 1, gold spans below the root {(0,2), (2,5), (3,5)}:
    #   right-branching {(1,5), (2,5), (3,5)}: 2 of 3 -> F1 2/3; left-branching {(0,2), (0,3), (0,4)}: 1/3;
    #   balanced [[[the dog] saw] [a cat]] {(0,3), (0,2), (3,5)}: 2/3. Sentences 2 and 3 score 1 (no spans).
    assert scores["right-branching"].sentence_f1 == pytest.approx(100 * (2 / 3 + 1 + 1) / 3, abs=eps)
    assert scores["left-branching"].sentence_f1 == pytest.approx(100 * (1 / 3 + 1 + 1) / 3, abs=eps)
    assert scores["balanced"].sentence_f1 == pytest.approx(100 * (2 / 3 + 1 + 1) / 3, abs=eps)
    # EVALB counts the root and sums: sentence 1 has 4 brackets a side (RB matches 3, LB 2, balanced 3),
    # sentence 2 one (matched), sentence 3 none.
    assert scores["right-branching"].corpus_f1 == pytest.approx(100 * 4 / 5)
    assert scores["left-branching"].corpus_f1 == pytest.approx(100 * 3 / 5)
    assert scores["balanced"].corpus_f1 == pytest.approx(100 * 4 / 5)
    assert scores["balanced"].num_sentences == 3 and scores["balanced"].num_short == 3
    # A short length of 2 keeps sentences 2 and 3: perfect, one bracket matched.
    short = U.baseline_scores(sentences, short_length=2)["left-branching"]
    assert short.num_short == 2
    assert short.sentence_f1_short == pytest.approx(100.0, abs=eps)
    assert short.corpus_f1_short == pytest.approx(100.0)


def test_corpus_f1_equals_evalb_on_the_treebank_tree_itself():
    # EVALB run directly on the PTB tree (labels kept, COLLINS deletes the '.' leaf) against a written-out
    # right-branching tree agrees with corpus_f1 on the preprocessed nested lists: 3 of 4 brackets, 75.
    from tgjax.eval.evalb import evalb

    gold_text = GOLD_TEXT[0]
    predicted = "(X (XX the) (X (XX dog) (X (XX saw) (X (XX a) (XX cat)))))"
    direct = evalb([gold_text], [predicted], "collins", unlabeled=True).all.bracketing_fmeasure
    sentence = U.prepare_treebank([parse(gold_text)]).sentences[0]
    assert direct == pytest.approx(75.0)
    assert U.corpus_f1([D.right_branching(sentence.words)], [sentence.tree]) == pytest.approx(direct)


def test_release_quirks_documented():
    # One- and two-word sentences: no span on either side -> 2 / (2 + 1e-8).
    assert U.sentence_f1("w", "w") == 2 / (2 + 1e-8)
    assert U.sentence_f1(["a", "b"], ["a", "b"]) == 2 / (2 + 1e-8)
    # A flat gold sentence of 3+ words has no span below the root: any binary prediction scores 0.
    assert U.sentence_f1(["a", ["b", "c"]], ["a", "b", "c"]) == 0.0
    # Spans are sets: a predicted span that is also the gold's counts once.
    assert U.sentence_prf([["a", "b"], "c"], [["a", "b"], "c"]) == pytest.approx((1.0, 1.0, 1.0), abs=1e-7)


def test_greedy_tree_bad_input():
    assert U.greedy_tree([], []) == []
    assert U.greedy_tree([0.4], ["alone"]) == "alone"
    with pytest.raises(ValueError, match="2 distances for 3 words"):
        U.greedy_tree([0.1, 0.2], ["a", "b", "c"])
    with pytest.raises(ValueError, match="no words: leave it out"):
        U.evalb_corpus([[]], [[]])
    with pytest.raises(ValueError, match="words"):
        U.evalb_corpus([["a", "b"]], [["a", "c"]])


def test_words_evalb_cannot_read_are_respelled():
    # A word with a bracket or a blank must not break EVALB's reader (same spelling on both sides).
    assert U.corpus_f1([["(", ["a b", ")"]]], [[["(", "a b"], ")"]]) == pytest.approx(100 * 1 / 2)


# ---------------------------------------------------------------------------
# Layers and the command
# ---------------------------------------------------------------------------


class _GatesParser:
    """A stand-in model: per-layer master-forget gates we construct, turned into word distances as ON-LSTM does.

    Layer 1's distance decreases along the sentence (-> right-branching), layer 2's increases
    (-> left-branching), layer 3 is the gate of the *predicting* step (one step early), which must differ.
    """

    num_layers = 3

    def __init__(self):
        self.seen = []

    def layer_distances(self, sentences):
        self.seen.extend(sentences)
        out = []
        for words in sentences:
            n = len(words)
            steps = n + 2  # <s> w1 .. wn </s>
            t = np.arange(steps, dtype=float)
            # master forget [steps, 2 chunks]; d = 1 - mean.
            decreasing = np.stack([t / steps, np.ones(steps)], axis=-1)  # d = 0.5 - t / (2 steps)
            increasing = np.stack([1 - t / steps, np.ones(steps)], axis=-1)
            layers = [D.word_distances(D.syntactic_distance(g), n) for g in (decreasing, increasing)]
            layers.append(D.word_distances(D.syntactic_distance(increasing), n, num_leading=0))
            out.append(np.stack(layers))
        return out


def test_layer_rows_match_the_baselines_they_reproduce():
    prepared = _prepared()
    rows = U.run(prepared, _GatesParser())
    assert list(rows) == ["layer 1", "layer 2", "layer 3", "right-branching", "left-branching", "balanced"]
    assert rows["layer 1"] == rows["right-branching"]
    assert rows["layer 2"] == rows["left-branching"]
    assert rows["layer 3"] == rows["left-branching"]  # increasing either way; the alignment is tested in syntax


def test_command_on_the_builtin_treebank_with_a_constructed_model(tmp_path, capsys):
    made = []

    def load(workdir, step, batch_size):
        made.append((workdir, step, batch_size))
        parser = _GatesParser()
        made.append(parser)
        return parser

    out = tmp_path / "scores.json"
    code = U.main_unsupervised_parse(["--workdir", "W", "--limit", "40", "-o", str(out)], load=load)
    printed = capsys.readouterr().out
    assert code == 0
    assert made[0] == ("W", "best", 64)
    assert "built-in treebank (test): 40 trees, 40 scored" in printed
    for name in ("layer 1", "layer 2", "layer 3", "right-branching", "left-branching", "balanced"):
        assert name in printed
    record = json.loads(out.read_text())
    assert record["num_scored"] == 40 and record["dropped_tags"] == {".": 40}
    assert record["scores"]["layer 1"] == record["scores"]["right-branching"]
    assert record["scores"]["layer 2"] == record["scores"]["left-branching"]


def test_command_reads_files_and_feeds_the_release_word_form(tmp_path, capsys):
    treebank = tmp_path / "gold.txt"
    treebank.write_text("\n".join(GOLD_TEXT[:2]) + "\n(S (NP (NNP Room) (CD 101)) (VP (VBZ Waits)))\n")
    second = tmp_path / "more.txt"
    second.write_text(GOLD_TEXT[2] + "\n" + GOLD_TEXT[3] + "\n")
    parser = _GatesParser()
    args = ["--workdir", "W", "--treebank", str(treebank), "--treebank", str(second), "--layer", "2"]
    assert U.main_unsupervised_parse(args, load=lambda *a, **k: parser) == 0
    assert parser.seen == [["the", "dog", "saw", "a", "cat"], ["it", "rained"], ["room", "N", "waits"], ["go"]]
    printed = capsys.readouterr().out
    assert "5 trees, 4 scored (4 with <= 10 words)" in printed
    assert "1 with no word left after the tag filter" in printed
    assert "layer 2" in printed and "layer 1" not in printed
    parser = _GatesParser()
    args += ["--word-form", "raw"]
    assert U.main_unsupervised_parse(args, load=lambda *a, **k: parser) == 0
    assert parser.seen[2] == ["Room", "101", "Waits"]


def test_command_errors(tmp_path, capsys):
    assert U.main_unsupervised_parse(["--baselines-only", "--treebank", str(tmp_path / "missing.txt")]) == 2
    assert "error" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("(S (DT a) (NN c))\n\n(S (DT a) b)\n")
    assert U.main_unsupervised_parse(["--baselines-only", "--treebank", str(bad)]) == 2
    assert f"{bad}:3: the word 'b' is not under a POS tag" in capsys.readouterr().err
    malformed = tmp_path / "malformed.txt"
    malformed.write_text("(S (DT a) (NN c))\n(S (DT a) (NN c)\n(S (DT the) (NN end))\n")
    assert U.main_unsupervised_parse(["--baselines-only", "--treebank", str(malformed), "--on-bad-tree", "skip"]) == 0
    captured = capsys.readouterr()
    assert "2 trees, 2 scored" in captured.out and "1 malformed (skipped by the reader)" in captured.out
    assert f"{malformed}:3:1: expected ')'" in captured.err
    punct = tmp_path / "punct.txt"
    punct.write_text("(S (. .))\n")
    assert U.main_unsupervised_parse(["--baselines-only", "--treebank", str(punct)]) == 2
    assert "no sentence left to score" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        U.main_unsupervised_parse([])  # needs --workdir or --baselines-only


def test_tgjax_cli_dispatches(capsys):
    from tgjax.cli import main

    assert main(["eval", "unsupervised-parse", "--baselines-only", "--limit", "5"]) == 0
    assert "right-branching" in capsys.readouterr().out


def test_real_treebank_baselines(capsys):
    data = shared_data_dir()
    if data is None or not (data / "tale_of_two_cities" / "test.txt").exists():
        pytest.skip("../shared/data/tale_of_two_cities is absent")
    assert U.main_unsupervised_parse(["--baselines-only", "--treebank",
                                      str(data / "tale_of_two_cities" / "test.txt")]) == 0
    printed = capsys.readouterr().out
    assert "293 trees, 293 scored (107 with <= 10 words)" in printed
    assert "HYPH 18" in printed  # non-PTB tags are dropped and reported
    assert "right-branching    42.88    64.50     35.01     66.82" in printed  # the README's numbers


def test_craft_articles_read_as_one_treebank(capsys):
    data = shared_data_dir()
    penn = data / "craft_treebank" / "penn" if data is not None else None
    if penn is None or not (penn / "11319941.tree").exists():
        pytest.skip("../shared/data/craft_treebank is absent")
    files = [penn / "11319941.tree", penn / "14624252.tree"]
    expected = sum(len(trees_lib.read_treebank(f)) for f in files)
    args = ["--baselines-only"] + [a for f in files for a in ("--treebank", str(f))]
    assert U.main_unsupervised_parse(args) == 0
    assert f"2 files ({files[0]}, ...): {expected} trees" in capsys.readouterr().out


@pytest.mark.slow
def test_command_on_a_tiny_trained_onlstm(tmp_path, capsys):
    """End to end: train onlstm_tiny for a few steps, then parse.

    Small data, validation every 3 steps so that NT-ASGD switches (at step 9 with these settings) and the
    latest checkpoint holds averaged parameters.
    """
    import orbax.checkpoint as ocp
    from flax import nnx

    import tgjax
    from tgjax.cli import main

    workdir = tmp_path / "onlstm"
    assert main(["train", "--config", "configs/onlstm_tiny.py", "--workdir", str(workdir), "--quiet",
                 "--config.training.num_epochs=2", "--config.data.num_train_sentences=150",
                 "--config.data.num_valid_sentences=20", "--config.training.batch_size=4",
                 "--config.evaluation.every_epoch=False", "--config.evaluation.interval_steps=3"]) == 0
    capsys.readouterr()
    out = tmp_path / "scores.json"
    assert main(["eval", "unsupervised-parse", "--workdir", str(workdir), "--limit", "30", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "30 trees, 30 scored" in printed and "words not in the vocabulary, read as <unk>" in printed
    scores = json.loads(out.read_text())["scores"]
    layers = [f"layer {i}" for i in range(1, tgjax.load(workdir).parser(parses="distances").num_layers + 1)]
    assert list(scores) == [*layers, "right-branching", "left-branching", "balanced"]
    for row in scores.values():
        assert 0.0 <= row["sentence_f1"] <= 100.0 and 0.0 <= row["corpus_f1"] <= 100.0
    # The parameters read are the checkpoint's: the ASGD average once it ran, else the iterate.
    parser = tgjax.load(workdir, "latest").parser()
    step_dir = workdir / "checkpoints" / str(parser.step) / "state"
    saved = ocp.PyTreeCheckpointer().restore(step_dir)
    chosen = saved["average"]["params"]
    assert parser.averaged and int(saved["average"]["count"]) > 0
    loaded = nnx.to_pure_dict(nnx.state(parser.model, nnx.Param))
    np.testing.assert_array_equal(np.asarray(loaded["embedding"]), np.asarray(chosen["embedding"]))
