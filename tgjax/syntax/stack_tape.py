"""Pushdown Layers stack tapes: attachment labels and per-prefix token depths.

Murty et al. (EMNLP 2023), §3.1 and Algorithm 1. A Pushdown LM reads tokens
left to right and keeps a stack of completed constituents. After token k is
read it makes one *attachment decision* r_k:

* ``r_k == k``: shift only; token k is pushed as a new constituent of depth 0;
* ``r_k == j < k``: shift, then reduce: pop stack elements, merging each with
  the constituent that holds k, until the popped element is the one whose
  *rightmost* token is j (the paper selects a constituent by attending to its
  rightmost token). Every reduce adds one to the depth of every token of the
  merged constituent.

The stack tape ``W_k`` holds, for every token j <= k, its depth in the stack
after token k has been processed. The paper's example (Fig. 2): for the parse
``[[The dog] [is happy]]`` the tape is ``[1, 1, 0]`` after "is" and, once
"happy" attaches to "dog" (``r_3 = 1``), ``[2, 2, 2, 2]``.

Conventions used throughout this module
---------------------------------------
* Indices are 0-based (the paper counts from 1): ``attach[k] = k`` is a shift.
* ``depths[k, j]`` is ``W_k[j]``: the tape *after* token k (and its
  attachment r_k), so row k is the tape that query position k uses in
  attention; position k then predicts token k + 1 and r_{k+1} (eq. 7 writes
  this as token k conditioned on ``W_{k-1}``). The authors' release lays its
  tape out the same way: its row i holds the depths after token i.
* ``depths`` is lower-triangular; entries above the diagonal (tokens not yet
  read) are 0 by default (the tape starts as all zeros, as in the release);
  pass ``fill_value=-1`` to mark them instead. The causal mask hides them.
* Trees are *unlabelled binary bracketings* over token indices: a token index
  (``int``) or a pair ``(left, right)`` of bracketings, e.g. the example above
  is ``((0, 1), (2, 3))``. A *forest* is a list of bracketings whose leaves,
  read left to right, are 0, 1, 2, ... (several sentences in one window). A
  forest's trees are never reduced with one another.
* Every binary node is one reduce; its right end is the step at which it is
  built. So token k reduces iff it is the right end of some node, and the
  chain of nodes built at step k ends with the one whose span starts
  leftmost; its left child is the last element popped, so ``attach[k]`` is
  that left child's right end.

Sub-words. For a sub-word sequence (words split into pieces), each word's
pieces form a right-branching subtree, ``(ab, (ra, (ca, dabra)))`` for
"abracadabra", which is the shape the paper's Appendix C undoes when it merges
sub-word leaves back into words. ``branching="left"`` is offered as well.

ROOT in context windows (Appendix B). A window may hold several sentences and
must start at a sentence boundary. A ROOT token is prepended to every sentence
so that "the attachment decision of the final word is made to this ROOT
token": each sentence becomes ``(ROOT, S)``; ROOT itself shifts (its r is its
own index), the sentence's last token attaches to ROOT, and the finished
sentence stays on the stack as one element that later sentences never reduce
with (their tokens keep their final depths). With ``eos=True`` an end token
follows each sentence, ``(ROOT, (S, EOS))``, and it is the end token that
attaches to ROOT: that is the authors' sentence-level release, where ``<s>``
plays ROOT and ``<eos>`` is labelled 0.

Everything here is NumPy / pure Python (no JAX): it runs in input workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import numpy as np

from tgjax.syntax.trees import Tree

Bracketing = int | tuple["Bracketing", "Bracketing"]
Forest = list[Bracketing]

# Roles of the positions of a context window (`WindowStackTape.roles`).
ROLE_TOKEN = 0  # a word or sub-word token of a sentence
ROLE_ROOT = 1  # the ROOT token prepended to a sentence
ROLE_EOS = 2  # the end token appended to a sentence (``eos=True``)


@dataclasses.dataclass(frozen=True)
class StackTape:
    """Ground-truth Pushdown supervision for one token sequence of length n.

    Attributes:
      attach: ``[n]`` int32; ``attach[k]`` is r_k: ``k`` for shift only, else
        the rightmost token (``< k``) of the stack element that token k's
        reduces stop at.
      depths: ``[n, n]`` int32; ``depths[k, j]`` is the depth of token j in the
        stack tape after token k is processed (``W_k[j]``); entries with
        ``j > k`` hold the fill value (0 unless asked otherwise).
    """

    attach: np.ndarray
    depths: np.ndarray

    def __len__(self) -> int:
        return int(self.attach.shape[0])


@dataclasses.dataclass(frozen=True)
class WindowStackTape:
    """A `StackTape` for a context window of sentences, with its ROOT/EOS layout.

    Attributes (n = tokens + ROOTs + EOSs of the window):
      attach: ``[n]`` int32, as in `StackTape`.
      depths: ``[n, n]`` int32, as in `StackTape`.
      roles: ``[n]`` int32, `ROLE_TOKEN`, `ROLE_ROOT` or `ROLE_EOS` per position.
      sentence_ids: ``[n]`` int32, the sentence of the window each position is in.
      token_index: ``[n]`` int32; for `ROLE_TOKEN` positions the index of the
        token within its sentence's tokens, -1 for ROOT and EOS positions.
    """

    attach: np.ndarray
    depths: np.ndarray
    roles: np.ndarray
    sentence_ids: np.ndarray
    token_index: np.ndarray

    def __len__(self) -> int:
        return int(self.attach.shape[0])


# ---------------------------------------------------------------------------
# Bracketings.


def tree_to_bracketing(
    tree: Tree | str, *, nary: Literal["error", "right", "left"] = "error"
) -> Bracketing:
    """The unlabelled binary bracketing of a tree, over word indices 0..n-1.

    Labels are dropped and unary nodes (pre-terminals ``(DT the)``, unary
    chains) are collapsed: a reduce always merges two constituents.

    Args:
      tree: a `Tree` (or a bare word, giving the single leaf 0).
      nary: what to do with a node of more than two children: ``"error"``
        (the tree must already be binarised), or fold its children
        right-branching ``(c0, (c1, c2))`` (as the authors' release does) or
        left-branching ``((c0, c1), c2)``.
    Raises:
      ValueError: an empty node, or an n-ary node with ``nary="error"``.
    """
    if nary not in ("error", "right", "left"):
        raise ValueError(f"nary must be 'error', 'right' or 'left', got {nary!r}")
    next_leaf = 0
    results: list[Bracketing] = []
    # Iterative post-order: (node, expanded?) so that deep trees do not hit
    # the recursion limit.
    todo: list[tuple[Tree | str, bool]] = [(tree, False)]
    while todo:
        node, expanded = todo.pop()
        if isinstance(node, str):
            results.append(next_leaf)
            next_leaf += 1
            continue
        if not isinstance(node, Tree):
            raise ValueError(f"expected a Tree or a word, got {type(node).__name__}: {node!r}")
        if not node.children:
            raise ValueError(f"node ({node.label}) has no children; every node needs a word below it")
        if not expanded:
            if len(node.children) > 2 and nary == "error":
                raise ValueError(
                    f"node ({node.label} ...) has {len(node.children)} children; expected a "
                    f"binarised tree (at most 2 children per node), or pass nary='right'/'left'"
                )
            todo.append((node, True))
            todo.extend((child, False) for child in reversed(node.children))
            continue
        kids = results[len(results) - len(node.children) :]
        del results[len(results) - len(node.children) :]
        results.append(_fold(kids, nary))
    assert len(results) == 1
    return results[0]


def _fold(items: list[Bracketing], direction: str) -> Bracketing:
    """Folds 1+ bracketings into one binary bracketing, right- or left-branching."""
    if direction == "left":
        out = items[0]
        for item in items[1:]:
            out = (out, item)
        return out
    out = items[-1]
    for item in reversed(items[:-1]):
        out = (item, out)
    return out


def bracketing_from_spans(n: int, spans: Iterable[tuple[int, int]]) -> Bracketing:
    """Rebuilds a binary bracketing over ``n`` leaves from its inclusive node spans.

    The spans must be those of a full binary tree: ``n - 1`` distinct nested
    spans ``(first, last)`` with ``first < last``, including ``(0, n - 1)``.
    A node's left child is the longest other span that starts where it does.

    Raises:
      ValueError: the spans do not form a binary tree over ``n`` leaves.
    """
    span_set = {(int(lo), int(hi)) for lo, hi in spans}
    if len(span_set) != max(n - 1, 0) or any(not 0 <= lo < hi < n for lo, hi in span_set):
        raise ValueError(f"{len(span_set)} spans cannot form a binary tree over {n} leaves: {sorted(span_set)}")
    if n == 1:
        return 0
    if (0, n - 1) not in span_set:
        raise ValueError(f"spans do not include the root span (0, {n - 1})")
    ends_by_start: dict[int, list[int]] = {}
    for lo, hi in sorted(span_set):
        ends_by_start.setdefault(lo, []).append(hi)
    results: list[Bracketing] = []
    todo: list[tuple[int, int, bool]] = [(0, n - 1, False)]
    while todo:
        lo, hi, expanded = todo.pop()
        if lo == hi:
            results.append(lo)
        elif expanded:
            right = results.pop()
            left = results.pop()
            results.append((left, right))
        else:
            mid = max([e for e in ends_by_start.get(lo, []) if e < hi], default=lo)
            if mid + 1 < hi and (mid + 1, hi) not in span_set:
                raise ValueError(f"spans do not form a binary tree: ({lo}, {hi}) has no right child ({mid + 1}, {hi})")
            todo.extend([(lo, hi, True), (mid + 1, hi, False), (lo, mid, False)])
    return results[0]


def _as_forest(trees: Bracketing | Sequence[Bracketing]) -> Forest:
    if isinstance(trees, (int, np.integer, tuple)):
        return [trees]
    return list(trees)


def _node_arrays(trees: Bracketing | Sequence[Bracketing]) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Span arrays of every binary node of a forest, and its number of leaves.

    Returns:
      ``(n, starts, splits, ends)``: ``n`` leaves; for each binary node, its
      first leaf, the last leaf of its left child, and its last leaf (each
      ``[num_nodes]`` int64).
    Raises:
      ValueError: the leaves, left to right, are not 0, 1, ..., n-1, or a
        node is not a pair.
    """
    starts: list[int] = []
    splits: list[int] = []
    ends: list[int] = []
    next_leaf = 0
    for tree in _as_forest(trees):
        spans: list[tuple[int, int]] = []
        todo: list[tuple[Bracketing, bool]] = [(tree, False)]
        while todo:
            node, expanded = todo.pop()
            if isinstance(node, (int, np.integer)) and not isinstance(node, bool):
                if int(node) != next_leaf:
                    raise ValueError(f"leaves must be 0, 1, 2, ... left to right; found {int(node)} "
                                     f"where {next_leaf} was expected")
                spans.append((next_leaf, next_leaf))
                next_leaf += 1
            elif isinstance(node, tuple) and len(node) == 2:
                if expanded:
                    right = spans.pop()
                    left = spans.pop()
                    starts.append(left[0])
                    splits.append(left[1])
                    ends.append(right[1])
                    spans.append((left[0], right[1]))
                else:
                    todo.append((node, True))
                    todo.append((node[1], False))
                    todo.append((node[0], False))
            else:
                raise ValueError(f"a bracketing node is a token index or a pair, got {node!r}")
    as_array = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    return next_leaf, as_array(starts), as_array(splits), as_array(ends)


def num_leaves(trees: Bracketing | Sequence[Bracketing]) -> int:
    """Number of tokens of a bracketing or forest."""
    return _node_arrays(trees)[0]


def bracketing_spans(trees: Bracketing | Sequence[Bracketing]) -> set[tuple[int, int]]:
    """The inclusive ``(first, last)`` token spans of all binary nodes of a bracketing or forest."""
    _, starts, _, ends = _node_arrays(trees)
    return set(zip(starts.tolist(), ends.tolist()))


def format_bracketing(tree: Bracketing, tokens: Sequence[str] | None = None) -> str:
    """``((The dog) (is happy))``-style text of a bracketing (token indices if no tokens)."""
    if isinstance(tree, tuple):
        return f"({format_bracketing(tree[0], tokens)} {format_bracketing(tree[1], tokens)})"
    return str(tokens[tree]) if tokens is not None else str(tree)


def _check_word_index(word_index: np.ndarray, num_words: int | None = None) -> np.ndarray:
    word_index = np.asarray(word_index)
    if word_index.ndim != 1 or not np.issubdtype(word_index.dtype, np.integer):
        raise ValueError(f"word_index must be a 1-D integer array, got shape {word_index.shape} "
                         f"dtype {word_index.dtype}")
    if word_index.size == 0:
        raise ValueError("word_index is empty")
    steps = np.diff(word_index)
    if word_index[0] != 0 or np.any((steps != 0) & (steps != 1)):
        bad = 0 if word_index[0] != 0 else int(np.argmax((steps != 0) & (steps != 1))) + 1
        raise ValueError(
            f"word_index must start at 0 and step by 0 or 1 (each word's pieces contiguous); "
            f"bad entry at position {bad}: {word_index.tolist()}"
        )
    if num_words is not None and int(word_index[-1]) + 1 != num_words:
        raise ValueError(f"word_index covers {int(word_index[-1]) + 1} words but the tree has {num_words}")
    return word_index


def expand_subwords(
    tree: Bracketing,
    word_index: np.ndarray,
    *,
    branching: Literal["right", "left"] = "right",
) -> Bracketing:
    """Replaces each word leaf by a subtree over its sub-word tokens.

    Args:
      tree: a bracketing over word indices ``0..num_words-1``.
      word_index: ``[n_tokens]`` int; the word each token belongs to (starts at
        0, steps by 0 or 1, ends at ``num_words - 1``).
      branching: shape of a word's pieces: right-branching
        ``(p0, (p1, p2))`` (the paper's Appendix C) or left ``((p0, p1), p2)``.
    Returns:
      A bracketing over token indices ``0..n_tokens-1``.
    """
    if branching not in ("right", "left"):
        raise ValueError(f"branching must be 'right' or 'left', got {branching!r}")
    word_index = _check_word_index(word_index, num_leaves(tree))
    counts = np.bincount(word_index)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])

    def leaf(word: int) -> Bracketing:
        first = int(offsets[word])
        return _fold(list(range(first, first + int(counts[word]))), branching)

    return _map_leaves(tree, leaf)


