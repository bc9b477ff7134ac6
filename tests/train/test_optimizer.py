"""The learning-rate schedule at hand-computed steps, and gradient clipping in the optimiser chain."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.train.config import apply_overrides, default_config
from tgjax.train.optimizer import clip_gradients, linear_warmup_then_cosine_anneal, make_optimizer, make_schedule

START, PEAK, FINAL, WARMUP, CYCLE = 1e-7, 7e-4, 3e-7, 6000, 44000  # the paper's PTB TG settings


@pytest.fixture
def schedule():
    return linear_warmup_then_cosine_anneal(START, PEAK, FINAL, WARMUP, CYCLE)


def lr(schedule, step):
    return float(schedule(jnp.asarray(step)))


def test_warmup_starts_at_1e7_and_peaks_at_its_end(schedule):
    assert lr(schedule, 0) == pytest.approx(1e-7, rel=1e-6)
    assert lr(schedule, WARMUP // 2) == pytest.approx((START + PEAK) / 2, rel=1e-6)
    assert lr(schedule, WARMUP) == pytest.approx(PEAK, rel=1e-6)
    assert lr(schedule, WARMUP - 1) < PEAK


def test_cosine_midpoint_and_final_value(schedule):
    # Half-way through the cosine, cos(pi/2) = 0: exactly between peak and final.
    assert lr(schedule, WARMUP + CYCLE // 2) == pytest.approx((PEAK + FINAL) / 2, rel=1e-6)
    # A quarter of the way: final + (peak - final) * (1 + cos(pi/4)) / 2.
    quarter = FINAL + (PEAK - FINAL) * (1 + np.cos(np.pi / 4)) / 2
    assert lr(schedule, WARMUP + CYCLE // 4) == pytest.approx(quarter, rel=1e-6)
    assert lr(schedule, WARMUP + CYCLE) == pytest.approx(FINAL, rel=1e-5)
    assert lr(schedule, WARMUP + 3 * CYCLE) == pytest.approx(FINAL, rel=1e-5)  # stays there


def authors_schedule(step: int, start: float, peak: float, final: float, warmup: int, cycle: int) -> float:
    """The authors' `linear_warmup_then_cosine_anneal`, restated in float64 (the oracle for optax's schedule)."""
    if step < warmup:
        return start + (peak - start) * step / warmup
    progress = min((step - warmup) / cycle, 1.0)
    return final + (peak - final) * 0.5 * (1.0 + np.cos(np.pi * progress))


@settings(max_examples=40, deadline=None)
@given(start=st.floats(0.0, 1e-3), peak=st.floats(1e-5, 1e-2), final=st.floats(0.0, 1e-5),
       warmup=st.integers(0, 500), cycle=st.integers(1, 5000), fraction=st.floats(0.0, 1.0))
def test_schedule_equals_the_authors_formula_at_the_boundaries_and_between(start, peak, final, warmup, cycle,
                                                                            fraction):
    schedule = linear_warmup_then_cosine_anneal(start, peak, final, warmup, cycle)
    inside_warmup = int(fraction * warmup)
    inside_cosine = warmup + int(fraction * cycle)
    steps = {0, max(warmup - 1, 0), warmup, warmup + 1, inside_warmup, inside_cosine, warmup + cycle - 1,
             warmup + cycle, warmup + cycle + 1, 3 * (warmup + cycle)}
    for step in sorted(steps):
        expected = authors_schedule(step, start, peak, final, warmup, cycle)
        # float32: optax's warm-up, (start - peak) * (1 - t) + peak, and 1 + cos(pi t) near t = 1 both cancel,
        # so the error there is relative to the peak, not to the value
        assert lr(schedule, step) == pytest.approx(expected, rel=2e-6, abs=1e-6 * max(peak, start)), step


def test_a_zero_peak_with_a_nonzero_floor_is_refused():
    with pytest.raises(ValueError, match="max_lr=0 needs min_lr=0"):
        linear_warmup_then_cosine_anneal(0.0, 0.0, 1e-7, 10, 100)


def test_schedule_config_errors_name_the_keys():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['max_learning_rate'\]"):
        make_schedule("linear_warmup_then_cosine_anneal",
                      dict(start_lr=1e-7, max_learning_rate=1e-3, min_lr=0.0, warmup_steps=1, cosine_cycle_length=2))
    with pytest.raises(ValueError, match="unknown 'linear'"):
        make_schedule("linear", {})


def test_clipping_scales_a_known_gradient():
    clip = clip_gradients(1.0)
    grads = {"a": jnp.array([3.0, 0.0]), "b": jnp.array([[4.0]])}  # global norm 5
    clipped, _ = clip.update(grads, clip.init(grads))
    np.testing.assert_allclose(clipped["a"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["b"], [[0.8]], rtol=1e-6)
    small = {"a": jnp.array([0.3, 0.0]), "b": jnp.array([[0.4]])}  # norm 0.5: untouched
    unclipped, _ = clip.update(small, clip.init(small))
    np.testing.assert_allclose(unclipped["a"], small["a"])


def test_optimizer_chain_clips_before_adam_and_uses_the_schedule():
    # Adam's first update is -lr * g / (|g| + eps) per entry; with a huge eps it is nearly linear in g,
    # so clipping shows.
    config = apply_overrides(default_config(), [
        "training.clip_grad_norm=1.0", "training.optimizer.kwargs.eps=1e6",
        "training.lr_schedule.kwargs.start_lr=0.01"])
    tx, schedule = make_optimizer(config.training)
    params = {"w": jnp.zeros(2)}
    big = {"w": jnp.array([30.0, 40.0])}  # norm 50 -> clipped to norm 1: [0.6, 0.8]
    update, _ = tx.update(big, tx.init(params), params)
    g = np.array([0.6, 0.8])
    np.testing.assert_allclose(update["w"], -0.01 * g / (np.abs(g) + 1e6), rtol=1e-5)
    assert float(schedule(0)) == pytest.approx(0.01)
    # Without clipping the same gradient moves 50 times further.
    config.training.clip_grad_norm = 0.0
    tx, _ = make_optimizer(config.training)
    update, _ = tx.update(big, tx.init(params), params)
    g = np.array([30.0, 40.0])
    np.testing.assert_allclose(update["w"], -0.01 * g / (np.abs(g) + 1e6), rtol=1e-5)


def test_adam_counts_updates_from_the_warmup_start():
    config = default_config()
    tx, _ = make_optimizer(config.training)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    for _ in range(3):
        _, state = tx.update({"w": jnp.ones(3)}, state, params)
    counts = [int(v) for _, v in optax.tree_utils.tree_get_all_with_path(state, "count")]
    assert counts == [3, 3]  # Adam's bias correction and the schedule's step
