"""Craft segmentation metrics: hand-worked examples and NMI against a brute-force formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data.craft_metrics import (
    boundary_f1,
    decode_segments,
    nll_by_subtask,
    normalized_mutual_info,
    option_usage,
    predicted_boundaries,
    segmentation_metrics,
)


def test_f1_with_tolerance_by_hand():
    # true 3 is recalled by 4 (distance 1), true 7 is not (4 and 9 are 3 and 2 away): recall 1/2;
    # prediction 4 is precise (3 is 1 away), 9 is not: precision 1/2; F1 1/2. Tolerance 0: nothing matches.
    assert boundary_f1([3, 7], [4, 9], tolerance=1) == pytest.approx(0.5)
    assert boundary_f1([3, 7], [4, 9], tolerance=0) == 0.0
    assert boundary_f1([3, 7], [3, 8], tolerance=1) == 1.0
    # recall 1 (both true near 5 within 2), precision 1/3 (only 5 of 5, 11, 12): F1 = 2 (1/3) / (4/3) = 1/2
    assert boundary_f1([4, 6], [5, 11, 12], tolerance=2) == pytest.approx(0.5)


def test_predicted_boundaries_shift_done_scores_back_one_step():
    # e_0 (forced) is ignored; e_2 = 0.9 and e_4 = 0.8 mark the actions at steps 1 and 3 as subtasks' last
    assert predicted_boundaries(np.array([1.0, 0.1, 0.9, 0.2, 0.8]), 2).tolist() == [1, 3]


def test_decode_segments_by_hand():
    assert decode_segments(np.array([2, 5]), 7).tolist() == [0, 0, 0, 1, 1, 1, -1]
    assert decode_segments(np.array([0, 6]), 7).tolist() == [0, 1, 1, 1, 1, 1, 1]


def test_nmi_by_hand():
    assert normalized_mutual_info(np.array([0, 0, 1, 1]), np.array([5, 5, 7, 7])) == pytest.approx(1.0)
    assert normalized_mutual_info(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])) == pytest.approx(0.0, abs=1e-12)
    # a = (0,0,0,1), b = (0,0,1,1): H(a) = H(1/4), H(b) = log 2, H(a,b) = H over (1/2, 1/4, 1/4)
    h_a = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    h_ab = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    expected = (h_a + math.log(2) - h_ab) / ((h_a + math.log(2)) / 2)
    assert normalized_mutual_info(np.array([0, 0, 0, 1]), np.array([0, 0, 1, 1])) == pytest.approx(expected)


def brute_force_nmi(a, b) -> float:
    """sum_{x,y} p(x,y) log p(x,y) / (p(x) p(y)) over the label pairs, divided by the mean entropy."""
    n = len(a)
    p_a = {x: sum(1 for v in a if v == x) / n for x in set(a)}
    p_b = {y: sum(1 for v in b if v == y) / n for y in set(b)}
    mutual = 0.0
    for x in p_a:
        for y in p_b:
            p_xy = sum(1 for u, v in zip(a, b) if u == x and v == y) / n
            if p_xy > 0:
                mutual += p_xy * math.log(p_xy / (p_a[x] * p_b[y]))
    h_a = -sum(p * math.log(p) for p in p_a.values())
    h_b = -sum(p * math.log(p) for p in p_b.values())
    return 1.0 if h_a == h_b == 0 else mutual / ((h_a + h_b) / 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=40))
def test_nmi_matches_brute_force(pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    assert normalized_mutual_info(np.array(a), np.array(b)) == pytest.approx(brute_force_nmi(a, b), abs=1e-9)


def test_segmentation_metrics_by_hand():
    # one episode of 6 actions, subtasks (kinds 9, 7) completed at steps 2 and 5; done scores e_0..e_6 peak at
    # e_4 and e_6, so the predicted boundaries are 3 and 5: F1 tol 0 = 1/2, tol 1 = 1; alignment: decoded
    # [0,0,0,0,1,1] vs true [0,0,0,1,1,1]: 5/6. Options 1,1,1,0,0,0 against kinds 9,9,9,7,7,7: NMI 1.
    episode = (np.array([2, 5]), np.array([1.0, 0.1, 0.0, 0.2, 0.9, 0.1, 0.95]), np.array([1, 1, 1, 0, 0, 0]),
               np.array([9, 7]))
    result = segmentation_metrics([episode])
    assert result["f1_tol0"] == pytest.approx(0.5)
    assert result["f1_tol1"] == pytest.approx(1.0)
    assert result["align_acc"] == pytest.approx(5 / 6)
    assert result["nmi"] == pytest.approx(1.0)


def test_option_usage_by_hand():
    # episode 1: 5 action steps, subtasks wood (9) for steps 0-1 and iron (7) for 2-4; options 0 0 | 1 1 0
    # episode 2: 4 steps, iron for 0-2 then nothing counted after the last boundary (step 3); options 1 1 1 | 2
    episodes = [(np.array([1, 4]), np.zeros(6), np.array([0, 0, 1, 1, 0]), np.array([9, 7])),
                (np.array([2]), np.zeros(5), np.array([1, 1, 1, 2]), np.array([7]))]
    usage = option_usage(episodes, num_options=3)
    assert sorted(usage) == [7, 9]
    np.testing.assert_allclose(usage[9], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(usage[7], [1 / 6, 5 / 6, 0.0])     # iron: steps 2-4 of episode 1, 0-2 of episode 2


def test_nll_by_subtask_by_hand():
    # episode 1: rows 0-5 (5 actions, subtasks done at steps 1 and 4, then the final DONE row 5), NLL 1..6;
    # episode 2: rows 0-3 (one subtask done at step 2, DONE row 3 not a target), NLL 10, 20, 30, 40
    episodes = [(np.array([1, 4]), np.arange(1.0, 7.0), np.ones(6, bool)),
                (np.array([2]), np.array([10.0, 20.0, 30.0, 40.0]), np.array([True, True, True, False]))]
    result = nll_by_subtask(episodes)
    # 1st subtask: rows 0-1 of episode 1 and rows 0-2 of episode 2; 2nd: rows 2-4 of episode 1; after: row 5
    assert result["nll_by_subtask"] == pytest.approx([(1 + 2 + 10 + 20 + 30) / 5, (3 + 4 + 5) / 3])
    assert result["nll_after_subtasks"] == pytest.approx(6.0)
    no_done = nll_by_subtask([(np.array([1, 4]), np.arange(1.0, 7.0), np.arange(6) < 5)])
    assert no_done["nll_after_subtasks"] is None and no_done["nll_by_subtask"] == pytest.approx([1.5, 4.0])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_one_option_per_kind_is_a_permutation_table_and_nmi_one(seed):
    rng = np.random.default_rng(seed)
    option_of_kind = {7: 2, 8: 0, 9: 1}
    episodes = []
    for _ in range(4):
        kinds = rng.permutation([7, 8, 9])[:2]
        boundaries = np.sort(rng.choice(np.arange(1, 12), 2, replace=False))
        options = np.concatenate([np.full(boundaries[0] + 1, option_of_kind[kinds[0]]),
                                  np.full(boundaries[1] - boundaries[0], option_of_kind[kinds[1]])])
        episodes.append((boundaries, rng.random(boundaries[1] + 2), options, kinds))
    usage = option_usage(episodes, num_options=3)
    for kind, row in usage.items():
        assert row[option_of_kind[kind]] == 1.0 and row.sum() == 1.0
    assert segmentation_metrics(episodes)["nmi"] > 0.999   # every episode shows two kinds
