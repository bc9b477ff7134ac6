"""Parse reranking: the argmax of log p(x, y), ties to the first, F1 with EVALB, bad input."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.infer.test_perplexity import flat, retagged, right_branching, standard_blocks, write_proposals
from tests.infer.test_scoring import B, corpus, fresh_scorer, trained_workdir
from tgjax.eval.evalb import evalb
from tgjax.eval.rerank import rerank, rerank_f1
from tgjax.infer.perplexity import ProposalError, read_proposals
from tgjax.infer.scoring import score_trees
from tgjax.syntax import trees


def test_rerank_picks_the_argmax(tmp_path):
    scorer = fresh_scorer("tg")
    blocks = standard_blocks(8)
    results = list(rerank(scorer, read_proposals(write_proposals(tmp_path / "p.txt", blocks))))
    for r, block in zip(results, blocks):
        each = [s.logp for s in score_trees(scorer, block)]
        assert r.best == int(np.argmax(each))
        assert r.best_tree == block[r.best]
        assert r.logps[r.best] == max(r.logps)


def test_ties_go_to_the_first_proposal(tmp_path):
    # A tree and its retagged copy are one tree to the model (tags are dropped): an exact tie, whichever is first.
    gold = corpus()[2]
    blocks = [[gold, retagged(gold)], [retagged(gold), gold]]
    results = list(rerank(fresh_scorer("tg"), read_proposals(write_proposals(tmp_path / "p.txt", blocks), dedup=False)))
    for r, block in zip(results, blocks):
        assert r.logps[0] == r.logps[1]
        assert r.best == 0 and r.best_tree == block[0]


PUNCTUATION_TAGS = {",", ":", "``", "''", "."}  # COLLINS.prm's deleted pre-terminals


def labelled_brackets(tree: trees.Tree) -> Counter:
    """The oracle's constituents: (label, start, end) over the words left after deleting punctuation, with counts."""
    found = Counter()

    def walk(node: trees.Tree, start: int) -> int:
        if node.is_preterminal():
            return start + (node.label not in PUNCTUATION_TAGS)
        end = start
        for child in node.children:
            end = walk(child, end)
        if end > start:
            found[(node.label, start, end)] += 1
        return end

    walk(tree, 0)
    return found


def test_f1_counts_the_chosen_trees_brackets(tmp_path):
    # By hand: gold (S (NP (NP this woman) (PP by (NP the clerk))) (VP pushes (NP this goat)) .) has 7 brackets;
    # the flat proposal has one, S over the 8 words, which matches: recall 1/7, precision 1/1.
    sentence = trees.parse("(S (NP (NP (DT this) (NN woman)) (PP (IN by) (NP (DT the) (NN clerk)))) "
                           "(VP (VBZ pushes) (NP (DT this) (NN goat))) (. .))")
    hand = rerank_f1([flat(sentence)], [sentence]).all
    assert (hand.bracketing_recall, hand.bracketing_precision) == (pytest.approx(100 / 7, abs=0.01), 100.0)
    assert hand.bracketing_fmeasure == pytest.approx(100 * 2 / 8, abs=0.01)

    # The model's choices, against bracket counts made here (corpus-level recall and precision). A fresh model
    # prefers the flat tree (the fewest actions), so every other sentence is offered none: the chosen trees mix
    # flat and deeper ones.
    blocks = [block if i % 2 == 0 else block[:2] for i, block in enumerate(standard_blocks(8))]
    results = list(rerank(fresh_scorer("txl_cc"), read_proposals(write_proposals(tmp_path / "p.txt", blocks))))
    gold = [b[1] for b in blocks]
    chosen = [r.best_tree for r in results]
    assert 0 < sum(c == flat(g) for c, g in zip(chosen, gold)) < len(gold)
    matched = sum(sum((labelled_brackets(c) & labelled_brackets(g)).values()) for c, g in zip(chosen, gold))
    num_gold = sum(sum(labelled_brackets(g).values()) for g in gold)
    num_chosen = sum(sum(labelled_brackets(c).values()) for c in chosen)
    summary = rerank_f1(chosen, gold).all
    assert summary.bracketing_recall == pytest.approx(100 * matched / num_gold, abs=0.01)
    assert summary.bracketing_precision == pytest.approx(100 * matched / num_chosen, abs=0.01)
    assert summary.bracketing_fmeasure == pytest.approx(200 * matched / (num_gold + num_chosen), abs=0.01)
    assert rerank_f1(gold, gold).f1 == 100.0
    with pytest.raises(ProposalError, match="gold trees but"):
        rerank_f1(chosen[:-1], gold)
    with pytest.raises(ProposalError, match="sentence 1"):
        rerank_f1(chosen, [gold[0], gold[0]] + gold[2:])


def test_txl_terminals_cannot_rerank(tmp_path):
    path = write_proposals(tmp_path / "p.txt", standard_blocks(1))
    with pytest.raises(ValueError, match="cannot rerank"):
        list(rerank(fresh_scorer("txl_terminals"), read_proposals(path)))


def test_rerank_command(tmp_path, capsys):
    from tgjax.eval.commands import main_rerank

    workdir, _ = trained_workdir()
    blocks = standard_blocks(6)
    path = write_proposals(tmp_path / "p.txt", blocks)
    gold_path = tmp_path / "gold.txt"
    trees.write_treebank([b[1] for b in blocks], gold_path)
    out, best = tmp_path / "rerank.jsonl", tmp_path / "best.txt"
    assert main_rerank(["--workdir", str(workdir), "--proposals", str(path), "--gold", str(gold_path),
                        "--trees", str(best), "-o", str(out), "--batch-size", str(B)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    chosen = best.read_text().splitlines()
    assert chosen == [r["best_tree"] for r in records]
    assert [r["best_line"] for r in records] == [4 * i + 1 + r["best"] for i, r in enumerate(records)]
    summary = json.loads((tmp_path / "rerank.jsonl.meta.json").read_text())["summary"]
    assert summary["f1"] == evalb([b[1] for b in blocks], chosen).f1
    assert "f1" in capsys.readouterr().err

    wrong = tmp_path / "wrong_gold.txt"
    trees.write_treebank([blocks[1][1]] + [b[1] for b in blocks[1:]], wrong)
    assert main_rerank(["--workdir", str(workdir), "--proposals", str(path), "--gold", str(wrong)]) == 2
    assert "reference sentence" in capsys.readouterr().err
    assert main_rerank(["--workdir", str(workdir), "--proposals", str(path), "--shard", "0/2", "-o",
                        str(tmp_path / "x.jsonl"), "--gold", str(gold_path)]) == 2
    assert "give them to `tgjax eval merge`" in capsys.readouterr().err


def test_right_branching_helper_keeps_the_words():
    t = corpus()[0]
    assert right_branching(t).leaves() == flat(t).leaves() == retagged(t).leaves() == t.leaves()
