"""XLA's CPU code generation at its cheapest, for the tests and for the subprocesses they start.

The suite compiles thousands of small programs and runs each a few times, so
the cost of generating good machine code exceeds what the code saves:

* `--xla_backend_optimization_level=0`, `--xla_llvm_disable_expensive_passes`:
  no LLVM optimisation of the generated loops (tests/ops, 2 cores: 199 -> 142
  CPU seconds);
* `--xla_cpu_use_fusion_emitters=false`: fusions through XLA's classic
  elemental emitter instead of the MLIR fusion emitters, about 40% less CPU
  time again (tests/models/test_pushdown_lm.py: 40 -> 23 CPU seconds; the
  whole suite in docs/development.md).

XLA's own HLO passes stay on, so every program computes what it computes in
production, up to the rounding of the generated loops. `tests/conftest.py`
sets these before any JAX backend starts; a test that gives a subprocess
XLA_FLAGS of its own (simulated devices) builds them with `xla_flags(...)`.
"""

from __future__ import annotations

CHEAP_CODEGEN = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                 "--xla_cpu_use_fusion_emitters=false")


def xla_flags(*extra: str) -> str:
    """XLA_FLAGS for a subprocess: the cheap code generation, then `extra` (e.g. a simulated device count)."""
    return " ".join([*CHEAP_CODEGEN, *extra])
