"""Shared test helpers: where the data beside the repository lives; XLA's CPU code generation at its cheapest.

The suite compiles thousands of small programs and runs each a few times, so
the quality of the generated code costs more than it saves: the tests run with
`tests.xla_flags.CHEAP_CODEGEN` (no LLVM optimisation, XLA's classic fusion
emitter) and without Python tracebacks in the lowered programs' source
locations (`CHEAP_LOCATIONS`). XLA's own HLO passes stay on, so every program
computes what it computes in production, up to the rounding of the generated
loops. A test that sets XLA_FLAGS for a subprocess builds them with
`tests.xla_flags.xla_flags`.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executables import release_executables_if_many
from tests.xla_flags import CHEAP_CODEGEN, CHEAP_LOCATIONS

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):  # before any JAX backend starts
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *CHEAP_CODEGEN]).strip()
for name, value in CHEAP_LOCATIONS.items():  # before JAX is imported; subprocesses inherit them
    os.environ.setdefault(name, value)

# Fewer, cheaper garbage collections. Tracing and lowering allocate millions of short-lived objects, so with
# Python's default thresholds (700, 10, 10) a worker collects thousands of times, and every full collection walks
# every object that JAX, Flax and the test modules created at import (tests/models/test_transformer_lm.py and
# tests/nn/test_ompn.py in one process: 5.0-13.5 s in about 1,450 collections; with these settings 0.5-4.1 s in 48,
# the same programs compiled and the same peak memory). Objects alive once the tests are collected are frozen:
# never collected, never walked.
gc.set_threshold(20_000, 20, 20)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()


if os.environ.get("TGJAX_TEST_COMPILE_MEMO") == "1":  # opt-in: identical modules compile once per process
    from tests.compile_memo import install as install_compile_memo

    install_compile_memo()


@pytest.fixture(scope="session", autouse=True)
def compilation_cache() -> Iterator[dict[str, str]]:
    """JAX's persistent compilation cache, opt-in: with `TGJAX_TEST_JAX_CACHE=DIR` every test, xdist worker and the
    subprocesses given this fixture's environment (`{"JAX_COMPILATION_CACHE_DIR": DIR}`) share DIR; without it
    nothing is written to disk (`{}`).

    Off by default because writing executables compiled with the cheap code generation to the cache crashed a
    test worker (a segmentation fault in `compilation_cache.put_executable_and_time`) in one of four full runs;
    the cache changes no result, it only skips recompiling identical programs (about 9% of tests/ops' CPU time).
    """
    import jax

    directory = os.environ.get("TGJAX_TEST_JAX_CACHE")
    if not directory:
        yield {}
        return
    previous = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs)
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield {"JAX_COMPILATION_CACHE_DIR": directory}
    jax.config.update("jax_compilation_cache_dir", previous[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", previous[1])


@pytest.fixture(scope="module", autouse=True)
def identical_programs_compile_once(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a module marked `pytest.mark.compile_once`, a module lowered again reuses the executable compiled for it
    (tests/compile_memo.py's `scoped`); the memo and what it holds go when the module ends."""
    if request.node.get_closest_marker("compile_once") is None:
        yield
        return
    from tests.compile_memo import scoped

    with scoped():
        yield


@pytest.fixture(scope="module", autouse=True)
def executables_within_the_mapping_limit() -> Iterator[None]:
    """After each module, JAX's caches are dropped if the worker holds too many memory mappings
    (`tests/executables.py`: each loaded executable holds about 8, and the kernel's limit is 65,530)."""
    yield
    release_executables_if_many()


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


# -- pytest-xdist: the tests that share an expensive setup run on one worker ----------------------------------------
#
# `-n 2` alone hands tests out one at a time (`--dist load`), so the tests of one module land on both workers and
# each worker builds the module's fixtures again: a training run, an 8-device subprocess, the bad-input driver (26 s,
# run twice). Here a module of XDIST_GROUPS (path relative to tests/ -> group) goes to one worker, whole, and the
# groups are handed out first (the largest first); every other test is still handed out on its own to whichever
# worker is free. Modules that share a per-process cache (`functools.cache`d models, runs and vocabularies imported
# from one another) share a group.
XDIST_GROUPS = {
    "test_bad_input.py": "bad_input",
    "test_bad_input_limits.py": "bad_input_limits",
    "test_bad_checkpoints.py": "trained_run", "test_bad_input_flags.py": "trained_run",
    "data/test_logic.py": "logic", "data/test_listops.py": "listops",
    "eval/test_pushdown_eval.py": "pushdown_eval", "eval/test_dyck_eval.py": "dyck_eval",
    # tests/infer/test_beam.py's tiny models and tests/infer/test_scoring.py's trained TG, and their importers
    **{name: "tiny_models" for name in (
        "infer/test_beam.py", "infer/test_sampling.py", "infer/test_device_beam.py", "infer/test_choe_charniak.py",
        "infer/test_ensemble.py", "infer/test_scoring.py", "infer/test_perplexity.py", "eval/test_parse.py",
        "eval/test_pos_tags_eval.py", "eval/test_rerank.py", "eval/test_shards.py", "eval/test_search_errors.py")},
    "infer/test_api.py": "onlstm_workdir", "infer/test_word_scorers.py": "onlstm_workdir",
    "infer/test_onlstm_parser.py": "onlstm_parser",
    "models/test_stack_lm.py": "stack_lm", "nn/test_stack_attention.py": "stack_attention",
    **{f"train/{name}.py": name for name in (
        "test_pushdown_task", "test_craft_bc_task", "test_classification_task", "test_mlm_task", "test_cfl_resume",
        "test_onlstm_task", "test_toy_family", "test_resume", "test_remat_policies", "test_family_sharding")},
    # tests/train/conftest.py's eight-device run and two-process probe
    **{f"train/{name}.py": "processes" for name in ("test_sharding", "test_fsdp", "test_preemption",
                                                     "test_bucket_workdir")},
}


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # an xdist hook; before xdist's own choice
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """For `--dist load` (what `-n N` alone means): xdist's scope scheduling, a module of XDIST_GROUPS being one
    unit of its group, every other test one unit of its own. (Not `--dist loadgroup` with `xdist_group` marks: with
    pytest 9, pytest-xdist 3.8 cannot rename the tests it groups, and groups none.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            group = XDIST_GROUPS.get(path.removeprefix("tests/"))
            return f"group:{group}" if group and path.startswith("tests/") else nodeid

    return GroupScheduling(config, log)


# -- where the suite's time goes, opt-in: TGJAX_TEST_COMPILE_STATS=DIR ------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def compile_stats() -> Iterator[None]:
    """With `TGJAX_TEST_COMPILE_STATS=DIR`, each worker writes DIR/<worker>.json at the end: the seconds JAX spent
    tracing, lowering and compiling (its own duration events), so that the suite's time can be split into
    compilation and the rest, and each test's XLA compile seconds and program count. Off by default: it changes
    nothing a test computes."""
    directory = os.environ.get("TGJAX_TEST_COMPILE_STATS")
    if not directory:
        yield
        return
    import json
    import time

    import jax

    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    by_test: dict[str, list[float]] = {}  # test id -> [compile seconds, programs compiled]

    def listen(event: str, duration: float, **_) -> None:
        totals[event] = totals.get(event, 0.0) + duration
        counts[event] = counts.get(event, 0) + 1
        if event.endswith("backend_compile_duration"):
            test = os.environ.get("PYTEST_CURRENT_TEST", "(outside a test)").rsplit(" (", 1)[0]
            entry = by_test.setdefault(test, [0.0, 0])
            entry[0] += duration
            entry[1] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    start = time.perf_counter()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(directory).mkdir(parents=True, exist_ok=True)
    stats = {"wall": time.perf_counter() - start, "seconds": totals, "counts": counts, "compile_by_test": by_test}
    (Path(directory) / f"{worker}.json").write_text(json.dumps(stats, indent=1))
