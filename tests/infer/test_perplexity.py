"""The perplexity bound from proposal trees: its value, duplicates, TXL (terminals), documents, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

from tests.infer.test_scoring import LONG, B, corpus, fresh, fresh_scorer, trained_workdir
from tgjax.data.vocab import build_word_dictionary
from tgjax.infer.perplexity import ProposalError, read_proposals, score_documents, score_proposals
from tgjax.infer.scoring import Scorer, encode, score_trees
from tgjax.syntax import actions
from tgjax.syntax.trees import Tree

# -----------------------------------------------------------------------------
# Proposals for tests: other bracketings of the gold trees' tagged words.


def preterminals(tree: Tree) -> list[Tree]:
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if node.is_preterminal():
            out.append(node)
        else:
            stack.extend(c for c in reversed(node.children) if isinstance(c, Tree))
    return out


def flat(tree: Tree) -> Tree:
    """`(S t1 ... tn)` over the tagged words."""
    return Tree("S", preterminals(tree))


def right_branching(tree: Tree) -> Tree:
    """`(S t1 (S t2 (... (S tn-1 tn))))`."""
    tagged = preterminals(tree)
    node = Tree("S", tagged[-2:]) if len(tagged) > 1 else Tree("S", tagged)
    for p in reversed(tagged[:-2]):
        node = Tree("S", [p, node])
    return node


def retagged(tree: Tree) -> Tree:
    """The same tree with every POS tag changed: the same tree to a model that drops tags."""
    def walk(node: Tree) -> Tree:
        if node.is_preterminal():
            return Tree("XX", list(node.children))
        return Tree(node.label, [walk(c) for c in node.children])
    return walk(tree)


def write_proposals(path: Path, blocks: list[list[Tree]], *, documents: list[int] | None = None) -> Path:
    """One tree per line, blocks separated by blank lines; `documents[i]` starts a `<doc>` before block i."""
    lines = []
    for i, block in enumerate(blocks):
        if documents is not None and i in documents:
            lines.append("<doc>")
        lines += [t.to_string() for t in block]
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def standard_blocks(n: int = 10) -> list[list[Tree]]:
    return [[right_branching(t), t, flat(t)] for t in corpus()[:n]]


# -----------------------------------------------------------------------------


def test_bound_is_the_logsumexp_of_the_proposals(tmp_path):
    scorer = fresh_scorer("tg")
    blocks = standard_blocks()
    path = write_proposals(tmp_path / "p.txt", blocks)
    results = list(score_proposals(scorer, read_proposals(path), chunk_size=7))
    assert [r.index for r in results] == list(range(len(blocks)))
    for r, block in zip(results, blocks):
        each = np.array([s.logp for s in score_trees(scorer, block)])
        np.testing.assert_allclose(r.logps, each, rtol=1e-9)
        assert r.bound == pytest.approx(float(np.logaddexp.reduce(each)), rel=1e-12)
        assert r.logps.max() <= r.bound <= r.logps.max() + math.log(len(block))
        assert r.best == int(np.argmax(each)) and r.num_words == len(block[0].leaves())
        assert r.block.lines == [r.index * 4 + k + 1 for k in range(3)]


def test_duplicates_are_counted_once_unless_asked(tmp_path):
    scorer = fresh_scorer("tg")
    gold = corpus()[3]
    path = write_proposals(tmp_path / "p.txt", [[gold, retagged(gold), gold], [gold, flat(gold)]])
    (logp,) = [s.logp for s in score_trees(scorer, [gold])]
    deduped = list(score_proposals(scorer, read_proposals(path)))
    assert (deduped[0].num_duplicates, len(deduped[0].logps)) == (2, 1)
    assert deduped[0].bound == pytest.approx(logp, rel=1e-12)
    counted = list(score_proposals(scorer, read_proposals(path, dedup=False)))
    assert (counted[0].num_duplicates, len(counted[0].logps)) == (0, 3)
    assert counted[0].bound == pytest.approx(logp + math.log(3), rel=1e-12)
    assert counted[1].bound == deduped[1].bound
    two = write_proposals(tmp_path / "two.txt", [[gold, gold]])
    (twice,) = score_proposals(scorer, read_proposals(two, dedup=False))
    assert twice.bound - logp == pytest.approx(math.log(2), abs=1e-9)


def test_txl_terminals_bound_is_the_exact_log_p_of_the_words(tmp_path):
    scorer = fresh_scorer("txl_terminals")
    blocks = standard_blocks(4)
    results = list(score_proposals(scorer, read_proposals(write_proposals(tmp_path / "p.txt", blocks))))
    exact = [s.logp for s in score_trees(scorer, [b[1] for b in blocks])]
    np.testing.assert_allclose([r.bound for r in results], exact, rtol=1e-12)
    assert all(len(r.logps) == 1 for r in results)
    # The sentence's words then </s>: the end of the sentence is in log p(x), not in the words.
    for r, block in zip(results, blocks):
        (s,) = scorer.score_encoded([encode(scorer.vocab, block[1].leaves() + ["</s>"])])
        assert r.bound == pytest.approx(s.logp, rel=1e-6) and r.num_words == len(block[1].leaves())


def test_txl_terminals_documents_end_each_sentence_with_eos(tmp_path):
    """A document is `<s> x_1 </s> x_2 </s>`; sentence i's term is log p(x_i </s> | x_<i), summing to the whole."""
    scorer = fresh_scorer("txl_terminals")
    gold = corpus()[:3]
    path = write_proposals(tmp_path / "docs.txt", [[gold[0], flat(gold[0])], [gold[1]], [gold[2]]],
                           documents=[0, 2])
    results = list(score_documents(scorer, read_proposals(path, documents=True)))
    assert [r.block.document for r in results] == [0, 0, 1]
    tokens = gold[0].leaves() + ["</s>"] + gold[1].leaves() + ["</s>"]
    (whole,) = scorer.score_encoded([encode(scorer.vocab, tokens)])
    first = len(gold[0].leaves()) + 1
    assert results[0].bound == pytest.approx(math.fsum(whole.token_logprobs[:first]), rel=1e-6)
    assert results[1].bound == pytest.approx(math.fsum(whole.token_logprobs[first:]), rel=1e-6)
    # The first sentence of a document is the sentence alone.
    alone = [s.logp for s in score_trees(scorer, [gold[0], gold[2]])]
    assert results[0].bound == pytest.approx(alone[0], rel=1e-6)
    assert results[2].bound == pytest.approx(alone[1], rel=1e-6)


