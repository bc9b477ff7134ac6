"""Optional dependencies (pyproject extras), imported only where they are used.

`pip install tgjax` brings what training and evaluation need; drawing
(matplotlib, the `plots` extra) and TensorBoard events (tensorboardX, the
`tensorboard` extra) are extras. `require_extra` imports one and, when it is
missing, raises an error that names the extra to install.
"""

from __future__ import annotations

import importlib
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


__all__ = ["MissingExtra", "require_extra"]
