"""Hypothesis strategies shared by the tests: random phrase-structure trees.

    from tests.strategies import random_trees

    @given(random_trees(max_depth=5, max_children=4))
    def test_something(tree): ...

Labels are plain (no function tags, no `@`, no `+`), so the trees survive the
reader's normalisation unchanged and every transform's inverse applies.
Words avoid the special tokens `<s>` and `<pad>` (`<unk>` may appear: it is a
terminal, typed PLACEHOLDER).
"""

from __future__ import annotations

import string

from hypothesis import strategies as st

from tgjax.syntax.trees import Child, Tree

PHRASE_LABELS = ("S", "NP", "VP", "PP", "SBAR", "ADJP", "NML", "S_2", "PRN")
POS_TAGS = ("DT", "NN", "NNS", "VBZ", "IN", "JJ", "PRP$", ",", ".", "-LRB-", "-RRB-", "``")
_WORD_CHARS = string.ascii_letters + string.digits + ".,;:'`$%&*-/<>_"
# Words that look like tags or special tokens, to catch confusions.
_TRICKY_WORDS = ("-LRB-", "-RRB-", "-NONE-", "NP", "<unk>", "@NP", "S+VP")

words = st.one_of(
    st.sampled_from(_TRICKY_WORDS),
    st.text(alphabet=_WORD_CHARS, min_size=1, max_size=6),
).filter(lambda w: w not in ("<s>", "<pad>"))


def random_trees(
    max_depth: int = 5,
    max_children: int = 4,
    *,
    preterminals: bool = True,
    labels: tuple[str, ...] = PHRASE_LABELS,
    tags: tuple[str, ...] = POS_TAGS,
) -> st.SearchStrategy[Tree]:
    """Random trees whose root is a phrase, at most `max_depth` levels of phrases deep.

    Args:
      max_depth: maximum number of phrase levels above a word (>= 1).
      max_children: maximum children per phrase (>= 1); phrases are never empty.
      preterminals: every word sits under a POS pre-terminal `(TAG word)`;
        when False, words are direct children of phrases, as after
        `strip_preterminals` (so unary phrases over one word, `(NP w)`, occur).
    """
    if preterminals:
        leaf: st.SearchStrategy[Child] = st.builds(lambda tag, word: Tree(tag, [word]), st.sampled_from(tags), words)
    else:
        leaf = words

    def phrase(depth: int) -> st.SearchStrategy[Tree]:
        child = leaf if depth == 1 else st.one_of(leaf, phrase(depth - 1))
        return st.builds(Tree, st.sampled_from(labels), st.lists(child, min_size=1, max_size=max_children))

    return phrase(max_depth)


def random_bare_trees(max_depth: int = 5, max_children: int = 4) -> st.SearchStrategy[Tree]:
    """`random_trees` without pre-terminals (words directly under phrases)."""
    return random_trees(max_depth, max_children, preterminals=False)
