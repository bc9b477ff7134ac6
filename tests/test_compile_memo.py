"""The suite's executable memo (tests/compile_memo.py): a module lowered again is not compiled again and computes
the same; a module that differs (a constant, a shape) is compiled on its own."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.compile_memo import install
from tests.executables import release_executables_if_many


def test_an_identical_module_is_compiled_once_and_a_different_one_again(monkeypatch):
    try:
        from jax._src import compiler
    except ImportError:
        pytest.skip("this JAX has no jax._src.compiler: the memo cannot be installed")
    # Installed for this test only (it is opt-in, `TGJAX_TEST_COMPILE_MEMO=1`): the entry point is put back after.
    monkeypatch.setattr(compiler, "compile_or_get_cached", compiler.compile_or_get_cached)
    if not install():
        pytest.skip("this JAX has no jax._src.cache_key: the memo is off")

    compiled = []  # XLA's compilations, seen where JAX hands a module to the backend
    backend_compile = compiler.backend_compile_and_load
    monkeypatch.setattr(compiler, "backend_compile_and_load",
                        lambda *args, **kwargs: compiled.append(1) or backend_compile(*args, **kwargs))
    x, longer = jnp.arange(5.0), jnp.arange(6.0)  # made before counting (each is a compiled program too)
    start = len(compiled)
    first = jax.jit(lambda v: jnp.sin(v) * 3.0 + 0.25)(x)  # a fresh function each time: JAX's own caches miss
    second = jax.jit(lambda v: jnp.sin(v) * 3.0 + 0.25)(x)
    assert len(compiled) - start == 1
    np.testing.assert_allclose(np.asarray(second), np.sin(np.arange(5.0)) * 3.0 + 0.25, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    other_constant = jax.jit(lambda v: jnp.sin(v) * 4.0 + 0.25)(x)
    other_shape = jax.jit(lambda v: jnp.sin(v) * 3.0 + 0.25)(longer)
    assert len(compiled) - start == 3
    np.testing.assert_allclose(np.asarray(other_constant), np.sin(np.arange(5.0)) * 4.0 + 0.25, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(other_shape), np.sin(np.arange(6.0)) * 3.0 + 0.25, rtol=1e-6)
    # The mapping guard empties the memo with JAX's caches: the same module compiles again
    assert release_executables_if_many(limit=0)
    again = jax.jit(lambda v: jnp.sin(v) * 3.0 + 0.25)(x)
    assert len(compiled) - start == 4
    np.testing.assert_array_equal(np.asarray(again), np.asarray(first))
