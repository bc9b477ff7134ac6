"""Craft segmentation metrics (NumPy, no JAX): boundaries, F1 with tolerance, task alignment, NMI.

The protocol is OMPN's (released-code.md §5.5), for one demonstration of
T actions (the final DONE row excluded) whose S subtasks were completed by
the actions at steps `true_boundaries` [S] (ascending; the last is T - 1):

* predicted boundaries (OCN): the top-S steps of the done probability.
  e_t is computed on observation t and says "the previous subtask is done",
  so a high e_t marks the action at t - 1 as a subtask's last; the scores
  are e_1..e_T (e_T on the final observation, the row the demonstration
  pairs with DONE), and the predicted boundaries are those t - 1, sorted.
  e_0 is not a score: the first step is the "done" branch by construction.
* `boundary_f1(true, predicted, tolerance)`: a true boundary is recalled if
  a prediction lies within +-tolerance steps, a prediction is precise if a
  true boundary does; F1 = 2PR / (P + R), 0 when both are 0. Averaged over
  episodes (OMPN averages per-episode F1).
* `decode_segments(boundaries, length)`: step t belongs to segment i when
  boundaries[i-1] < t <= boundaries[i]; steps after the last boundary get
  -1 (no segment; counted wrong). Task alignment accuracy = the fraction of
  steps, pooled over episodes, whose decoded segment equals the true one.
* `normalized_mutual_info(a, b)`: I(A; B) / ((H(A) + H(B)) / 2) over pooled
  time steps (the arithmetic normalisation; 1 when both are constant), here
  between the option in use (argmax of the mixture p_t) and the true
  subtask's kind.
* `option_usage`: the contingency table behind that NMI, read by subtask:
  for each subtask kind, the share of its steps in which each option was
  in use. One option taking every kind is a collapse; one per kind is the
  thesis' specialisation.
"""

from __future__ import annotations

import numpy as np


def predicted_boundaries(done_scores: np.ndarray, num_boundaries: int) -> np.ndarray:
    """The top `num_boundaries` action steps by done score, sorted.

    done_scores [T + 1]: e_0..e_T of one episode (e_t on observation t); returns action steps in 0..T-1.
    """
    scores = np.asarray(done_scores, dtype=np.float64)[1:]
    if num_boundaries > len(scores):
        raise ValueError(f"{num_boundaries} boundaries asked of {len(scores)} steps")
    order = np.argsort(-scores, kind="stable")[:num_boundaries]
    return np.sort(order)


def boundary_f1(true: np.ndarray, predicted: np.ndarray, tolerance: int = 1) -> float:
    """F1 of predicted boundary steps against true ones, each matched within +-`tolerance` steps."""
    true, predicted = np.asarray(true), np.asarray(predicted)
    if len(true) == 0 or len(predicted) == 0:
        return 0.0
    distance = np.abs(true[:, None] - predicted[None, :])         # [S_true, S_pred]
    recall = float(np.mean(distance.min(axis=1) <= tolerance))
    precision = float(np.mean(distance.min(axis=0) <= tolerance))
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def decode_segments(boundaries: np.ndarray, length: int) -> np.ndarray:
    """[length] int: the segment index of each action step (module docstring); -1 after the last boundary."""
    steps = np.arange(length)
    segment = np.searchsorted(np.sort(np.asarray(boundaries)), steps, side="left")
    return np.where(segment < len(boundaries), segment, -1)


def entropy(labels: np.ndarray) -> float:
    """Shannon entropy (nats) of the empirical distribution of `labels`."""
    _, counts = np.unique(np.asarray(labels), return_counts=True)
    p = counts / counts.sum()
    return float(-np.sum(p * np.log(p)))


