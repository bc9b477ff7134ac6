"""Capped scoring of Craft episodes takes every task, not the first task alone."""

from __future__ import annotations

import numpy as np
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
        return (0.0, 0.0, float(rows["mask"].sum()), np.zeros((batch, length)), np.zeros((batch, length), int))

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
