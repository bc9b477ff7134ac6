"""A script of benchmarks/ imported as a module for its tests (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> Iterator[ModuleType]:
    """Yields benchmarks/NAME.py as a module, registered in sys.modules while it is in use (its dataclasses look
    their module up while they are built), removed afterwards; for a fixture to `yield from`."""
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