# ---------------------------------------------------------------------------
# Labels and tapes from a tree (vectorised).


def attachments(trees: Bracketing | Sequence[Bracketing]) -> np.ndarray:
    """The attachment label r_k of every token of a bracketing or forest.

    Returns:
      ``[n]`` int32: ``k`` where token k only shifts (it is a left child, or a
      tree's first token), else the right end of the left child of the
      largest node whose last token is k (the last element popped).
    """
    n, starts, splits, ends = _node_arrays(trees)
    attach = np.arange(n, dtype=np.int32)
    if starts.size:
        # Among the nodes built at step e (right end e), the outermost is the
        # one that starts leftmost: sort by (end, start), keep the first per end.
        order = np.lexsort((starts, ends))
        sorted_ends = ends[order]
        first = np.flatnonzero(np.r_[True, sorted_ends[1:] != sorted_ends[:-1]])
        attach[sorted_ends[first]] = splits[order][first]
    return attach


def depth_matrix(trees: Bracketing | Sequence[Bracketing], *, fill_value: int = 0) -> np.ndarray:
    """Per-prefix token depths of a bracketing or forest.

    ``depths[k, j]`` counts the nodes that contain token j and are complete
    after token k (node end <= k): those are exactly the reduces j has taken
    part in by step k. Built with a 2-D difference array: each node
    ``[s, e]`` adds 1 to ``depths[e:, s:e+1]``.

    Returns:
      ``[n, n]`` int32, lower-triangular; ``fill_value`` above the diagonal.
    """
    n, starts, _, ends = _node_arrays(trees)
    diff = np.zeros((n + 1, n + 1), dtype=np.int32)
    np.add.at(diff, (ends, starts), 1)
    np.add.at(diff, (ends, ends + 1), -1)
    depths = np.cumsum(np.cumsum(diff, axis=1), axis=0)[:n, :n].astype(np.int32)
    if fill_value != 0:
        depths[np.triu_indices(n, k=1)] = fill_value
    return depths


