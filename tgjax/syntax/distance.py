"""Syntactic distance <-> unlabelled binary tree, as ON-LSTM's release parses (NumPy only, no JAX).

Shen et al. (ICLR 2019; thesis §3.3.3) read a tree off an ON-LSTM language
model: at every step t the model's master forget gate f̃_t (a cumax over
chunks) yields a *syntactic distance* d_t = 1 − mean_k f̃_{t,k}, the expected
fraction of the memory that step t erases. A large d_t says "a constituent
starts at word t". The trees are *nested lists* exactly as the release's
parser returns them: a word is a `str`, a constituent a `list` of its
children (two for predicted trees; any number >= 2 for gold trees).

The greedy split (`tree_from_distances`, the release's `build_tree`)
--------------------------------------------------------------------
Top-down, on a span of words w_a .. w_{b-1} with distances d_a .. d_{b-1}:

* one word: the word itself;
* otherwise let m be the **first** index of the maximum of d over the
  **whole** span, its first word included (NumPy's argmax: ties go to the
  leftmost position). The span becomes
  `[tree(w_a..w_{m-1}), [w_m, tree(w_{m+1}..w_{b-1})]]`, where an empty part
  is left out and a one-element list is unwrapped: so m = a gives
  `[w_a, tree(rest)]`, and m = b − 1 gives `[tree(w_a..w_{b-2}), w_{b-1}]`.

So the word with the largest distance *starts* the right constituent and is
attached to the rest of it right-branchingly; this is also the thesis'
description (split into `((x_<i), (x_i, (x_>i)))`). Because the argmax
ranges over the span's first position too, and that position's distance is
the boundary *before* the span (already passed by the parent), real
distances often split the first word off: the rule leans right-branching.
A commented-out variant in the release (argmax over positions 1.. of the span,
split into `[tree(left), tree(right)]`) is not used by it and not offered here.

Not every binary tree is reachable: the right child of a node whose left
child has two or more words always has a single word as its own left child
(`((a b) ((c d) e))` is never produced). `distances_from_tree` gives, for
a reachable tree, canonical distances that rebuild it (d_i = the length of the
greedy span that word i splits, 1 for a word left alone), so
`tree_from_distances(distances_from_tree(t), words) == t`; for an unreachable
tree it raises ValueError naming the node.

Which step's gate goes with which word (`word_distances`)
----------------------------------------------------------
The release feeds `<s> w_1 .. w_n </s>` (hence n + 2 steps) and keeps
`distance[1:-1]`: word w_i's distance is the gate of the step whose **input**
is w_i (computed from x_t = w_i and h_{t-1}), not the step that predicts w_i.
`word_distances(step_distances, num_words, num_leading=1)` does that slice.

Preprocessing (`release_filter`)
--------------------------------
The release (data_ptb.py, `word_tags`) keeps only the leaves whose POS tag is
one of 36 lexical Penn Treebank tags (`RELEASE_WORD_TAGS`): every other leaf
is dropped, which removes punctuation (`. , : `` '' -LRB- -RRB-`), empty
elements (`-NONE-`), and also the symbols `$` and `#`, as well as any tag
outside the PTB's 45 (OntoNotes' `HYPH`, `NFP`, `ADD`, `AFX`, `XX`, ... in
CRAFT and the Benepar-parsed Tale of Two Cities). The gold tree keeps the
remaining constituents with labels removed, empty constituents dropped and
unary chains collapsed (the release's `tree2list`). The LM's input words are
lower-cased with digit runs replaced by `N` (`release_word_form`). Dropped
tags are counted, never silently lost.

Baselines: `right_branching`, `left_branching`, `balanced` (the left half
gets the extra word of an odd span: n − n // 2 words left, n // 2 right).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tgjax.syntax.trees import Tree

__all__ = [
    "RELEASE_WORD_TAGS",
    "Nested",
    "FilteredSentence",
    "balanced",
    "brackets",
    "distances_from_tree",
    "left_branching",
    "nested_from_tree",
    "nested_words",
    "release_filter",
    "release_word_form",
    "right_branching",
    "syntactic_distance",
    "tree_from_distances",
    "tree_from_nested",
    "word_distances",
]

# A word, or a constituent: the list of its children (>= 2 of them).
Nested = str | list
# What `brackets` also reads: the same with tuples for constituents (the logic and ListOps gold trees).
NestedOrTuples = str | list | tuple

# The release's `word_tags` (Ordered-Neurons data_ptb.py): the 36 lexical PTB
# POS tags. Leaves with any other tag (punctuation, -NONE-, $, #, non-PTB
# tags) are dropped before parsing and scoring.
RELEASE_WORD_TAGS = frozenset((
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS", "PDT",
    "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ",
    "WDT", "WP", "WP$", "WRB",
))

_DIGIT_RUN = re.compile(r"[0-9]+")


# ---------------------------------------------------------------------------
# Distances from the master forget gate
# ---------------------------------------------------------------------------


def syntactic_distance(master_forget: np.ndarray) -> np.ndarray:
    """d_t = 1 − mean over chunks of f̃_t: `[..., T, num_chunks]` -> `[..., T]`."""
    master_forget = np.asarray(master_forget, dtype=np.float64)
    if master_forget.ndim < 1 or master_forget.shape[-1] == 0:
        raise ValueError(f"master_forget: expected [..., T, num_chunks] with num_chunks >= 1, "
                         f"got shape {master_forget.shape}")
    return 1.0 - master_forget.mean(axis=-1)


def word_distances(step_distances: Sequence[float] | np.ndarray, num_words: int, num_leading: int = 1) -> np.ndarray:
    """The distances of the words among the steps: `step_distances[num_leading : num_leading + num_words]`.

    Args:
      step_distances: `[T]`, one per input step; step t's distance comes from
        the gate computed while *reading* input t.
      num_words: n, the sentence's words.
      num_leading: inputs before the first word (1 for the release's `<s>`).
    Returns:
      `[n]` float64: word i's distance is that of the step whose input is word i.
    """
    steps = np.asarray(step_distances, dtype=np.float64)
    if steps.ndim != 1:
        raise ValueError(f"step_distances: expected one distance per step, [T], got shape {steps.shape}")
    if num_words < 0 or num_leading < 0 or num_leading + num_words > steps.shape[0]:
        raise ValueError(f"{steps.shape[0]} steps cannot hold {num_leading} leading input(s) and "
                         f"{num_words} words")
    return steps[num_leading:num_leading + num_words]


# ---------------------------------------------------------------------------
# The greedy split and its inverse
# ---------------------------------------------------------------------------


def _checked_distances(distances, words: Sequence[str]) -> np.ndarray:
    values = np.asarray(distances, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"distances: expected one distance per word, [n], got shape {values.shape}")
    if values.shape[0] != len(words):
        raise ValueError(f"{values.shape[0]} distances for {len(words)} words: expected one distance per word "
                         f"(words: {' '.join(map(str, words[:20]))}{' ...' if len(words) > 20 else ''})")
    if not np.all(np.isfinite(values)):
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(f"distance {bad} (word {words[bad]!r}) is {values[bad]}: expected finite distances")
    return values


def tree_from_distances(distances: Sequence[float] | np.ndarray, words: Sequence[str]) -> Nested:
    """The release's top-down greedy split (see the module docstring): nested lists over `words`.

    Args:
      distances: `[n]`, one per word (word i's is the gate of the step reading it).
      words: the n words.
    Returns:
      `words[0]` for one word; `[]` for no words (an empty sentence has no
      tree; the release would fail on it); otherwise binary nested lists.
    Raises:
      ValueError when the lengths differ or a distance is not finite.

    Ordered Memory's `tgjax.ops.ordered_memory.pointer_tree` is another builder,
    not this one: a shift-reduce parse of integer pointer slots, which reaches
    every binary tree, where this top-down split reaches only some (module
    docstring); tests/ops/test_ordered_memory.py shows the difference.
    """
    words = list(words)
    values = _checked_distances(distances, words)
    if not words:
        return []
    root: list = [None]
    # Work items: build span [start, end) and store it at holder[slot]. No recursion, any length.
    work = [(0, len(words), root, 0)]
    while work:
        start, end, holder, slot = work.pop()
        if end - start == 1:
            holder[slot] = words[start]
            continue
        split = start + int(np.argmax(values[start:end]))  # first maximum: ties go left
        if split == start:
            node = [words[split], None]
            work.append((split + 1, end, node, 1))
        elif split == end - 1:
            node = [None, words[split]]
            work.append((start, split, node, 0))
        else:
            right = [words[split], None]
            node = [None, right]
            work.append((start, split, node, 0))
            work.append((split + 1, end, right, 1))
        holder[slot] = node
    return root[0]


def distances_from_tree(tree: Nested) -> np.ndarray:
    """Canonical distances that the greedy split turns back into `tree` (binary, greedy-reachable).

    Word i gets the length of the span it splits in the greedy recursion (1
    when it is a span alone), so it is the strict maximum of its span and
    `tree_from_distances(distances_from_tree(t), nested_words(t)) == t`.

    Raises:
      ValueError for a node that is not binary, or one the greedy split cannot
      produce: `[L, R]` with L of two or more words needs R to be one word or
      `[word, X]`.
    """
    words = nested_words(tree)
    distances = np.ones(len(words), dtype=np.float64)
    if not words:
        return distances
    widths = _widths(tree)
    # Work items: (sub-tree, index of its first word).
    work: list[tuple[Nested, int]] = [(tree, 0)]
    while work:
        node, start = work.pop()
        if isinstance(node, str):
            continue
        if len(node) != 2:
            raise ValueError(f"distances_from_tree: expected a binary tree, found a node with {len(node)} children: "
                             f"{_short(node)}")
        left, right = node
        span = _width(node, widths)
        if isinstance(left, str):  # [w_a, rest]: the split is at the span's first word
            distances[start] = span
            work.append((right, start + 1))
            continue
        split = start + _width(left, widths)
        distances[split] = span
        work.append((left, start))
        if isinstance(right, str):
            continue
        if len(right) != 2 or not isinstance(right[0], str):
            raise ValueError("distances_from_tree: the greedy split cannot produce this node (its left child has "
                             "two or more words, so its right child must be one word or [word, rest]): "
                             f"{_short(node)}")
        work.append((right[1], split + 1))
    return distances


def _widths(tree: NestedOrTuples) -> dict[int, int]:
    """`id(node) -> number of words` for every constituent (lists) of `tree`, in one post-order pass."""
    widths: dict[int, int] = {}
    stack: list[tuple[NestedOrTuples, bool]] = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, str):
            continue
        if children_done:
            widths[id(node)] = sum(1 if isinstance(c, str) else widths[id(c)] for c in node)
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in node)
    return widths


def _width(node: NestedOrTuples, widths: dict[int, int]) -> int:
    return 1 if isinstance(node, str) else widths[id(node)]


def _short(tree: Nested, limit: int = 200) -> str:
    text = repr(tree)
    return text if len(text) <= limit else text[:limit] + " ..."


def nested_words(tree: Nested) -> list[str]:
    """The words of a nested-list tree, left to right."""
    found: list[str] = []
    stack: list[Nested] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found.append(node)
        else:
            stack.extend(reversed(node))
    return found


# ---------------------------------------------------------------------------
# Spans (the release's get_brackets)
# ---------------------------------------------------------------------------


def brackets(tree: NestedOrTuples, *, include_root: bool = False) -> set[tuple[int, int]]:
    """The constituents' word spans `(start, end)` (end exclusive) of length >= 2, as a set.

    As the release's `get_brackets`: every child of every node that covers two
    or more words; the whole-sentence span only with `include_root`. Constituents
    may be lists or tuples (the logic and ListOps gold trees); the walk is
    iterative, so deep trees do not hit the recursion limit.
    """
    spans: set[tuple[int, int]] = set()
    widths = _widths(tree)
    # Work items: (node, start); a node's span is recorded by its parent.
    stack: list[tuple[NestedOrTuples, int]] = [(tree, 0)]
    while stack:
        node, start = stack.pop()
        if isinstance(node, str):
            continue
        position = start
        for child in node:
            width = _width(child, widths)
            if width > 1:
                spans.add((position, position + width))
            stack.append((child, position))
            position += width
        if include_root and position - start > 1 and node is tree:
            spans.add((start, position))
    return spans


# ---------------------------------------------------------------------------
# Baseline trees
# ---------------------------------------------------------------------------


def _check_words(words: Sequence[str]) -> list[str]:
    words = list(words)
    if any(not isinstance(w, str) for w in words):
        raise TypeError("words must be strings")
    return words


def right_branching(words: Sequence[str]) -> Nested:
    """`[w0, [w1, [w2, w3]]]`; one word -> the word, none -> `[]`."""
    words = _check_words(words)
    if not words:
        return []
    tree: Nested = words[-1]
    for word in reversed(words[:-1]):
        tree = [word, tree]
    return tree


def left_branching(words: Sequence[str]) -> Nested:
    """`[[[w0, w1], w2], w3]`; one word -> the word, none -> `[]`."""
    words = _check_words(words)
    if not words:
        return []
    tree: Nested = words[0]
    for word in words[1:]:
        tree = [tree, word]
    return tree


def balanced(words: Sequence[str]) -> Nested:
    """Split in the middle, recursively; the left part takes n − n // 2 words (the extra one when n is odd)."""
    words = _check_words(words)
    if not words:
        return []
    root: list = [None]
    work = [(0, len(words), root, 0)]
    while work:
        start, end, holder, slot = work.pop()
        if end - start == 1:
            holder[slot] = words[start]
            continue
        middle = start + (end - start) - (end - start) // 2
        node = [None, None]
        holder[slot] = node
        work.append((start, middle, node, 0))
        work.append((middle, end, node, 1))
    return root[0]


# ---------------------------------------------------------------------------
# Tree <-> nested lists, and the release's preprocessing
# ---------------------------------------------------------------------------


_DESCEND = object()  # `_collapsed`'s leaf rule: this child is a constituent to rebuild


def _collapsed(root: Tree, leaf: Callable[[Tree | str], str | None | object]) -> Nested:
    """`root` as nested lists, rebuilt bottom-up without recursion (trees can be deeper than Python's stack).

    `leaf(child)` says what each node is: a word to keep (the string), one to drop (None), or `_DESCEND` for a
    constituent whose children are rebuilt in turn. A constituent left with one child becomes that child (unary
    chains collapse); one left with none disappears.
    """
    result: list = []
    # Frames: (children left to visit, rebuilt children so far).
    stack: list[tuple[Iterable, list]] = [(iter([root]), result)]
    while stack:
        pending, rebuilt = stack[-1]
        for child in pending:
            kept = leaf(child)
            if kept is _DESCEND:
                stack.append((iter(child.children), []))
                break
            if kept is not None:
                rebuilt.append(kept)
        else:
            stack.pop()
            if stack:
                _, parent = stack[-1]
                if len(rebuilt) == 1:
                    parent.append(rebuilt[0])
                elif rebuilt:
                    parent.append(rebuilt)
    return result[0] if result else []


def nested_from_tree(tree: Tree) -> Nested:
    """Labels removed, pre-terminals replaced by their words, unary chains collapsed.

    `(S (NP (DT the) (NN dog)) (VP (VBZ barks)))` -> `[["the", "dog"], "barks"]`.
    A tree without pre-terminals is read the same way (a word is a word).
    """
    return _collapsed(tree, lambda node: node if isinstance(node, str) else _DESCEND)


def tree_from_nested(tree: Nested, label: str = "X", tag: str | None = "XX") -> Tree:
    """A `Tree` from nested lists: every constituent labelled `label`, every word under `(tag word)`.

    With `tag=None` words are bare children. One word gives `(tag word)` (no
    constituent; with `tag=None`, `(label word)`). Raises ValueError for `[]`.
    """
    if isinstance(tree, list) and not tree:
        raise ValueError("tree_from_nested: an empty tree has no words")

    def leaf(word: str):
        return Tree(tag, [word]) if tag is not None else word

    if isinstance(tree, str):
        return Tree(tag, [tree]) if tag is not None else Tree(label, [tree])
    top = Tree(label, [])
    stack: list[tuple[list, Tree]] = [(tree, top)]
    while stack:
        node, built = stack.pop()
        for child in node:
            if isinstance(child, str):
                built.children.append(leaf(child))
            else:
                sub = Tree(label, [])
                built.children.append(sub)
                stack.append((child, sub))
    return top


def release_word_form(word: str) -> str:
    """The LM's form of a word in the release: lower-cased, every digit run -> `N` (`Rose 1,250` -> `rose N,N`)."""
    return _DIGIT_RUN.sub("N", word.lower())


@dataclasses.dataclass
class FilteredSentence:
    """One gold tree after the release's preprocessing.

    Attributes:
      words: the kept words, as written in the treebank.
      tree: the gold tree over them as nested lists (labels removed, unary
        chains collapsed); a word for one word, `[]` for none.
      dropped_tags: how many leaves of each other tag were removed.
    """

    words: list[str]
    tree: Nested
    dropped_tags: collections.Counter

    @property
    def num_words(self) -> int:
        return len(self.words)


def release_filter(tree: Tree, word_tags: frozenset[str] | set[str] = RELEASE_WORD_TAGS,
                   where: str = "tree") -> FilteredSentence:
    """Keeps the leaves whose POS tag is in `word_tags` (the release's 36) and the constituents above them.

    Raises:
      ValueError (naming `where` and the word) for a word that is not under a
      POS pre-terminal: its tag, and so whether to keep it, is unknown.
    """
    dropped: collections.Counter = collections.Counter()
    kept_words: list[str] = []

    def leaf(node: Tree | str) -> str | None | object:
        if isinstance(node, str):
            raise ValueError(f"{where}: the word {node!r} is not under a POS tag; expected every word "
                             "as (TAG word) to decide which to keep (punctuation and symbols are dropped)")
        if not node.is_preterminal():
            return _DESCEND
        if node.label in word_tags:
            kept_words.append(node.children[0])
            return node.children[0]
        dropped[node.label] += 1
        return None

    if tree.is_preterminal():  # a one-word tree: (NN hello)
        if tree.label in word_tags:
            return FilteredSentence([tree.children[0]], tree.children[0], dropped)
        dropped[tree.label] += 1
        return FilteredSentence([], [], dropped)
    gold = _collapsed(tree, leaf)
    return FilteredSentence(kept_words, gold, dropped)
