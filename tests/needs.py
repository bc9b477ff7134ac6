"""Skipping a test module whose optional packages are absent, without importing them at collection."""

from __future__ import annotations

import importlib.util

import pytest


def skip_module_without(*modules: str) -> None:
    """Skips the calling test module when any of `modules` is not installed. Unlike `pytest.importorskip` it only
    looks the packages up: importing distrax or rlax here would cost every worker their start-up at collection
    (TensorFlow's, when the seqio extra is installed), which the code under test avoids (`tgjax.extras`)."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install 'tgjax[rl]')", allow_module_level=True)