def stack_tape(
    tree: Tree | Bracketing | Sequence[Bracketing],
    *,
    word_index: np.ndarray | None = None,
    subword_branching: Literal["right", "left"] = "right",
    nary: Literal["error", "right", "left"] = "error",
    fill_value: int = 0,
) -> StackTape:
    """Attachment labels and stack tapes of one tree (or forest) over its tokens.

    Args:
      tree: a `Tree` (converted with `tree_to_bracketing`), a bracketing over
        word indices, or a forest of them.
      word_index: optional ``[n_tokens]``; when the tokens are sub-words, the
        word each token belongs to (see `expand_subwords`). Not for forests.
      subword_branching: shape of each word's pieces.
      nary: passed to `tree_to_bracketing` for `Tree` input.
      fill_value: the value of ``depths`` above the diagonal.
    Returns:
      `StackTape` with ``attach [n_tokens]`` and ``depths [n_tokens, n_tokens]``.
    """
    bracketing: Bracketing | Sequence[Bracketing]
    bracketing = tree_to_bracketing(tree, nary=nary) if isinstance(tree, Tree) else tree
    if word_index is not None:
        if isinstance(bracketing, list):
            raise ValueError("word_index is for a single tree; use window_stack_tape for several sentences")
        bracketing = expand_subwords(bracketing, word_index, branching=subword_branching)
    return StackTape(attach=attachments(bracketing), depths=depth_matrix(bracketing, fill_value=fill_value))