def test_documents_use_the_greedy_prefix(tmp_path):
    """Each sentence given the best trees of the sentences before it; J = 1 sums to log p(document)."""
    documents = [list(corpus("train", 40)[k:k + 2]) for k in range(0, 40, 2)]
    vocab = build_word_dictionary([actions.document_actions(d, pos_tags=True) for d in documents]
                                  + [actions.choe_charniak(t, pos_tags=True) for t in corpus()])
    scorer = Scorer(fresh("tg", LONG, vocab=vocab), batch_size=B)
    gold = corpus()[:3]
    # Document 0: sentences 0 and 1 (two proposals each); document 1: sentence 2.
    blocks = [[flat(gold[0]), gold[0]], [right_branching(gold[1]), gold[1]], [gold[2], flat(gold[2])]]
    path = write_proposals(tmp_path / "docs.txt", blocks, documents=[0, 2])
    results = list(score_documents(scorer, read_proposals(path, documents=True), documents_per_batch=2))
    assert [r.block.document for r in results] == [0, 0, 1]

    def tail_logp(tokens: list[str], start: int) -> float:
        (s,) = scorer.score_encoded([encode(vocab, tokens)])
        return math.fsum(s.token_logprobs[start:])

    first = [tail_logp(["(DOC"] + actions.choe_charniak(p, pos_tags=True), 0) for p in blocks[0]]
    assert results[0].bound == pytest.approx(logsumexp(first), rel=1e-9)
    prefix = ["(DOC"] + actions.choe_charniak(blocks[0][int(np.argmax(first))], pos_tags=True)
    second = [tail_logp(prefix + actions.choe_charniak(p, pos_tags=True) + ["DOC)"], len(prefix)) for p in blocks[1]]
    assert results[1].bound == pytest.approx(logsumexp(second), rel=1e-9)
    alone = [tail_logp(["(DOC"] + actions.choe_charniak(p, pos_tags=True) + ["DOC)"], 0) for p in blocks[2]]
    assert results[2].bound == pytest.approx(logsumexp(alone), rel=1e-9)

    single = write_proposals(tmp_path / "single.txt", [[gold[0]], [gold[1]]])
    bounds = [r.bound for r in score_documents(scorer, read_proposals(single, documents=True))]
    (whole,) = score_trees(scorer, [actions.make_document([gold[0], gold[1]])])
    assert math.fsum(bounds) == pytest.approx(whole.logp, rel=1e-6)


