"""An in-process memo of XLA executables, keyed as JAX's persistent compilation cache keys them.

The suite traces many programs that are the same program: every test that
builds a fresh model and jits its step (or a fresh lambda around the same
call) lowers a module whose text equals one compiled before, and JAX, which
keys its in-memory caches on the Python function, compiles it again. Here
`jax._src.compiler.compile_or_get_cached` first looks the module up by the
persistent cache's key (the module's bytes, the devices, the compile options,
the backend and the XLA flags), so an identical module reuses the executable
already loaded; nothing is serialised or written to disk (the persistent
cache's write path is what crashed a worker, see `tests/conftest.py`).

Modules with host callbacks (`jax.debug.print`, `io_callback`) and
profile-guided compilation always compile: their callbacks are per trace.
The memo holds the most recent `MAX_EXECUTABLES` executables; where JAX's
internals differ from what this expects, it steps aside and JAX compiles as
usual.

Per module, by marker: a module marked `pytest.mark.compile_once` (one whose
runs resume or repeat runs it made before, so most of its programs recur) has
the memo while it runs (`scoped`, from `tests/conftest.py`); it is then taken
out and emptied, so no worker holds its executables for the rest of the suite.
The trainer's modules marked so took 24% less CPU time.

Suite-wide, opt-in (`TGJAX_TEST_COMPILE_MEMO=1`): it saved 5-7% of the CPU time of two
subsets of the suite, but in a full run with it on two test workers died
inside XLA's compiler late in the run (an abort, then a segmentation fault,
each while compiling a new program after thousands were held alive), which no
run without it has shown. The likely cause is the kernel's limit on memory
mappings per process (`vm.max_map_count`, 65,530 on the test machine): a
loaded CPU executable holds about 8 mappings, and a worker of the full suite
ends with 42,000-47,000 without the memo, 50,000-55,500 with it capped at
512 executables (6% of compilations were hits), so the 4,096 held before put
it past the limit.
"""

from __future__ import annotations

import collections
import contextlib
import functools
from collections.abc import Iterator

MAX_EXECUTABLES = 512  # each held executable holds ~8 of the process's memory mappings


def install() -> dict[str, int]:
    """Wraps JAX's compile entry point once per process; returns live counters ({"hits", "misses"})."""
    try:
        from jax._src import cache_key, compiler
    except ImportError:  # a JAX laid out otherwise: no memo
        return {}
    if hasattr(compiler.compile_or_get_cached, "memo_counts"):
        return compiler.compile_or_get_cached.memo_counts
    original = compiler.compile_or_get_cached
    executables: collections.OrderedDict[str, object] = collections.OrderedDict()
    counts = {"hits": 0, "misses": 0}

    @functools.wraps(original)
    def compile_or_get_cached(backend, computation, devices, compile_options, host_callbacks, *args, **kwargs):
        def compile_as_jax():
            return original(backend, computation, devices, compile_options, host_callbacks, *args, **kwargs)

        pgle_profiler = kwargs.get("pgle_profiler", args[1] if len(args) > 1 else None)
        if host_callbacks or pgle_profiler is not None:
            return compile_as_jax()
        try:
            key = cache_key.get(computation, devices, compile_options, backend)
        except Exception:  # noqa: BLE001  (a JAX whose key function differs: compile as JAX would)
            return compile_as_jax()
        executable = executables.get(key)
        if executable is not None:
            executables.move_to_end(key)
            counts["hits"] += 1
            return executable
        executable = executables[key] = compile_as_jax()
        if len(executables) > MAX_EXECUTABLES:
            executables.popitem(last=False)
        counts["misses"] += 1
        return executable

    compile_or_get_cached.memo_counts = counts
    compile_or_get_cached.memo_clear = executables.clear  # tests/executables.py drops these with JAX's caches
    compiler.compile_or_get_cached = compile_or_get_cached
    return counts


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """The memo while the block runs, then JAX's own compile entry point again and the memo's executables dropped;
    where the memo is on suite-wide already it stays on (and keeps what it holds)."""
    try:
        from jax._src import compiler
    except ImportError:  # a JAX laid out otherwise: no memo
        yield
        return
    original = compiler.compile_or_get_cached
    install()
    try:
        yield
    finally:
        if compiler.compile_or_get_cached is not original:
            compiler.compile_or_get_cached.memo_clear()
            compiler.compile_or_get_cached = original