def window_stack_tape(
    sentences: Sequence[Tree | Bracketing],
    *,
    word_indices: Sequence[np.ndarray | None] | None = None,
    root: bool = True,
    eos: bool = False,
    subword_branching: Literal["right", "left"] = "right",
    nary: Literal["error", "right", "left"] = "error",
    fill_value: int = 0,
) -> WindowStackTape:
    """Stack tapes for a context window of whole sentences (paper Appendix B).

    Each sentence ``S`` becomes one tree of the window's forest: ``(ROOT, S)``
    with ``root=True`` (ROOT shifts; the sentence's last token attaches to
    ROOT), ``(ROOT, (S, EOS))`` with ``eos=True`` as well (EOS attaches to
    ROOT, as ``<eos>`` to ``<s>`` in the authors' release), ``(S, EOS)`` with
    only ``eos``, or ``S`` alone. Sentences are never reduced with each other,
    so a finished sentence keeps its tokens' final depths for the rest of the
    window. The window layout is, per sentence, ``[ROOT] tokens... [EOS]``.

    Args:
      sentences: trees (`Tree` or word-level bracketings), in window order.
      word_indices: optional, one ``[n_tokens_i]`` word map (or None) per
        sentence for sub-word tokens.
    Returns:
      `WindowStackTape` with ``attach [n]``, ``depths [n, n]``, ``roles [n]``,
      ``sentence_ids [n]``, ``token_index [n]`` (n = tokens + ROOTs + EOSs).
    """
    if word_indices is not None and len(word_indices) != len(sentences):
        raise ValueError(f"{len(word_indices)} word_index maps for {len(sentences)} sentences")
    forest: Forest = []
    roles: list[np.ndarray] = []
    sentence_ids: list[np.ndarray] = []
    token_index: list[np.ndarray] = []
    offset = 0
    for i, sentence in enumerate(sentences):
        tree = tree_to_bracketing(sentence, nary=nary) if isinstance(sentence, Tree) else sentence
        word_index = None if word_indices is None else word_indices[i]
        if word_index is not None:
            tree = expand_subwords(tree, word_index, branching=subword_branching)
        n_tokens = num_leaves(tree)
        first_token = offset + int(root)
        unit: Bracketing = _shift_leaves(tree, first_token)
        unit_roles = [ROLE_TOKEN] * n_tokens
        if eos:
            unit = (unit, first_token + n_tokens)
            unit_roles.append(ROLE_EOS)
        if root:
            unit = (offset, unit)
            unit_roles.insert(0, ROLE_ROOT)
        forest.append(unit)
        unit_roles_arr = np.asarray(unit_roles, dtype=np.int32)
        roles.append(unit_roles_arr)
        sentence_ids.append(np.full(len(unit_roles), i, dtype=np.int32))
        index = np.full(len(unit_roles), -1, dtype=np.int32)
        index[unit_roles_arr == ROLE_TOKEN] = np.arange(n_tokens, dtype=np.int32)
        token_index.append(index)
        offset += len(unit_roles)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int32)  # noqa: E731
    return WindowStackTape(
        attach=attachments(forest),
        depths=depth_matrix(forest, fill_value=fill_value),
        roles=cat(roles),
        sentence_ids=cat(sentence_ids),
        token_index=cat(token_index),
    )


