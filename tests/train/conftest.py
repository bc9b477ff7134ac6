"""Trainer tests compile the same small programs many times: share JAX's persistent compilation cache.

The cache only skips recompiling identical programs (keyed by their HLO); it
changes no result. Subprocess tests get the directory through
`JAX_COMPILATION_CACHE_DIR`.
"""

import getpass
import os
import tempfile
from pathlib import Path

import jax
import pytest


@pytest.fixture(scope="session", autouse=True)
def compilation_cache():
    # One directory across sessions and xdist workers (entries are keyed by program, JAX version and flags).
    default = Path(tempfile.gettempdir()) / f"tgjax-test-jax-cache-{getpass.getuser()}"
    directory = os.environ.get("TGJAX_TEST_JAX_CACHE") or str(default)
    previous = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    yield directory
    jax.config.update("jax_compilation_cache_dir", previous[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])
