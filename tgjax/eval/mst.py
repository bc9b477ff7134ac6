"""Maximum spanning arborescences (Chu-Liu/Edmonds), and the release's one-root decoding of a head matrix.

    heads = maximum_spanning_tree(scores)       # scores [n+1, n+1]: scores[dependent, head], node 0 = ROOT
    heads, total = best_single_root_tree(log_probs)   # log_probs [n, n], every root tried (the release)

`maximum_spanning_tree` is the recursive contraction algorithm: every node
but ROOT takes its best incoming arc; if those arcs form no cycle they are the
tree; else the cycle C is contracted into one node, an arc entering C at v
from h scores s(v, h) - s(v, head_C(v)) (what it gains over the cycle arc it
replaces), an arc leaving C to d scores max over C of s(d, c), the smaller
graph is solved, and the cycle is opened where the chosen entering arc
lands. Arcs of score -inf are forbidden. O(n^3); n is a sentence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["best_single_root_tree", "maximum_spanning_tree", "tree_score"]


def _find_cycle(heads: np.ndarray) -> list[int] | None:
    """A cycle of the head function over nodes 1.. (node 0 = ROOT has no head), or None."""
    n = len(heads)
    state = np.zeros(n, np.int8)  # 0 unseen, 1 on the current path, 2 done
    state[0] = 2
    for start in range(1, n):
        path, node = [], start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = int(heads[node])
        if state[node] == 1:  # closed a loop on this path
            return path[path.index(node):]
        state[path] = 2
    return None


def maximum_spanning_tree(scores: np.ndarray) -> np.ndarray:
    """Heads [n+1] (heads[0] = -1) of the highest-scoring arborescence rooted at node 0.

    `scores[d, h]` is the score of the arc h -> d; the diagonal and row 0
    (arcs into ROOT) are ignored. Raises ValueError when no spanning tree
    avoids the -inf arcs.
    """
    scores = np.array(scores, dtype=np.float64)
    n = scores.shape[0]
    if scores.shape != (n, n) or n < 1:
        raise ValueError(f"expected a square score matrix [n+1, n+1], got shape {scores.shape}")
    scores[np.arange(n), np.arange(n)] = -np.inf
    scores[0, :] = -np.inf
    if n == 1:
        return np.array([-1])
    best = np.argmax(scores, axis=1)
    if np.any(np.isneginf(scores[np.arange(1, n), best[1:]])):
        raise ValueError("no spanning tree: some node has no allowed incoming arc")
    heads = best.copy()
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    in_cycle = np.zeros(n, bool)
    in_cycle[cycle] = True
    rest = np.flatnonzero(~in_cycle)  # ROOT first (0 is never in a cycle)
    cycle = np.asarray(cycle)
    m = len(rest) + 1  # the contracted node is the last one
    new = np.full((m, m), -np.inf)
    new[:-1, :-1] = scores[np.ix_(rest, rest)]
    from_cycle = scores[np.ix_(rest, cycle)]  # [rest, cycle]: arcs leaving C
    best_from = np.argmax(from_cycle, axis=1)
    new[:-1, -1] = from_cycle[np.arange(len(rest)), best_from]
    leaving_from = cycle[best_from]  # for d outside: the cycle node its arc from C leaves
    gains = scores[np.ix_(cycle, rest)] - scores[cycle, heads[cycle]][:, None]  # [cycle, rest]: arcs entering C
    best_into = np.argmax(gains, axis=0)
    new[-1, :-1] = gains[best_into, np.arange(len(rest))]
    entering_at = cycle[best_into]  # for h outside: the cycle node its arc into C reaches
    sub = maximum_spanning_tree(new)
    out = heads.copy()  # cycle nodes keep their cycle arcs unless opened below
    for a, d in enumerate(rest):
        if a == 0:
            continue
        out[d] = leaving_from[a] if sub[a] == m - 1 else rest[sub[a]]
    b = int(sub[m - 1])
    out[entering_at[b]] = rest[b]
    return out


def tree_score(scores: np.ndarray, heads: np.ndarray) -> float:
    """Sum of scores[d, heads[d]] over d >= 1."""
    d = np.arange(1, len(heads))
    return float(np.sum(np.asarray(scores)[d, np.asarray(heads)[1:]]))


def best_single_root_tree(log_probs: np.ndarray) -> tuple[np.ndarray, float]:
    """The release's tree decoding (released-code.md §4.6): heads [n] (0-based, the root heads itself) and score.

    `log_probs[i, j]` scores "the head of word i is word j" (the release:
    log(H + 1e-9) with H's diagonal zero). A ROOT node is added; for every
    candidate root r only ROOT -> r is allowed (score 0); the best of the n
    trees is kept (ties: the first r).
    """
    log_probs = np.asarray(log_probs, dtype=np.float64)
    n = log_probs.shape[0]
    if n == 0:
        raise ValueError("an empty sentence has no tree")
    best_heads, best_total = None, -np.inf
    for r in range(n):
        scores = np.full((n + 1, n + 1), -np.inf)
        scores[1:, 1:] = log_probs
        scores[1 + r, 0] = 0.0
        heads = maximum_spanning_tree(scores)
        total = tree_score(scores, heads)
        if total > best_total:
            best_heads, best_total = heads, total
    words = best_heads[1:] - 1
    root = int(np.flatnonzero(words < 0)[0])
    words[root] = root
    return words, best_total
