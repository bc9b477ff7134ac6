"""XLA's CPU code generation at its cheapest, for the tests and for the subprocesses they start.

The suite compiles thousands of small programs and runs each a few times, so
the cost of generating good machine code exceeds what the code saves:

* `--xla_backend_optimization_level=0`, `--xla_llvm_disable_expensive_passes`:
  no LLVM optimisation of the generated loops (tests/ops, 2 cores: 199 -> 142
  CPU seconds);
* `--xla_cpu_use_fusion_emitters=false`: fusions through XLA's classic
  elemental emitter instead of the MLIR fusion emitters, about 40% less CPU
  time again (tests/models/test_pushdown_lm.py: 40 -> 23 CPU seconds; the
  whole suite in docs/development.md);
* `--xla_cpu_parallel_codegen_split_count=1`: each program's LLVM module is
  compiled whole, not split into parts for compiler threads; the suite keeps
  both cores busy, so the split can only add work. Pairs of runs side by
  side, each pinned to one core: tests/models/test_pushdown_lm.py,
  tests/nn/test_ompn.py and tests/models/test_transformer_lm.py 93.2 / 95.5 /
  83.2 -> 83.5 / 83.6 / 81.0 CPU seconds; tests/train/test_loss_pins.py 132.2
  -> 124.8 (2-12% less). As the suite runs (`pytest -n 2`, unpinned, six
  modules, two alternating rounds) the difference is within the machine's
  drift: 507.7 -> 445.5 CPU seconds, then 439.5 -> 451.2. The generated code
  is the same.

Two JAX settings go with them (`CHEAP_LOCATIONS`, set in the environment, so
that subprocesses inherit them): no Python traceback in the source location of
every lowered operation (`jax_include_full_tracebacks_in_locations`,
`jax_traceback_in_locations_limit`). The locations are debugging metadata that
XLA carries through every pass; without them lowering and compilation take
about a fifth less time (tests/models/test_transformer_lm.py and
tests/nn/test_ompn.py, one process, two runs each: 57.7 and 61.0 s -> 51.2 and
44.4 s). Operation names (the name stack) stay.

XLA's own HLO passes stay on, so every program computes what it computes in
production, up to the rounding of the generated loops. `tests/conftest.py`
sets these before any JAX backend starts; a test that gives a subprocess
XLA_FLAGS of its own (simulated devices) builds them with `xla_flags(...)`.
"""

from __future__ import annotations

CHEAP_CODEGEN = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                 "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


CHEAP_LOCATIONS = {"JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS": "0", "JAX_TRACEBACK_IN_LOCATIONS_LIMIT": "0"}


def xla_flags(*extra: str) -> str:
    """XLA_FLAGS for a subprocess: the cheap code generation, then `extra` (e.g. a simulated device count)."""
    return " ".join([*CHEAP_CODEGEN, *extra])
