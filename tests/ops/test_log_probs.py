"""token_log_probs against a float64 NumPy log-softmax, and a hand-worked case."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.ops import token_log_probs


def numpy_token_log_probs(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log(exp(x_label) / Σ_v exp(x_v)) in float64, position by position."""
    out = np.zeros(labels.shape)
    for index in np.ndindex(labels.shape):
        row = logits[index].astype(np.float64)
        out[index] = row[labels[index]] - np.log(np.sum(np.exp(row - row.max()))) - row.max()
    return out


def test_uniform_logits_give_minus_log_vocabulary_size():
    logits = jnp.full((2, 3, 7), 4.5)
    labels = jnp.array([[0, 3, 6], [1, 1, 2]])
    np.testing.assert_allclose(token_log_probs(logits, labels), np.full((2, 3), -np.log(7.0)), rtol=1e-6)


def test_two_way_softmax_by_hand():
    # log p(b) with logits (0, log 3): p(b) = 3 / (1 + 3)
    value = token_log_probs(jnp.array([0.0, np.log(3.0)]), jnp.array(1))
    assert float(value) == pytest.approx(np.log(0.75), rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(1, 40), batch=st.integers(1, 3), length=st.integers(1, 5),
       scale=st.sampled_from([0.1, 3.0, 30.0]), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_equals_a_float64_log_softmax(seed, vocab, batch, length, scale, dtype):
    rng = np.random.default_rng(seed)
    logits = jnp.asarray(rng.normal(0.0, scale, (batch, length, vocab)), dtype)
    labels = rng.integers(0, vocab, (batch, length))
    got = token_log_probs(logits, jnp.asarray(labels))
    assert got.dtype == jnp.float32  # bf16 logits are read in float32
    expected = numpy_token_log_probs(np.asarray(logits.astype(jnp.float32)), labels)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)
