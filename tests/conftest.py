"""Shared test helpers: where the data beside the repository lives."""

from __future__ import annotations

from pathlib import Path

import pytest


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