def _shift_leaves(tree: Bracketing, offset: int) -> Bracketing:
    return _map_leaves(tree, lambda leaf: leaf + offset)


def _map_leaves(tree: Bracketing, leaf_to: Callable[[int], Bracketing]) -> Bracketing:
    """The bracketing with every leaf `i` replaced by `leaf_to(i)` (a leaf or a sub-bracketing), shape kept.

    Rebuilt iteratively (post-order) rather than recursively, so that trees deeper than Python's recursion limit
    work."""
    results: list[Bracketing] = []
    todo: list[tuple[Bracketing, bool]] = [(tree, False)]
    while todo:
        node, expanded = todo.pop()
        if not isinstance(node, tuple):
            results.append(leaf_to(int(node)))
        elif expanded:
            right = results.pop()
            left = results.pop()
            results.append((left, right))
        else:
            todo.extend([(node, True), (node[1], False), (node[0], False)])
    return results[0]


# ---------------------------------------------------------------------------
# The incremental tape: Algorithm 1, step by step (inference, and the inverse).


class IncrementalStackTape:
    """The stack and tape of a Pushdown LM, updated one attachment at a time.

    This is Algorithm 1 as written: for beam search (copy a hypothesis with
    `copy`), and to replay labels back into trees. A stack element is a
    constituent over a contiguous token range; it is named by its rightmost
    token, which is what an attachment label points at.

    Attributes:
      depths: ``[k]`` int32, the current tape ``W_{k-1}`` after k tokens.
    """

    def __init__(self, capacity: int = 16):
        self._depths = np.zeros(max(capacity, 1), dtype=np.int32)
        self._length = 0
        # Stack elements, bottom first: (first token, last token, bracketing).
        self._stack: list[tuple[int, int, Bracketing]] = []

    def __len__(self) -> int:
        return self._length

    @property
    def depths(self) -> np.ndarray:
        return self._depths[: self._length].copy()

    @property
    def forest(self) -> Forest:
        """The stack's constituents, bottom first (one tree when a sentence is complete)."""
        return [element[2] for element in self._stack]

    def candidates(self) -> np.ndarray:
        """``[m]`` int32: the valid r for the next token, k: every stack element's rightmost token, then k."""
        ends = [element[1] for element in self._stack]
        return np.asarray(ends + [self._length], dtype=np.int32)

    def copy(self) -> IncrementalStackTape:
        other = IncrementalStackTape.__new__(IncrementalStackTape)
        other._depths = self._depths.copy()
        other._length = self._length
        other._stack = list(self._stack)
        return other

    def step(self, r: int) -> np.ndarray:
        """Reads the next token k with attachment ``r`` and returns the new tape ``W_k`` (``[k+1]``).

        Raises:
          ValueError: ``r`` is neither ``k`` nor the rightmost token of a stack element.
        """
        k = self._length
        r = int(r)
        if k == self._depths.shape[0]:
            self._depths = np.concatenate([self._depths, np.zeros_like(self._depths)])
        self._depths[k] = 0
        self._length = k + 1
        constituent: tuple[int, int, Bracketing] = (k, k, k)
        if r != k:
            if not (0 <= r < k) or not any(element[1] == r for element in self._stack):
                self._length = k
                raise ValueError(
                    f"attachment {r} for token {k} is invalid: expected {k} (shift) or the "
                    f"rightmost token of a stack element, one of {[e[1] for e in self._stack]}"
                )
            while True:
                top = self._stack.pop()
                # Reduce: the merged constituent covers top's tokens through k,
                # and each of them goes one level deeper.
                constituent = (top[0], k, (top[2], constituent[2]))
                self._depths[top[0] : k + 1] += 1
                if top[1] == r:
                    break
        self._stack.append(constituent)
        return self.depths


