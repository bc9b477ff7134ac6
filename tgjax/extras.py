"""Optional dependencies (pyproject extras), imported only where they are used.

`pip install tgjax` brings what training and evaluation need; drawing
(matplotlib, the `plots` extra) and TensorBoard events (tensorboardX, the
`tensorboard` extra) are extras. `require_extra` imports one and, when it is
missing, raises an error that names the extra to install. `rl_library`
imports distrax or rlax (the `rl` extra) without TensorFlow.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the pip extra that brings it."""


def require_extra(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Imports `module`, or raises `MissingExtra` saying `pip install 'tgjax[EXTRA]'`."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtra(f"{purpose} needs the Python package {module!r}, which is not installed; "
                           f"install it with: pip install 'tgjax[{extra}]'") from e


def rl_library(module: str) -> ModuleType:
    """Imports distrax or rlax (the `rl` extra) with TensorFlow hidden.

    Both reach TensorFlow Probability's JAX substrate. Where TensorFlow is installed (the `seqio` extra brings
    it), that substrate imports it only to copy TensorFlow's docstrings onto its functions: 5-9 s of start-up
    for every PPO run, and nothing it computes. Where TensorFlow is already loaded (a seqio pipeline in the same
    process), TFP also loads its Keras layers, which fail without the separate `tf_keras` package. So while
    `module` is imported, `import tensorflow` fails as if TensorFlow were absent, the case TFP handles by
    skipping both; afterwards `sys.modules` holds what it held before (TensorFlow imports, or is, as usual)."""
    if sys.modules.get(module) is not None:  # imported already: nothing to hide TensorFlow from
        return sys.modules[module]
    absent = "tensorflow" not in sys.modules
    hidden = sys.modules.get("tensorflow")
    sys.modules["tensorflow"] = None  # type: ignore[assignment]  # Python's "import blocked" sentinel
    try:
        return require_extra(module, extra="rl", purpose="Craft reinforcement learning")
    finally:
        if absent:
            del sys.modules["tensorflow"]
        else:
            sys.modules["tensorflow"] = hidden  # type: ignore[assignment]


__all__ = ["MissingExtra", "require_extra", "rl_library"]