def test_bad_proposal_files_are_named(tmp_path):
    scorer = fresh_scorer("tg")
    gold = corpus()[:2]
    other = write_proposals(tmp_path / "mismatch.txt", [[gold[0]], [gold[1], flat(gold[0])]])
    with pytest.raises(ProposalError, match=r"mismatch.txt:4: block 1: the proposal's words differ .* \(line 3\)"):
        list(read_proposals(other))
    (tmp_path / "bad.txt").write_text(f"{gold[0].to_string()}\n\n(S (NP a) b\n")
    with pytest.raises(ProposalError, match=r"bad.txt:3:\d+: block 1"):
        list(read_proposals(tmp_path / "bad.txt"))
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(ProposalError, match="no proposals"):
        list(read_proposals(tmp_path / "empty.txt"))
    with pytest.raises(FileNotFoundError):
        list(read_proposals(tmp_path / "nowhere.txt"))
    (tmp_path / "label.txt").write_text(f"{gold[0].to_string()}\n{Tree('ZZZ', preterminals(gold[0])).to_string()}\n")
    with pytest.raises(ProposalError, match=r"label.txt:2: block 0: .*unknown non-terminal"):
        list(score_proposals(scorer, read_proposals(tmp_path / "label.txt")))



def test_ppl_command(tmp_path, capsys):
    from tgjax.eval.commands import main_ppl

    workdir, _ = trained_workdir()
    path = write_proposals(tmp_path / "p.txt", [b + [b[1]] for b in standard_blocks(6)])
    out = tmp_path / "ppl.jsonl"
    assert main_ppl(["--workdir", str(workdir), "--proposals", str(path), "-o", str(out), "--all-logps",
                     "--batch-size", str(B)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(6))
    assert all(r["num_proposals"] == 3 and r["num_duplicates"] == 1 for r in records)
    for r in records:
        assert r["bound"] == pytest.approx(logsumexp(r["logps"]))
    summary = json.loads((tmp_path / "ppl.jsonl.meta.json").read_text())["summary"]
    words = sum(r["num_words"] for r in records)
    assert summary["word_perplexity_upper_bound"] == pytest.approx(math.exp(-math.fsum(r["bound"] for r in records)
                                                                            / words))
    assert "word_perplexity_upper_bound" in capsys.readouterr().err
    # Counting duplicates is no bound: named for what it is (the file repeats each block's second proposal).
    assert main_ppl(["--workdir", str(workdir), "--proposals", str(path), "-o", str(tmp_path / "dup.jsonl"),
                     "--keep-duplicates", "--batch-size", str(B)]) == 0
    summary = json.loads((tmp_path / "dup.jsonl.meta.json").read_text())["summary"]
    assert summary["word_perplexity_with_duplicates"] < math.exp(-math.fsum(r["bound"] for r in records) / words)
    assert "word_perplexity_upper_bound" not in summary and "total_log_bound" not in summary
    assert "word_perplexity_upper_bound" not in capsys.readouterr().err
    assert main_ppl(["--workdir", str(workdir), "--proposals", str(tmp_path / "nope.txt")]) == 2
    assert "no such proposal file" in capsys.readouterr().err