def replay(attach: np.ndarray, *, fill_value: int = 0) -> tuple[np.ndarray, Forest]:
    """The inverse of `attachments`: rebuilds the tapes and the trees from labels.

    Args:
      attach: ``[n]`` int attachment labels.
    Returns:
      ``(depths, forest)``: ``depths [n, n]`` int32 with row k the tape after
      token k (``fill_value`` above the diagonal), and the stack's final
      contents, bottom first (a single bracketing for a complete sentence).
    Raises:
      ValueError: a label that is not a valid attachment at its step.
    """
    attach = np.asarray(attach)
    n = int(attach.shape[0])
    tape = IncrementalStackTape(capacity=n)
    depths = np.full((n, n), fill_value, dtype=np.int32)
    for k in range(n):
        depths[k, : k + 1] = tape.step(int(attach[k]))
    return depths, tape.forest


def attachment_candidates(attach: np.ndarray) -> np.ndarray:
    """Which tokens token k may attach to, given the earlier labels (Fig. 2).

    ``mask[k, j]`` is true iff ``j == k`` (shift) or j is the rightmost token
    of an element on the stack before token k. Token j's element is pushed at
    step j and popped at the first later step k' with ``attach[k'] <= j``, so
    j is a candidate for ``j < k <= pop[j]``. Useful to restrict the
    attachment head's softmax; row k depends on ``attach[:k]`` only.

    Args:
      attach: ``[n]`` int labels.
    Returns:
      ``[n, n]`` bool, lower-triangular with a true diagonal.
    """
    attach = np.asarray(attach)
    n = int(attach.shape[0])
    steps = np.arange(n)
    # pops[k', j]: step k' pops the element ending at j.
    pops = (steps[:, None] > steps[None, :]) & (attach[:, None] <= steps[None, :])
    pop_step = np.where(pops.any(axis=0), pops.argmax(axis=0), n)
    k = steps[:, None]
    j = steps[None, :]
    return ((j < k) & (k <= pop_step[None, :])) | (j == k)
