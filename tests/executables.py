"""Loaded executables within the per-process limit of memory mappings.

Every CPU executable XLA loads holds about 8 memory mappings of the process
(300 small jitted functions kept alive: 439 -> 2,969 mappings), and JAX keeps
an executable loaded as long as the function it was compiled for lives
(module-level jits, cached models). A test worker of the full suite ends with
42,000-47,000 mappings, and the kernel refuses a process more than
`vm.max_map_count` (65,530 here): past it, XLA's next compilation aborts or
crashes the worker. `tests/conftest.py` therefore drops JAX's caches between
test modules once a worker holds more than `MAX_MAPPINGS`; the programs still
in use compile again when next called, and no result changes.
"""

from __future__ import annotations

from pathlib import Path

MAX_MAPPINGS = 40_000
_MAPS = Path("/proc/self/maps")


def memory_mappings() -> int | None:
    """How many memory mappings this process holds (None where /proc is absent: not Linux)."""
    try:
        with _MAPS.open("rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def release_executables_if_many(limit: int = MAX_MAPPINGS) -> bool:
    """`jax.clear_caches()`, the executable memo emptied (when it is on) and a garbage collection if this process
    holds more than `limit` mappings; whether it did."""
    held = memory_mappings()
    if held is None or held <= limit:
        return False
    import gc

    import jax

    jax.clear_caches()
    try:
        from jax._src import compiler
    except ImportError:  # a JAX laid out otherwise has no memo either (tests/compile_memo.py)
        compiler = None
    getattr(getattr(compiler, "compile_or_get_cached", None), "memo_clear", lambda: None)()  # the memo's, when on
    gc.collect()  # the executables go with their last Python references
    return True
