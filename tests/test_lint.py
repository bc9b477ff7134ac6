"""Lint and types, run beside the tests: `ruff check` over the tree and `mypy` over the package.

Their settings are pyproject.toml's [tool.ruff] and [tool.mypy] sections (the
README says what mypy checks). Either tool missing (it is in the `test`
extra) skips its test with a message instead of failing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_is_clean():
    result = run_tool("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_mypy_is_clean():
    result = run_tool("mypy")  # files and settings from pyproject.toml
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"
