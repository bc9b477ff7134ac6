"""UDGN dependency evaluation (tgjax.eval.dependency, tgjax.eval.mst, tgjax.infer.udgn)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.eval import dependency as dep
from tgjax.eval.mst import best_single_root_tree, maximum_spanning_tree, tree_score
from tgjax.syntax.heads import check_heads, is_projective

# -- scores on hand-made examples ------------------------------------------------------------------


def test_uas_and_uuas_by_hand():
    gold = np.array([1, 1, 1])  # word 1 is the root
    # pred [1, 2, 2]: word 0 right; pairs {0,1} {1,2} {2} vs gold {0,1} {1} {1,2}: 2 of 3 undirected.
    assert dep.attachment_scores([np.array([1, 2, 2])], [gold]) == pytest.approx((100 / 3, 200 / 3))
    # pred [1, 0, 1]: pairs {0,1} twice collapse to one; {1,2} matches: UUAS 2/3, UAS 2/3.
    assert dep.attachment_scores([np.array([1, 0, 1])], [gold]) == pytest.approx((200 / 3, 200 / 3))
    # Corpus level: word counts pool over sentences (3 + 1 words, 1 + 1 right).
    assert dep.attachment_scores([np.array([1, 2, 2]), np.array([0])], [gold, np.array([0])])[0] == 50.0


def test_argmax_never_predicts_the_root_and_tree_mode_does():
    h = np.array([[0.9, 0.1, 0.0],   # word 0 mostly heads itself: the diagonal is ignored
                  [0.2, 0.1, 0.7],
                  [0.1, 0.8, 0.1]])
    assert dep.argmax_heads(h).tolist() == [1, 2, 1]  # a cycle 1 <-> 2, no root
    heads = dep.tree_heads(h)
    assert check_heads(heads) is None
    # By hand: root 0 with 1 -> 0 (0.2), 2 -> 1 (0.8) scores log 0.16; the next best, root 2 with
    # 0 -> 1 (0.1), 1 -> 2 (0.7), scores log 0.07. Every tree enumerated below agrees.
    scores = {}
    for assignment in itertools.product(range(3), repeat=3):
        if check_heads(assignment) is None:
            scores[assignment] = sum(np.log(h[i, j] + 1e-9) for i, j in enumerate(assignment) if i != j)
    assert tuple(heads.tolist()) == max(scores, key=scores.get) == (0, 0, 1)


def test_baselines_on_a_hand_made_tree():
    gold = [np.array([1, 2, 2, 2])]  # "the dog barks loudly": the -> dog -> barks <- loudly
    scores = dep.baseline_scores(gold, random_seeds=0)
    assert scores["left chain"] == {"uas": 25.0, "uuas": 75.0}  # [0, 0, 1, 2]
    assert scores["right chain"] == {"uas": 50.0, "uuas": 75.0}  # [1, 2, 3, 3]
    assert dep.left_chain(1).tolist() == [0] and dep.right_chain(1).tolist() == [0]


def _all_single_root_trees(n):
    return [h for h in itertools.product(range(n), repeat=n) if check_heads(h) is None]


def test_random_projective_trees_are_projective_and_reach_every_projective_tree():
    rng = np.random.default_rng(0)
    projective = {h for h in _all_single_root_trees(4) if is_projective(h)}
    assert len(projective) == 30  # projective trees on 4 words (one root)
    seen = {tuple(dep.random_projective_heads(4, rng).tolist()) for _ in range(3000)}
    assert seen == projective
    for n in (1, 2, 7, 15):
        heads = dep.random_projective_heads(n, rng)
        assert check_heads(heads) is None and is_projective(heads)


# -- Chu-Liu/Edmonds against brute force -----------------------------------------------------------


def _brute_force_best(scores: np.ndarray, single_root: bool) -> float:
    """The best total over every arborescence of nodes 1..n rooted at 0 (all (n+1)^n head vectors)."""
    n = scores.shape[0] - 1
    grid = np.array(list(itertools.product(range(n + 1), repeat=n)))  # [(n+1)^n, n] heads of nodes 1..n
    full = np.concatenate([np.zeros((len(grid), 1), np.int64), grid], axis=1)
    node = np.tile(np.arange(n + 1), (len(grid), 1))
    for _ in range(n):  # pointer jumping: a tree sends every node to 0 within n steps
        node = np.take_along_axis(full, node, axis=1)
    ok = np.all(node == 0, axis=1) & np.all(grid != np.arange(1, n + 1), axis=1)
    if single_root:
        ok &= np.sum(grid == 0, axis=1) == 1
    totals = scores[np.arange(1, n + 1), grid].sum(axis=1)
    return float(np.max(np.where(ok, totals, -np.inf)))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1))
def test_chu_liu_edmonds_finds_the_best_tree_found_by_brute_force(n, seed):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(n + 1, n + 1))
    if seed % 3 == 0:
        scores = np.round(scores)  # ties
    heads = maximum_spanning_tree(scores)
    assert heads[0] == -1 and check_heads(np.where(np.arange(n + 1) == 0, 0, heads)) is None
    assert tree_score(scores, heads) == pytest.approx(_brute_force_best(scores, single_root=False))
    # The release's decoding: one root, every root tried (ROOT arcs score 0).
    log_probs = np.log(rng.dirichlet(np.ones(n), size=n) + 1e-9)
    words, total = best_single_root_tree(log_probs)
    assert check_heads(words) is None
    padded = np.full((n + 1, n + 1), -np.inf)
    padded[1:, 1:] = log_probs
    padded[1:, 0] = 0.0
    assert total == pytest.approx(_brute_force_best(padded, single_root=True))
    root = int(np.flatnonzero(words == np.arange(n))[0])
    assert total == pytest.approx(sum(log_probs[i, words[i]] for i in range(n) if i != root))


def test_no_tree_when_arcs_are_forbidden():
    scores = np.full((3, 3), -np.inf)
    scores[1, 0] = 0.0  # node 2 has no allowed head
    with pytest.raises(ValueError, match="no spanning tree"):
        maximum_spanning_tree(scores)


# -- the command -----------------------------------------------------------------------------------


def _constructed_parser():
    from tgjax.infer.udgn import from_model
    from tgjax.models.mlm_masking import SPECIALS
    from tgjax.models.udgn import UDGN, UDGNConfig

    gold = dep.read_gold(["builtin"], limit=12)
    words = [*SPECIALS, *sorted({w.lower() for s in gold.words for w in s})]
    model = UDGN(UDGNConfig(vocab_size=len(words), d_model=16, num_layers=1, num_channels=2, channel_size=8,
                            parser_hidden=8, parser_layers=1), rngs=nnx.Rngs(params=0, dropout=0))
    return from_model(model, words, batch_size=8), gold


def test_the_command_scores_a_constructed_model_as_its_parts_do(tmp_path, capsys):
    parser, gold = _constructed_parser()
    out = tmp_path / "scores.json"
    code = dep.main_dependency(["--workdir", "unused", "--treebank", "builtin", "--limit", "12", "-o", str(out),
                                "--mlm-runs", "2"], load=lambda *a, **k: parser)
    assert code == 0
    printed = capsys.readouterr().out
    assert "builtin head rules, not Stanford Dependencies" in printed and "UDGN tree" in printed
    result = json.loads(out.read_text())
    probs = parser.head_probs(gold.words)
    for p, words in zip(probs, gold.words):
        assert p.shape == (len(words), len(words)) and np.allclose(p.sum(axis=1), 1.0, atol=1e-5)
    expected = dep.attachment_scores([dep.tree_heads(p) for p in probs], gold.heads)
    assert (result["udgn_tree"]["uas"], result["udgn_tree"]["uuas"]) == pytest.approx(expected)
    assert result["baselines"]["right chain"]["uas"] == pytest.approx(
        dep.attachment_scores([dep.right_chain(len(h)) for h in gold.heads], gold.heads)[0])
    assert result["words"] == sum(len(w) for w in gold.words) and result["sentences"] == 12
    assert 1.0 < result["mlm"]["perplexity"] < 2 * len(parser.words)  # an untrained model: about uniform


@pytest.mark.slow
def test_the_command_end_to_end_on_a_tiny_trained_run(tmp_path, capsys):
    from tgjax import cli
    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    overrides = ["model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
                 "model.parser_hidden=8", "model.parser_layers=1", "data.num_train_sentences=100",
                 "data.num_valid_sentences=20", "training.token_budget=256", "training.length_bucket=32",
                 "training.num_steps=10", "evaluation.interval_steps=5", "evaluation.runs=1",
                 "checkpointing.interval_steps=5"]
    train(load_config("configs/udgn_tiny.py", overrides), tmp_path / "run", quiet=True)
    code = cli.main(["eval", "dependency", "--workdir", str(tmp_path / "run"), "--treebank", "builtin",
                     "--limit", "20", "--mlm-runs", "1", "-o", str(tmp_path / "s.json")])
    assert code == 0
    result = json.loads((tmp_path / "s.json").read_text())
    assert "step 10" in result["model"] or "step 5" in result["model"]
    for key in ("udgn_argmax", "udgn_tree"):
        assert 0.0 <= result[key]["uas"] <= result[key]["uuas"] <= 100.0
    assert "UDGN argmax" in capsys.readouterr().out


# -- bad input -------------------------------------------------------------------------------------


def test_bad_arguments_and_files_are_reported(tmp_path, capsys):
    with pytest.raises(SystemExit):
        dep.main_dependency(["--treebank", "builtin"])  # neither --workdir nor --baselines-only
    assert dep.main_dependency(["--baselines-only", "--treebank", str(tmp_path / "nope.mrg")]) == 2
    assert "nope.mrg" in capsys.readouterr().err
    (tmp_path / "bad.mrg").write_text("(S (NP (DT the) (NN dog)) (VP (VBZ barks))\n")
    assert dep.main_dependency(["--baselines-only", "--treebank", str(tmp_path / "bad.mrg")]) == 2
    assert "bad.mrg" in capsys.readouterr().err
    assert dep.main_dependency(["--workdir", str(tmp_path), "--treebank", "builtin", "--limit", "3"]) == 2
    with pytest.raises(ValueError, match="empty sentence"):
        _constructed_parser()[0].head_probs([["dog"], []])


def test_a_one_word_sentence_scores_its_root():
    parser, _ = _constructed_parser()
    (probs,) = parser.head_probs([["dog"]])
    assert probs.shape == (1, 1) and dep.argmax_heads(probs).tolist() == [0] and dep.tree_heads(probs).tolist() == [0]


def test_gold_heads_drop_punctuation_and_climb_past_it(tmp_path):
    path = tmp_path / "two.mrg"
    path.write_text("(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))\n"
                    "(S (`` ``) (NP (NNS Dogs)) (VP (VBP bark) (, ,) (ADVP (RB loudly))) (. .))\n")
    gold = dep.read_gold([str(path)])
    assert gold.scheme == "collins"
    assert gold.words == [["The", "dog", "barks"], ["Dogs", "bark", "loudly"]]
    assert [h.tolist() for h in gold.heads] == [[1, 2, 2], [1, 1, 1]]  # Collins: S -> VP, VP -> verb, NP -> noun


# -- gold heads from a CoNLL-U / CoNLL-X file -------------------------------------------------------

TWO_TREES = ("(S (NP (DT The) (NN dog)) (VP (VBZ is) (ADJP (JJ happy))) (. .))\n"
             "(S (`` ``) (NP (NNS Dogs)) (VP (VBP bark) (, ,) (ADVP (RB loudly))) (. .))\n")
# Heads that differ from the Collins rules on purpose: sentence 1 as Stanford Dependencies (the copula
# "is" depends on "happy", the root), sentence 2 with "Dogs" under "loudly", and "loudly" under the
# comma, which climbs to "bark". (ID, FORM, TAG, HEAD), 1-based heads, 0 the root.
GOLD_ROWS = [
    [(1, "The", "DT", 2), (2, "dog", "NN", 4), (3, "is", "VBZ", 4), (4, "happy", "JJ", 0), (5, ".", ".", 4)],
    [(1, "``", "``", 3), (2, "Dogs", "NNS", 5), (3, "bark", "VBP", 0), (4, ",", ",", 3), (5, "loudly", "RB", 4),
     (6, ".", ".", 3)],
]
# Kept words (WORD_TAGS), 0-based heads read off the rows by hand: [1, 3, 3, 3] and [2, 1, 1];
# the Collins rules give [1, 2, 2, 2] and [1, 1, 1].
FILE_HEADS = [[1, 3, 3, 3], [2, 1, 1]]


def _write_gold(path, rows, *, conllx: bool = False):
    lines = []
    for k, sentence in enumerate(rows, start=1):
        if not conllx:
            lines += [f"# sent_id = {k}", "# text = " + " ".join(form for _, form, _, _ in sentence)]
        for token_id, form, tag, head in sentence:
            deprel = "root" if head == 0 else "dep"
            upos = tag if conllx else "_"  # CoNLL-X: CPOSTAG and POSTAG; CoNLL-U: UPOS left empty here
            lines.append("\t".join([str(token_id), form, "_", upos, tag, "_", str(head), deprel, "_", "_"]))
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


class _LastWordParser:
    """Every word's most probable head is the sentence's last word (the last word's: the one before it)."""

    def head_probs(self, sentences):
        out = []
        for words in sentences:
            n = len(words)
            probs = np.full((n, n), 0.1 / max(n, 1))
            probs[:, n - 1] = 1.0
            probs[n - 1, max(n - 2, 0)] = 1.0
            np.fill_diagonal(probs, 0.0)
            out.append(probs / probs.sum(axis=1, keepdims=True))
        return out

    def mlm_loss(self, sentences, runs):
        return 1.0, 5

    def describe(self):
        return "stub"


@pytest.mark.parametrize("conllx", [False, True], ids=["conllu", "conllx"])
def test_gold_heads_from_a_conll_file_are_scored(tmp_path, capsys, conllx):
    treebank = tmp_path / "two.mrg"
    treebank.write_text(TWO_TREES)
    gold_file = _write_gold(tmp_path / ("two.conllx" if conllx else "two.conllu"), GOLD_ROWS, conllx=conllx)
    gold = dep.read_gold([str(treebank)], gold_files=[gold_file])
    assert gold.words == [["The", "dog", "is", "happy"], ["Dogs", "bark", "loudly"]]
    assert [h.tolist() for h in gold.heads] == FILE_HEADS
    out = tmp_path / "scores.json"
    code = dep.main_dependency(["--workdir", "unused", "--treebank", str(treebank), "--gold", gold_file,
                                "--random-seeds", "1", "-o", str(out)], load=lambda *a, **k: _LastWordParser())
    assert code == 0
    assert f"gold heads: read from {gold_file}" in capsys.readouterr().out
    result = json.loads(out.read_text())
    # By hand, over 7 words. Left chain [0,0,1,2] [0,0,1]: 1 head right ("loudly"); pairs {0,1} {2,3} and {1,2}.
    assert result["baselines"]["left chain"] == pytest.approx({"uas": 100 / 7, "uuas": 300 / 7})
    # Right chain [1,2,3,3] [1,2,2]: "The", "is", "happy" right; pairs {0,1} {2,3} {3} and {1,2}.
    assert result["baselines"]["right chain"] == pytest.approx({"uas": 300 / 7, "uuas": 400 / 7})
    # The stub's argmax [3,3,3,2] [2,2,1]: "dog", "is", "Dogs", "loudly" right.
    assert result["udgn_argmax"]["uas"] == pytest.approx(400 / 7)
    # Against the Collins heads the left chain gets 2 of 7 ("happy", "loudly"): the file's heads were used.
    rules = dep.read_gold([str(treebank)])
    assert dep.attachment_scores([dep.left_chain(len(h)) for h in rules.heads], rules.heads)[0] == 200 / 7


@pytest.mark.parametrize("change, message", [
    (lambda rows: [[*rows[0][:1], (2, "cat", "NN", 4), *rows[0][2:]], rows[1]],
     "sentence 1 (tree 1 of {tb}), WORD_TAGS kept: word 2 is 'cat' in the file, 'dog' in the treebank"),
    (lambda rows: [[*rows[0][:4], (5, ".", "NN", 4)], rows[1]],  # the full stop tagged as a word
     "sentence 1 (tree 1 of {tb}), WORD_TAGS kept: 5 words in the file, 4 in the treebank"),
    (lambda rows: rows[:1], "1 sentences, but {tb} has 2 trees"),
])
def test_a_gold_file_that_does_not_match_the_treebank_is_refused_in_one_line(tmp_path, capsys, change, message):
    treebank = tmp_path / "two.mrg"
    treebank.write_text(TWO_TREES)
    gold_file = _write_gold(tmp_path / "bad.conllu", change(GOLD_ROWS))
    code = dep.main_dependency(["--baselines-only", "--treebank", str(treebank), "--gold", gold_file])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == f"tgjax eval dependency: error: {gold_file}: {message.format(tb=treebank)}\n"


def test_gold_file_excludes_head_rule_options(tmp_path):
    with pytest.raises(SystemExit):
        dep.main_dependency(["--baselines-only", "--treebank", "builtin", "--gold", "x.conllu", "--heads", "collins"])


def test_tree_shape_by_hand():
    # "a b c d": a->b, b->d, c->d, d root: 3 rightward, 2 adjacent, distances 1+2+1, rooted last.
    # "x y z": y root, x->y (right, adjacent), z->y (left, adjacent). "p q": p root, q->p (left, adjacent), rooted
    # first. A one-word sentence has no dependents and counts for neither root share.
    trees = [np.array([1, 3, 3, 3]), np.array([1, 1, 1]), np.array([0, 0]), np.array([0])]
    shape = dep.tree_shape(trees)
    assert shape["head_right"] == pytest.approx(100 * 4 / 6)
    assert shape["adjacent"] == pytest.approx(100 * 5 / 6)
    assert shape["mean_distance"] == pytest.approx(7 / 6)
    assert shape["root_last"] == pytest.approx(100 / 3)
    assert shape["root_first"] == pytest.approx(100 / 3)
