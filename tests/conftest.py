"""Shared test helpers: where the data beside the repository lives; XLA's CPU code generation at its cheapest.

The suite compiles thousands of small programs and runs each a few times, so
LLVM's optimisation of the generated code costs more than it saves: the tests
run with `--xla_backend_optimization_level=0` (XLA's own HLO passes stay on,
so every program computes what it computes in production, up to the rounding
of the generated loops). Measured on tests/ops, 2 cores: 199 -> 142 CPU
seconds. A test that sets XLA_FLAGS for a subprocess sets its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_CHEAP_CODEGEN = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):  # before any JAX backend starts
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *_CHEAP_CODEGEN]).strip()


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
