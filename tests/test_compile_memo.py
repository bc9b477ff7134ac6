"""tests/compile_memo.py: an identical program lowered again under `scoped` reuses its executable and computes the
same values; leaving the scope restores JAX's own compile entry point."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.compile_memo import scoped

compiler = pytest.importorskip("jax._src.compiler")


def test_a_fresh_jit_of_the_same_program_is_a_hit_and_the_scope_restores_jax():
    before = compiler.compile_or_get_cached
    x = jnp.arange(6.0).reshape(2, 3)
    with scoped():
        counts = compiler.compile_or_get_cached.memo_counts
        start = dict(counts)
        first = jax.jit(lambda a: jnp.tanh(a) @ a.T + 0.125)(x)  # two lambdas: two entries in JAX's own caches
        second = jax.jit(lambda a: jnp.tanh(a) @ a.T + 0.125)(x)
        other = jax.jit(lambda a: jnp.tanh(a) @ a.T - 0.125)(x)  # another program: compiled
        hits, misses = counts["hits"] - start["hits"], counts["misses"] - start["misses"]
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(other, np.tanh(x) @ np.asarray(x).T - 0.125, rtol=1e-6)
    assert (hits, misses) == (1, 2)
    if not hasattr(before, "memo_counts"):  # the memo is not on suite-wide: the scope took it out again
        assert compiler.compile_or_get_cached is before
