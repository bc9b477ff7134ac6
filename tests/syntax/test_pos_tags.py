"""POS tags decided per file: the actions of trees with and without tags, and files that do not say which."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.strategies import random_trees
from tgjax.syntax import actions as A
from tgjax.syntax import pos_tags as P
from tgjax.syntax.trees import parse, strip_preterminals

BARE = "(S (NP the dog) (VP barks))"
TAGGED = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"


def test_a_tree_without_tags_keeps_its_unary_constituents():
    bare = parse(BARE)
    assert A.choe_charniak(bare, pos_tags=False) == ["(S", "(NP", "the", "dog", "NP)", "(VP", "barks", "VP)", "S)"]
    # Read as tagged, (VP barks) would be a POS tag over "barks" and vanish: a different tree.
    assert A.choe_charniak(bare, pos_tags=True) == ["(S", "(NP", "the", "dog", "NP)", "barks", "S)"]
    assert A.choe_charniak(parse(TAGGED), pos_tags=True) == A.choe_charniak(bare, pos_tags=False)


def test_which_word_makes_a_tree_untagged():
    assert P.untagged_word(parse(TAGGED)) is None and P.is_tagged(parse(TAGGED))
    assert P.untagged_word(parse(BARE)) == "the"
    assert P.untagged_word(parse("(S (NP (DT the) (NN dog)) (VP barks loudly))")) == "barks"
    assert P.is_tagged(parse("(UH hello)"))  # one word alone under the root
    assert P.is_tagged(parse("(S (VP barks))"))  # alone: as far as one tree can tell, a tag


def test_resolve_yes_no_auto_by_hand():
    bare, tagged = parse(BARE), parse(TAGGED)
    assert P.resolve("auto", [(tagged, "f:1"), (tagged, "f:2")]) is True
    assert P.resolve("auto", [(bare, "f:1"), (bare, "f:2")]) is False
    assert P.resolve("no", [(tagged, "f:1")]) is False
    assert P.resolve(True, [(bare, "f:1")]) is True  # a decision already made is not checked again
    with pytest.raises(P.PosTagError, match=r"^f:2: the word 'the' is not alone under a node of its own; expected "
                                            r"every word under a POS tag"):
        P.resolve("yes", [(tagged, "f:1"), (bare, "f:2")])
    with pytest.raises(ValueError, match="pos_tags: expected one of yes, no, auto"):
        P.resolve("maybe", [])


def test_a_file_that_mixes_both_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_text(f"{TAGGED}\n{TAGGED}\n\n(S\n  (NP the dog) (VP barks))\n")
    with pytest.raises(P.PosTagError, match=rf"^{path}:4: the word 'the' is not alone under a node \(no POS tags\), "
                                            rf"but in the file's first tree \({path}:1\) every word is alone"):
        P.resolve_file("auto", path)
    with pytest.raises(P.PosTagError, match=rf"^{path}:4: the word 'the'"):
        P.resolve_file("yes", path)
    assert P.resolve_file("no", path) is False  # said explicitly: every node is a constituent
    untagged_first = tmp_path / "untagged_first.txt"
    untagged_first.write_text(f"{BARE}\n{TAGGED}\n")
    with pytest.raises(P.PosTagError, match=rf"^{untagged_first}:2: every word is alone under a node of its own"):
        P.resolve_file("auto", untagged_first)


@settings(deadline=None, max_examples=50)
@given(random_trees(max_depth=5, max_children=4))
def test_tagged_actions_are_those_of_the_stripped_tree(tree):
    """Dropping tags from a tagged tree = reading the tree with its tags stripped as a tree without tags."""
    assert P.is_tagged(tree)
    assert A.choe_charniak(tree, pos_tags=True) == A.choe_charniak(strip_preterminals(tree), pos_tags=False)
    assert A.tree_from_choe_charniak(A.choe_charniak(strip_preterminals(tree), pos_tags=False)) \
        == strip_preterminals(tree)


def test_training_reads_a_file_without_tags_with_its_unary_constituents(tmp_path):
    """The pipeline decides per corpus: tagged treebanks as before, tag-free ones keep (VP barks)."""
    from tgjax.data.pipeline import Pipeline, PipelineConfig

    def pipeline(text: str) -> Pipeline:
        path = tmp_path / "train.txt"
        path.write_text(text)
        return Pipeline(PipelineConfig(corpus=str(path), seq_len=32, mem_len=32, batch_size=2))

    bare = pipeline(f"{BARE}\n{BARE}\n")
    tagged = pipeline(f"{TAGGED}\n{TAGGED}\n")
    assert (bare.pos_tags, tagged.pos_tags) == (False, True)
    expected = A.choe_charniak(parse(BARE), pos_tags=False)
    for p in (bare, tagged):  # the same tree, so the same sequence: BOS then the ids of the actions
        assert p.vocab.decode(p.encoded.sequences[0][0][1:].tolist()) == expected
    with pytest.raises(P.PosTagError, match=r"train.txt: tree 2: the word 'the' is not alone under a node"):
        pipeline(f"{TAGGED}\n{BARE}\n")
