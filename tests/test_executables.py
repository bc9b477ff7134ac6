"""The guard that keeps a test worker's loaded executables within the kernel's limit of memory mappings."""

import jax
import jax.numpy as jnp
import numpy as np

from tests.executables import memory_mappings, release_executables_if_many


def test_loaded_executables_hold_mappings_and_dropping_the_caches_over_the_limit_frees_them():
    jax.jit(lambda x: x + 1)(np.ones(7, np.float32))  # what the first compilation maps stays mapped
    held = memory_mappings()
    functions = [jax.jit(lambda x, i=i: jnp.tanh(x * i) + i) for i in range(40)]  # 40 programs, all kept loaded
    for f in functions:
        f(np.ones(7, np.float32))
    loaded = memory_mappings()
    assert loaded > held + 40 * 2  # a few mappings per loaded executable (about 8 for a test's usual program)
    assert not release_executables_if_many(limit=loaded + 1_000)  # under the limit: nothing dropped
    assert memory_mappings() >= loaded - 20
    assert release_executables_if_many(limit=held)  # over it: the caches go, and the executables with them
    assert memory_mappings() < held + 20
    np.testing.assert_allclose(functions[3](np.ones(7, np.float32)), np.tanh(3.0) + 3, rtol=1e-6)  # compiles again
