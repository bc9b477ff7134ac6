"""Shared test helpers: where the data beside the repository lives; the quick-compile setting every test runs with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tests compile many small programs and run each for a few steps: at XLA's default backend (LLVM) optimisation the
# compiling costs more than the running saves (a third to a half of a training test's time). This lowers how hard
# XLA optimises the machine code it emits (its backend optimisation level), not what a program computes or what a
# test asserts. Subprocesses inherit it; JAX_DISABLE_MOST_OPTIMIZATIONS=0 runs the tests optimised.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
import jax  # noqa: E402  (after the environment variable: jax reads it when it is first imported)

jax.config.update("jax_disable_most_optimizations",
                  os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"].strip().lower() in ("1", "true", "t", "yes", "y", "on"))


def shared_data_dir() -> Path | None:
    """`../shared/data` beside the repository (Tale of Two Cities, CRAFT, SyntaxGym, BLiMP), or None.

    The data is never copied into the project; tests that need it call
    `pytest.skip` when this is None.
    """
    repo_root = Path(__file__).resolve().parents[1]
    data = repo_root / ".." / "shared" / "data"
    return data.resolve() if data.is_dir() else None


@pytest.fixture
def shared_data() -> Path:
    """The shared data directory; skips the test when it is absent."""
    data = shared_data_dir()
    if data is None:
        pytest.skip("../shared/data (beside the repository) is absent")
    return data