def normalized_mutual_info(a: np.ndarray, b: np.ndarray) -> float:
    """I(A; B) / mean(H(A), H(B)) of two label sequences of one length; 1.0 when both entropies are 0."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"label sequences must be 1-D of one length, got {a.shape} and {b.shape}")
    h_a, h_b = entropy(a), entropy(b)
    if h_a == 0 and h_b == 0:
        return 1.0
    joint = np.unique(np.stack([a, b], axis=1), axis=0, return_counts=True)[1] if len(a) else np.array([1])
    h_ab = float(-np.sum((joint / joint.sum()) * np.log(joint / joint.sum())))
    mutual = h_a + h_b - h_ab
    return float(max(mutual, 0.0) / ((h_a + h_b) / 2))


def _option_and_kind_per_step(gold: np.ndarray, options: np.ndarray, kinds: np.ndarray
                              ) -> tuple[np.ndarray, np.ndarray]:
    """(option in use, true subtask kind) at each action step inside a subtask; gold [T] is the episode's
    `decode_segments` of its true boundaries."""
    inside = gold >= 0
    return np.asarray(options)[:len(gold)][inside], np.asarray(kinds)[gold[inside]]


def option_usage(episodes, num_options: int) -> dict[int, np.ndarray]:
    """kind id -> [num_options] shares (summing to 1) of that subtask's action steps in which each option was
    in use, pooled over `episodes` given as for `segmentation_metrics`."""
    counts: dict[int, np.ndarray] = {}
    for true, scores, options, kinds in episodes:
        used, wanted = _option_and_kind_per_step(decode_segments(true, len(scores) - 1), options, kinds)
        for kind in np.unique(wanted):
            row = counts.setdefault(int(kind), np.zeros(num_options))
            row += np.bincount(used[wanted == kind], minlength=num_options)[:num_options]
    return {kind: row / row.sum() for kind, row in counts.items()}


def nll_by_subtask(episodes) -> dict[str, list[float] | float | None]:
    """The NLL per step pooled by position in the task: episodes given as (true_boundaries [S], nll [T + 1]
    (-log pi of each row's action, the final DONE row last), targets [T + 1] bool (the rows that are training
    targets)). Returns {"nll_by_subtask": [mean over the target steps of the 1st, 2nd, ... subtask],
    "nll_after_subtasks": mean over the target rows after the last subtask (the final DONE) or None}.

    Where the likelihood is lost tells a task-blind option that cannot know its first target (the 1st subtask)
    from one that also misses what the inventory says about the next."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for true, nll, targets in episodes:
        segment = decode_segments(true, len(nll))       # -1: after the last boundary
        for index in np.unique(segment[targets]):
            chosen = targets & (segment == index)
            sums[int(index)] = sums.get(int(index), 0.0) + float(np.sum(nll[chosen]))
            counts[int(index)] = counts.get(int(index), 0) + int(chosen.sum())
    positions = sorted(i for i in counts if i >= 0)
    return {"nll_by_subtask": [sums[i] / counts[i] for i in positions],
            "nll_after_subtasks": sums[-1] / counts[-1] if -1 in counts else None}


def segmentation_metrics(episodes) -> dict[str, float]:
    """Pooled metrics of episodes given as (true_boundaries [S], done_scores [T + 1], options [T], kinds [S]).

    options [T]: the option in use at each action step; kinds [S]: each subtask's kind id.
    Returns {"f1_tol0", "f1_tol1" (mean over episodes), "align_acc" (pooled steps), "nmi" (pooled steps),
    "episodes"}.
    """
    f1 = {0: [], 1: []}
    correct = total = 0
    used, wanted = [], []
    for true, scores, options, kinds in episodes:
        true = np.asarray(true)
        length = len(scores) - 1
        predicted = predicted_boundaries(scores, len(true))
        for tolerance in f1:
            f1[tolerance].append(boundary_f1(true, predicted, tolerance))
        gold = decode_segments(true, length)
        correct += int(np.sum(decode_segments(predicted, length) == gold))
        total += length
        option_of_step, kind_of_step = _option_and_kind_per_step(gold, options, kinds)
        used.append(option_of_step)
        wanted.append(kind_of_step)
    if not total:
        return {"f1_tol0": float("nan"), "f1_tol1": float("nan"), "align_acc": float("nan"), "nmi": float("nan"),
                "episodes": 0}
    return {"f1_tol0": float(np.mean(f1[0])), "f1_tol1": float(np.mean(f1[1])), "align_acc": correct / total,
            "nmi": normalized_mutual_info(np.concatenate(used), np.concatenate(wanted)), "episodes": len(f1[1])}
