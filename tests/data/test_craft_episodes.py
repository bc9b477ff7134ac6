"""Capped scoring of Craft episodes takes every task, not the first task alone."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data.craft_episodes import Episodes, balanced_subset, make_episodes, score_episodes


def test_balanced_subset_by_hand():
    # episodes stored task after task: 0 0 0 0 1 1 2 2 2; four of them = the first of each task, then task 0's
    # second
    task_ids = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    assert balanced_subset(task_ids, 4).tolist() == [0, 1, 4, 6]
    # task 1 runs out after two: the seventh pick is task 0's third
    assert balanced_subset(task_ids, 7).tolist() == [0, 1, 2, 4, 5, 6, 7]
    assert balanced_subset(task_ids, 20).tolist() == list(range(9))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(1, 30))
def test_balanced_subset_takes_as_many_from_each_task_as_it_can(sizes, count):
    task_ids = np.repeat(np.arange(len(sizes)), sizes)
    chosen = balanced_subset(task_ids, count)
    assert len(chosen) == min(count, len(task_ids)) and len(set(chosen.tolist())) == len(chosen)
    taken = np.bincount(task_ids[chosen], minlength=len(sizes))
    for task, size in enumerate(sizes):
        # a task is short of the largest share only when it has run out; each task's picks are its first ones
        assert taken[task] == size or taken[task] >= taken.max() - 1
        assert chosen[task_ids[chosen] == task].tolist() == np.flatnonzero(task_ids == task)[:taken[task]].tolist()


def test_capped_scoring_sees_every_task():
    n, length = 12, 3
    episodes = Episodes(obs=np.zeros((n, length, 2), np.uint8), actions=np.zeros((n, length), np.int32),
                        mask=np.ones((n, length), np.float32), target_mask=np.ones((n, length), np.float32),
                        task_ids=np.repeat(np.arange(3), 4),
                        boundaries=[np.array([1, 1])] * n, kinds=[np.array([0, 1])] * n)
    seen = []

    def run(rows):
        real = rows["mask"][:, 0] > 0
        seen.extend(rows["task_ids"][real].tolist())
        batch = len(rows["task_ids"])
        return np.zeros((batch, length)), 0.0, np.zeros((batch, length)), np.zeros((batch, length), int)

    result = score_episodes(run, episodes, batch_size=4, kind="lstm", max_episodes=6)
    assert result["episodes"] == 6 and sorted(seen) == [0, 0, 1, 1, 2, 2]


def test_final_done_row_is_read_but_not_a_target_when_switched_off():
    from tests.data.test_craft_demos import small_demos

    demos = small_demos()                                    # episodes of 3 and 4 rows, DONE last
    chosen = {"AC": range(2)}
    live = np.arange(4)
    kept = make_episodes({"AC": demos}, chosen, 5, live)
    dropped = make_episodes({"AC": demos}, chosen, 5, live, train_final_done=False)
    assert kept.target_mask.tolist() == kept.mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]
    assert dropped.mask.tolist() == kept.mask.tolist()       # the episode's rows, for the segmentation metrics
    assert dropped.target_mask.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0]]
    assert np.array_equal(dropped.obs, kept.obs) and np.array_equal(dropped.actions, kept.actions)
    # the batch's loss mask is the target mask; the DONE actions (5) are the ones left out
    rows = dropped.rows(np.arange(2))
    assert rows["mask"].tolist() == dropped.target_mask.tolist()
    assert set(rows["actions"][(dropped.mask - dropped.target_mask) > 0].tolist()) == {5}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.booleans())
def test_nll_by_subtask_pools_the_run_per_step_values(seed, batch_size, final_done_trained):
    """Against a direct loop over random episodes: the mean NLL of each task position's target steps, and the
    overall NLL as their step-weighted mean (the last batch's repeated rows counted nowhere)."""
    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 9)), 8
    lengths = rng.integers(2, width + 1, size=n)                 # rows, the final DONE row last
    boundaries = [np.sort(np.unique(np.append(rng.integers(0, length - 1, size=int(rng.integers(0, 3))),
                                              length - 2))) for length in lengths]
    mask = (np.arange(width) < lengths[:, None]).astype(np.float32)
    target_mask = mask.copy()
    if not final_done_trained:
        target_mask[np.arange(n), lengths - 1] = 0.0
    obs = np.zeros((n, width, 1), np.uint8)
    obs[:, :, 0] = np.arange(n)[:, None]                        # each row says which episode it is
    values = rng.uniform(0.0, 3.0, size=(n, width))              # the policy's -log pi, per episode and step
    episodes = Episodes(obs=obs, actions=np.zeros((n, width), np.int32), mask=mask, target_mask=target_mask,
                        task_ids=np.zeros(n, np.int32), boundaries=boundaries,
                        kinds=[np.zeros(len(b), int) for b in boundaries])

    def run(rows):
        nll = values[rows["obs"][:, 0, 0]]
        return nll, 0.0, np.zeros(nll.shape), np.zeros(nll.shape, int)

    result = score_episodes(run, episodes, batch_size=batch_size, kind="lstm")
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for i in range(n):
        for t in range(lengths[i]):
            if target_mask[i, t]:
                position = int(np.sum(boundaries[i] < t))          # len(boundaries): after the last subtask
                position = -1 if position == len(boundaries[i]) else position
                sums[position] = sums.get(position, 0.0) + values[i, t]
                counts[position] = counts.get(position, 0) + 1
    expected = [sums[p] / counts[p] for p in sorted(p for p in counts if p >= 0)]
    np.testing.assert_allclose(result["nll_by_subtask"], expected, rtol=1e-12)
    if final_done_trained:
        assert result["nll_after_subtasks"] == pytest.approx(sums[-1] / counts[-1])
    else:
        assert result["nll_after_subtasks"] is None
    assert result["nll"] == pytest.approx(sum(sums.values()) / sum(counts.values()))
