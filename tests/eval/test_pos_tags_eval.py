"""Trees without POS tags through evaluation: sampled trees score as sampled, duplicates, mixed files refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tgjax
from tests.infer.test_scoring import trained_workdir
from tgjax.infer.perplexity import read_proposals

BARE = "(S (NP the dog) (VP barks))"
TAGGED = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"


def has_unary_constituent_over_a_word(tree) -> bool:
    """A node other than the root whose only child is a word: what a tagged reading would drop."""
    stack = [c for c in tree.children if not isinstance(c, str)]
    while stack:
        node = stack.pop()
        if len(node.children) == 1 and isinstance(node.children[0], str):
            return True
        stack.extend(c for c in node.children if not isinstance(c, str))
    return False


def test_duplicates_differ_in_unary_constituents_without_tags(tmp_path):
    """`(S (NP a) b)` and `(S a b)` are two trees without tags; read as tagged they would be one."""
    path = tmp_path / "p.txt"
    path.write_text("(S (NP a) b)\n(S a b)\n(S (NP a) b)\n")
    (block,) = read_proposals(path)  # auto: "b" is not alone, so no tags
    assert (block.num_proposals, block.num_duplicates, block.lines, block.pos_tags) == (2, 1, [1, 2], False)
    (tagged,) = read_proposals(path, pos_tags=True)  # the tagged reading: NP is a tag, all three the same
    assert (tagged.num_proposals, tagged.num_duplicates) == (1, 2)


def test_sampled_trees_score_as_sampled(tmp_path, capsys):
    """`tgjax sample` writes trees without tags; `eval score --pos-tags no` gives each the sampler's own log p."""
    from tgjax.eval.commands import main_score

    workdir, _ = trained_workdir()
    samples = tgjax.load(workdir).sampler(max_length=24, batch_size=16).sample(16, seed=3)
    # As `tgjax sample` writes them: one bracketed tree per line.
    path = tmp_path / "samples.txt"
    path.write_text("".join(s.tree.to_string() + "\n" for s in samples))
    assert any(has_unary_constituent_over_a_word(s.tree) for s in samples)  # else the test could not fail

    out = tmp_path / "scores.jsonl"
    assert main_score(["--workdir", str(workdir), "--input", str(path), "--pos-tags", "no", "-o", str(out),
                       "--seq-len", "64", "--mem-len", "64", "--batch-size", "4"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    np.testing.assert_allclose([r["logp"] for r in records], [s.log_prob for s in samples], rtol=1e-4)
    assert [r["num_predictions"] for r in records] == [len(s.actions) for s in samples]
    summary = json.loads((tmp_path / "scores.jsonl.meta.json").read_text())["summary"]
    assert summary["pos_tags"] == "no"
    assert "pos_tags" in capsys.readouterr().err


def test_parse_needs_gold_trees_with_tags(tmp_path):
    """EVALB puts the gold tags on the parses: a gold tree without them is refused, naming tree and word."""
    from tgjax.eval.parse import _read_gold

    path = tmp_path / "gold.txt"
    path.write_text(f"{TAGGED}\n{BARE}\n")
    with pytest.raises(ValueError, match=rf"^{path}: tree 2: the word 'the' is not alone under a POS tag"):
        _read_gold(str(path), "test", None)
    gold, where = _read_gold(str(path), "test", 1)  # the first tree alone is tagged
    assert len(gold) == 1 and where == str(path)


def test_score_says_what_it_decided_and_refuses_a_mixed_file(tmp_path, capsys):
    from tgjax.eval.commands import main_score

    workdir, _ = trained_workdir()
    tagged = tmp_path / "tagged.txt"
    tagged.write_text(f"{TAGGED}\n{TAGGED}\n")
    out = tmp_path / "tagged.jsonl"
    assert main_score(["--workdir", str(workdir), "--input", str(tagged), "-o", str(out), "--batch-size", "4"]) == 0
    assert json.loads((tmp_path / "tagged.jsonl.meta.json").read_text())["summary"]["pos_tags"] == "yes (auto)"
    capsys.readouterr()
    mixed = tmp_path / "mixed.txt"
    mixed.write_text(f"{TAGGED}\n\n{BARE}\n")
    assert main_score(["--workdir", str(workdir), "--input", str(mixed), "--batch-size", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tgjax eval score: error: {mixed}:3: the word 'the' is not alone")
    assert "--pos-tags yes|no" in err[0]
