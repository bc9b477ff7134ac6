"""Craft demonstrations as padded episode arrays, and the train / validation split (NumPy, no JAX).

`split_indices` keeps the first `num_demos` episodes of a task's file and
holds out the last `valid_fraction` of them (the thesis' 80/20 split);
`make_episodes` pads the chosen episodes of every task to one length, with
the observation reduced to the given feature columns (uint8, as stored);
`score_episodes` runs a policy over them in fixed-size batches (the caller's
jitted function) and pools NLL, action accuracy and the segmentation
metrics of `tgjax.data.craft_metrics`; a capped evaluation
(`max_episodes`) takes the same number from every task (`balanced_subset`),
since the episodes are stored task after task.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tgjax.data.craft_demos import CraftDemoError, CraftDemos
from tgjax.data.craft_metrics import decode_segments, nll_by_subtask, option_usage, segmentation_metrics


def split_indices(demos: CraftDemos, num_demos: int, valid_fraction: float) -> tuple[range, range]:
    """(training, validation) episode indices of one file: its first `num_demos`, the last fraction held out."""
    n = min(len(demos), num_demos)
    if n < 2:
        raise CraftDemoError(f"task {demos.task!r}: {n} demonstration(s); at least 2 are needed (train + valid)")
    cut = max(1, min(n - 1, int(round(n * (1 - valid_fraction)))))
    return range(cut), range(cut, n)


@dataclasses.dataclass
class Episodes:
    """Padded episodes: obs [N, T, F] uint8 (live features), actions [N, T] int32, mask [N, T] float32
    (the episode's rows), target_mask [N, T] float32 (the rows whose action is a training target: the
    mask, less the final DONE row when it is not trained on), task_ids [N] int32, boundaries (list of [S]
    arrays), kinds (list of [S] arrays); hint_options [N, T] int32 or None (`with_subtask_hints`)."""

    obs: np.ndarray
    actions: np.ndarray
    mask: np.ndarray
    target_mask: np.ndarray
    task_ids: np.ndarray
    boundaries: list
    kinds: list
    hint_options: np.ndarray | None = None   # [N, T] int32 (`with_subtask_hints`), rows' "hint_option"

    def __len__(self) -> int:
        return len(self.task_ids)

    def rows(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        rows = {"obs": self.obs[indices], "actions": self.actions[indices], "mask": self.target_mask[indices],
                "task_ids": self.task_ids[indices]}
        if self.hint_options is not None:
            rows["hint_option"] = self.hint_options[indices]
        return rows

    def with_subtask_hints(self, option_of_kind: dict[int, int]) -> Episodes:
        """These episodes with each row's hinted option: `option_of_kind[k]` for the rows of a subtask of kind k
        (up to and including the action that completed it), -1 after the last subtask and on padding."""
        hints = np.full(self.actions.shape, -1, np.int32)
        for row, (boundaries, kinds) in enumerate(zip(self.boundaries, self.kinds)):
            length = int(self.mask[row].sum())
            segment = decode_segments(boundaries, length)
            options = np.array([option_of_kind[int(k)] for k in kinds] + [-1], np.int32)
            hints[row, :length] = options[segment]   # segment -1 (after the last subtask) reads the final -1
        return dataclasses.replace(self, hint_options=hints)


def make_episodes(task_demos: dict[str, CraftDemos], indices: dict[str, range], length: int,
                  live: np.ndarray, *, train_final_done: bool = True) -> Episodes:
    """The chosen episodes of every task, padded to `length` rows.

    `train_final_done=False` leaves each episode's last row (the final observation paired with the
    bot's DONE) out of `target_mask`: its observation is still read, its action is no target.
    """
    chosen = [(task_id, demos, i) for task_id, (task, demos) in enumerate(task_demos.items()) for i in indices[task]]
    n = len(chosen)
    obs = np.zeros((n, length, len(live)), np.uint8)
    actions = np.zeros((n, length), np.int32)
    mask = np.zeros((n, length), np.float32)
    task_ids = np.zeros(n, np.int32)
    boundaries, kinds = [], []
    for row, (task_id, demos, i) in enumerate(chosen):
        start, end = int(demos.offsets[i]), int(demos.offsets[i + 1])
        if end - start > length:
            raise CraftDemoError(f"demonstration {i} of task {demos.task!r} has {end - start} rows, more than "
                                 f"max_steps + 1 = {length}")
        obs[row, :end - start] = demos.observations[start:end][:, live]
        actions[row, :end - start] = demos.actions[start:end]
        mask[row, :end - start] = 1.0
        task_ids[row] = task_id
        boundaries.append(np.asarray(demos.boundaries[i]))
        kinds.append(np.asarray(demos.subtasks))
    target_mask = mask.copy()
    if not train_final_done:
        target_mask[np.arange(n), mask.sum(axis=1).astype(np.int64) - 1] = 0.0
    return Episodes(obs, actions, mask, target_mask, task_ids, boundaries, kinds)


def balanced_subset(task_ids: np.ndarray, count: int) -> np.ndarray:
    """The indices of `count` episodes taken evenly from every task: each task's first episode, then each
    task's second, and so on (a task with fewer episodes drops out when it runs out), sorted.

    task_ids [N] -> [min(count, N)] int. Taking the first `count` rows instead would score the first task
    alone, as `make_episodes` stores the episodes task after task.
    """
    task_ids = np.asarray(task_ids)
    rank = np.zeros(len(task_ids), np.int64)           # the episode's position among its task's episodes
    for task in np.unique(task_ids):
        members = np.flatnonzero(task_ids == task)
        rank[members] = np.arange(len(members))
    order = np.lexsort((task_ids, rank))                 # by rank, then task id
    return np.sort(order[:count])


def score_episodes(run, episodes: Episodes, batch_size: int, kind: str, max_episodes: int = 0,
                   num_options: int = 0) -> dict:
    """NLL per step, action accuracy and (kind "ocn") F1 tol 0/1, task alignment and NMI, ("moe") NMI, or
    ("ompn") F1 tol 0/1 and task alignment (the boundary score is OMPN's expected expansion position; its
    pointer slot is not an option, so no NMI).

    `run(rows)` takes `batch_size` rows of `Episodes.rows` and returns NumPy (-log pi of each row's action
    [B, T], correct argmax actions over the mask, log done probabilities [B, T], the option in use [B, T]);
    the last batch is filled by repeating rows, which its mask then leaves out. Every kind also
    gets the NLL by position in the task (`tgjax.data.craft_metrics.nll_by_subtask`). With `num_options`
    (ocn, moe) the result also has "option_usage" (`tgjax.data.craft_metrics.option_usage`, keyed by kind id).
    """
    chosen = (np.arange(len(episodes)) if not max_episodes or max_episodes >= len(episodes)
              else balanced_subset(episodes.task_ids, max_episodes))
    n = len(chosen)
    total = correct = count = 0.0
    segmentation, step_nll = [], []
    for start in range(0, n, batch_size):
        indices = chosen[start:start + batch_size]
        rows = episodes.rows(np.resize(indices, batch_size))
        rows["mask"][len(indices):] = 0.0
        nll, hits, log_done, options = run(rows)
        total += float(np.sum(rows["mask"] * nll))
        correct += float(hits)
        count += float(rows["mask"].sum())
        for row, index in enumerate(indices):
            length = int(episodes.mask[index].sum())
            segmentation.append((episodes.boundaries[index], np.exp(log_done[row, :length]),
                                 options[row, :length - 1], episodes.kinds[index]))
            step_nll.append((episodes.boundaries[index], nll[row, :length], rows["mask"][row, :length] > 0))
    result = {"nll": total / max(count, 1.0), "action_accuracy": correct / max(count, 1.0), "episodes": n,
              **nll_by_subtask(step_nll)}
    if kind != "lstm":
        metrics = segmentation_metrics(segmentation)
        if kind == "ocn":
            result.update(metrics)
        elif kind == "ompn":
            result.update({k: v for k, v in metrics.items() if k != "nmi"})
        else:  # MoE has no done signal: only the option usage is meaningful
            result["nmi"] = metrics["nmi"]
        if num_options and kind in ("ocn", "moe"):
            result["option_usage"] = option_usage(segmentation, num_options)
    return result
