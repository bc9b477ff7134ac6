"""SummingWindow: the train record of a logging interval, by hand and against sums taken with NumPy."""

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.train.metrics import SummingWindow


def step_metrics(nll: float, examples: int, correct: int, tokens: int, objective: float, lr: float = 1e-3,
                 grad_norm: float = 0.5) -> dict:
    """What a jitted step hands back after `jax.device_get`: 0-d NumPy arrays."""
    return {"sum_nll": np.float32(nll), "num_examples": np.int32(examples), "num_correct": np.int32(correct),
            "num_tokens": np.int32(tokens), "objective": np.float32(objective),
            "learning_rate": np.float32(lr), "grad_norm": np.float32(grad_norm)}


def test_two_steps_by_hand():
    window = SummingWindow(ratios={"loss": ("sum_nll", "num_examples"), "accuracy": ("num_correct", "num_examples"),
                                   "objective": ("objective", None)},
                           tokens="num_tokens", totals={"num_examples": "num_examples"}, perplexity_of="loss")
    window.add(step_metrics(nll=6.0, examples=4, correct=1, tokens=40, objective=2.0))
    window.add(step_metrics(nll=2.0, examples=4, correct=5, tokens=60, objective=4.0, lr=2e-3, grad_norm=0.25))
    window.start = time.perf_counter() - 100.0  # as if the two steps took 100 s
    record = window.record(7, step_metrics(0, 0, 0, 0, 0, lr=2e-3, grad_norm=0.25))
    assert record["split"] == "train" and record["step"] == 7
    assert record["loss"] == 1.0  # (6 + 2) / (4 + 4)
    assert record["accuracy"] == 0.75  # (1 + 5) / 8
    assert record["perplexity"] == pytest.approx(math.e)
    assert record["objective"] == 3.0  # a mean per step
    assert record["num_examples"] == 8 and isinstance(record["num_examples"], int)  # JSON keeps it an int
    assert record["learning_rate"] == pytest.approx(2e-3) and record["grad_norm"] == 0.25  # the last step's
    assert record["tokens_per_second"] == pytest.approx(1.0, rel=1e-3)  # 100 tokens in 100 s
    assert record["steps_per_second"] == pytest.approx(0.02, rel=1e-3)


def test_an_empty_denominator_gives_zero_not_a_division_error_and_perplexity_is_capped():
    window = SummingWindow(ratios={"loss": ("sum_nll", "num_examples")}, tokens="num_tokens", perplexity_of="loss")
    window.add(step_metrics(nll=80.0, examples=0, correct=0, tokens=0, objective=0.0))
    record = window.record(1, step_metrics(0, 0, 0, 0, 0))
    assert record["loss"] == 80.0  # divided by max(0, 1)
    assert record["perplexity"] == pytest.approx(math.exp(50.0))


def test_epoch_a_constant_rate_and_a_step_without_grad_norm():
    window = SummingWindow(ratios={"loss": ("sum_nll", "num_examples")}, tokens="num_tokens", steps_per_epoch=4,
                           learning_rate=0.001)
    metrics = step_metrics(nll=3.0, examples=3, correct=0, tokens=3, objective=0.0)
    del metrics["learning_rate"], metrics["grad_norm"]  # a step that reports neither (Craft BC, PPO)
    window.add(metrics)
    record = window.record(5, metrics)
    assert record["epoch"] == 2  # steps 5-8 are the second epoch
    assert record["learning_rate"] == 0.001 and "grad_norm" not in record


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0, 1e4), st.integers(0, 64), st.integers(0, 64), st.integers(0, 10**6),
                                st.floats(-10, 10)), min_size=1, max_size=12))
def test_equals_sums_taken_with_numpy(steps):
    window = SummingWindow(ratios={"loss": ("sum_nll", "num_examples"), "accuracy": ("num_correct", "num_examples"),
                                   "objective": ("objective", None)}, tokens="num_tokens")
    rows = [step_metrics(nll, examples, min(correct, examples), tokens, objective)
            for nll, examples, correct, tokens, objective in steps]
    for row in rows:
        window.add(row)
    record = window.record(len(rows), rows[-1])
    column = {key: np.array([row[key] for row in rows], np.float64) for key in rows[0]}
    examples = max(column["num_examples"].sum(), 1.0)
    assert record["loss"] == pytest.approx(column["sum_nll"].sum() / examples, rel=1e-12)
    assert record["accuracy"] == pytest.approx(column["num_correct"].sum() / examples, rel=1e-12)
    assert record["objective"] == pytest.approx(column["objective"].mean(), rel=1e-12, abs=1e-12)
