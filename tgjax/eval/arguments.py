"""Checks of the eval commands' numeric options, made before any file is read or model loaded."""

from __future__ import annotations


def check_counts(**counts: int | None) -> None:
    """Counts given on the command line (`limit=`, `mlm_runs=`, ...) are at least 1; None means unset.

    A count of 0 would give a score over nothing (or silently drop a row); the
    `ValueError` names the option as the user typed it.
    """
    for name, value in counts.items():
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}: expected at least 1, got {value}")


__all__ = ["check_counts"]
