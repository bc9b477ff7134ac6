"""Forward+backward time and peak memory of the stack-attention kernels, beside the slow oracles.

Nondeterministic stack (dVPDA): batch 8, |Q| = |Γ| = 3, m = 10, n in
{32, 64, 128, 256}; superposition stack: batch 8, m = 32, same n. Each
configuration runs in its own subprocess, so that its peak resident memory
(getrusage maxrss of that process) is its own; XLA's own account of the
compiled step (arguments + outputs + scratch) is printed beside it. Step
time is the best of a few runs after one warm-up run; compile time (each n
compiles anew) is reported apart. The slow oracles of tests/ops/nd_oracle.py
(eqs. 21-29 and 5-8 written out, jitted) run only at small n and are
compared at a common n. Growth exponents are least-squares slopes of
log(time) and log(memory) against log(n).

For scale, the authors' PyTorch implementation of the dVPDA takes about
5.6 s (n = 32) and 56.7 s (n = 64) for forward+backward at batch 8,
|Q| = |Γ| = 3, m = 10 on 2 cores of this kind of machine, with peak memory
0.66 GB and 1.9 GB. Bars: >= 150x faster than that at n = 64
(under 0.378 s); peak RSS at n = 256 at most 0.89 GB (half of the 1.78 GB
measured before); peak memory grows no faster than n^2.

Peak RSS counts the whole process. Two parts of it are not the kernel's:
JAX itself with one trivial compiled program (~0.20 GB, printed as the
floor), and the heap the XLA compiler frees but glibc keeps (~0.33 GB after
compiling the n = 256 step, which the step's freshly allocated buffers
cannot reuse). By default each child calls malloc_trim(0) after compiling,
so that heap goes back to the system before the step runs; `--no-trim`
measures the process as it is, and the new kernel also runs untrimmed at
`--untrimmed-ns` (256) in the same invocation, so both figures are printed.

The previous dVPDA kernel (tgjax/ops/nondeterministic.py at git revision
--previous-rev, loaded from git into a scratch module) runs in the same
invocation at the same n, so that the ratio new/previous is measured under
the same machine load; the load average is printed before and after. The
machine is shared: absolute times move with the load, the ratios less so.

    python benchmarks/stack_attention.py [--ns 32,64,128,256] [--oracle-ns 4,8,12] [--repeats 3]
        [--previous-rev REV | --previous-rev none] [--no-trim] [--untrimmed-ns 256]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # for the oracles in tests/

AUTHORS_SECONDS = {32: 5.6, 64: 56.7}
AUTHORS_PEAK_GB = {32: 0.66, 64: 1.9}
BAR_SECONDS_N64 = 56.7 / 150
BASELINE_PEAK_GB_N256 = 1.78  # peak RSS at n = 256 of the kernel before its memory reduction
BAR_MEMORY_GB_N256 = BASELINE_PEAK_GB_N256 / 2
PREVIOUS_REV = "5d484fb"  # the kernel before the folded chart
KERNEL_PATH = "tgjax/ops/nondeterministic.py"
B, Q, S, M_ND, M_SUP = 8, 3, 3, 10, 32


# --------------------------------------------------------------------------- child: one measurement


def _inputs(kind: str, n: int):
    import numpy as np

    rng = np.random.default_rng(n)
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    if kind == "sup":
        logits = rng.normal(size=(B, n, 3))
        actions = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        return (f32(actions), f32(rng.normal(size=(B, n, M_SUP)))), rng.normal(size=(B, n, M_SUP))
    args = (
        rng.normal(size=(B, n, Q, S, Q, S)),
        rng.normal(size=(B, n, Q, S, Q, S)),
        rng.normal(size=(B, n, Q, S, Q)),
        -np.logaddexp(0.0, -rng.normal(size=(B, n, M_ND))),  # log sigmoid, as in stack attention
        -np.logaddexp(0.0, -rng.normal(size=(M_ND,))),
    )
    return tuple(f32(a) for a in args), rng.normal(size=(B, n, Q, S, M_ND))


def _previous_kernel(rev: str):
    """nondeterministic_stack as it was at git revision `rev`, imported from a scratch file."""
    import importlib.util
    import tempfile

    source = subprocess.run(
        ["git", "show", f"{rev}:{KERNEL_PATH}"], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    path = Path(tempfile.mkdtemp()) / "previous_nondeterministic.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("previous_nondeterministic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.nondeterministic_stack


def _function(kind: str, impl: str):
    from tests.ops.nd_oracle import nondeterministic_oracle, superposition_oracle
    from tgjax.ops import nondeterministic_stack, superposition_stack

    if impl.startswith("previous@"):
        return _previous_kernel(impl.split("@", 1)[1])
    return {
        ("nd", "kernel"): nondeterministic_stack,
        ("nd", "oracle"): nondeterministic_oracle,
        ("sup", "kernel"): superposition_stack,
        ("sup", "oracle"): superposition_oracle,
    }[(kind, impl)]


def measure(kind: str, impl: str, n: int, repeats: int, trim: bool = True) -> dict:
    """Compile and time forward+backward of sum(readings * w) once, in this process.

    trim: after compiling, hand the heap the compiler freed back to the system (glibc
    malloc_trim(0)); glibc keeps it otherwise (~0.33 GB at n = 256), and the step's buffers, which
    are allocated afresh, cannot reuse it. The RSS before and after the trim are both reported.
    """
    import jax
    import jax.numpy as jnp

    jax.block_until_ready(jax.jit(lambda x: x * 2)(jnp.ones(3)))
    floor = _rss_now_gb()  # the process with JAX and one trivial compiled program: not the kernel's
    args, weights = _inputs(kind, n)
    fn = _function(kind, impl)
    argnums = tuple(range(len(args)))
    step = jax.jit(jax.grad(lambda *a: jnp.sum(fn(*a) * weights), argnums=argnums))
    rss_before = _maxrss_gb()
    t0 = time.perf_counter()
    compiled = step.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    rss_after_compile = _rss_now_gb()
    peak_compile = _maxrss_gb()
    if trim:
        _malloc_trim()
    rss_after_trim = _rss_now_gb()
    jax.block_until_ready(compiled(*args))  # warm-up
    times, cpu_times = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), _cpu_s()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
        cpu_times.append(_cpu_s() - c0)
    mem = compiled.memory_analysis()
    xla_bytes = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return {
        "kind": kind,
        "impl": impl,
        "n": n,
        "step_s": min(times),
        "cpu_s": min(cpu_times),
        "compile_s": compile_s,
        "peak_rss_gb": _maxrss_gb(),
        "rss_before_compile_gb": rss_before,
        "rss_after_compile_gb": rss_after_compile,
        "peak_rss_compile_gb": peak_compile,
        "rss_after_trim_gb": rss_after_trim,
        "trimmed": trim,
        "floor_rss_gb": floor,
        "xla_gb": xla_bytes / 2**30,
        "xla_temp_gb": mem.temp_size_in_bytes / 2**30,
    }


def _malloc_trim() -> None:
    """glibc's malloc_trim(0): return freed heap pages to the system (no-op where there is no glibc)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _cpu_s() -> float:
    """CPU seconds (user + system, all threads) this process has used: steadier than wall time
    on a shared machine, where other jobs stretch the wall clock."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _maxrss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _rss_now_gb() -> float:
    """Resident memory now (Linux /proc/self/statm; NaN elsewhere): what compiling left behind."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30


# --------------------------------------------------------------------------- parent: the table


def run_child(kind: str, impl: str, n: int, repeats: int, timeout: float, trim: bool = True) -> dict | None:
    cmd = [sys.executable, __file__, "--child", kind, impl, str(n), str(repeats), "trim" if trim else "no-trim"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        print(f"  {kind} {impl} n={n}: timed out after {timeout:.0f} s", flush=True)
        return None
    if out.returncode != 0:
        print(f"  {kind} {impl} n={n}: failed\n{out.stderr[-2000:]}", flush=True)
        return None
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"  {kind:3s} {impl:16s} n={n:4d}  step {result['step_s']:8.3f} s (CPU {result['cpu_s']:8.3f} s)"
        f"  compile {result['compile_s']:6.1f} s"
        f"  peak RSS {result['peak_rss_gb']:6.2f} GB  XLA {result['xla_gb']:6.3f} GB",
        flush=True,
    )
    return result


def slope(points) -> float:
    """Least-squares slope of log(y) against log(x)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _int_list(text: str) -> list[int]:
    """"32,64" -> [32, 64]; "" -> [] (e.g. `--oracle-ns ""` skips the oracles)."""
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ns", default="32,64,128,256")
    ap.add_argument("--oracle-ns", default="4,8,12", help="small n for the dVPDA oracle (slow to compile)")
    ap.add_argument("--sup-oracle-ns", default="8,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--previous-rev", default=PREVIOUS_REV, help="git revision of the previous kernel, or none")
    ap.add_argument("--trim", action=argparse.BooleanOptionalAction, default=True,
                    help="malloc_trim(0) after compiling (the compiler's freed heap back to the system)")
    ap.add_argument("--no-sup", action="store_true", help="the dVPDA only (no superposition stack rows)")
    ap.add_argument("--untrimmed-ns", default="256", help="n at which the new kernel also runs without the trim")
    args = ap.parse_args()
    previous = None if args.previous_rev == "none" else f"previous@{args.previous_rev}"
    ns, oracle_ns, sup_oracle_ns = (_int_list(v) for v in (args.ns, args.oracle_ns, args.sup_oracle_ns))
    untrimmed_ns = [n for n in _int_list(args.untrimmed_ns) if n in ns] if args.trim else []

    print(f"load average {os.getloadavg()}, {os.cpu_count()} CPUs; float32; batch {B}", flush=True)
    rows = {}
    plan = []
    for n in sorted(set(ns) | set(oracle_ns)):  # new and previous kernel side by side, same load
        plan += [("nd", "kernel", n)] + ([("nd", previous, n)] if previous and n in ns else [])
        plan += [("nd", "kernel-untrimmed", n)] if n in untrimmed_ns else []
    plan += [("nd", "oracle", n) for n in oracle_ns]
    if not args.no_sup:
        plan += [("sup", "kernel", n) for n in sorted(set(ns) | set(sup_oracle_ns))]
        plan += [("sup", "oracle", n) for n in sup_oracle_ns]
    for kind, impl, n in plan:
        repeats = args.repeats if n <= 128 or impl == "oracle" else max(1, args.repeats - 1)
        trim = args.trim and impl != "kernel-untrimmed"
        rows[kind, impl, n] = run_child(kind, impl.replace("-untrimmed", ""), n, repeats, args.timeout, trim)
        if impl == "kernel" and kind == "nd":
            print(f"    load average {os.getloadavg()}", flush=True)
    print(f"load average {os.getloadavg()}", flush=True)

    def get(kind, impl, n, key):
        r = rows.get((kind, impl, n))
        return r[key] if r else float("nan")

    print()
    print(f"Nondeterministic stack (dVPDA), B={B}, |Q|=|Γ|={Q}, m={M_ND}, float32, forward+backward")
    head = f"{'n':>5} {'step s':>9} {'compile s':>10} {'peak RSS GB':>12} {'XLA GB':>8}"
    print(f"{head} {'authors s':>10} {'authors/ours':>13} {'prev s':>8} {'prev RSS':>9} {'prev/ours':>10}"
          f" {'CPU s':>7} {'prev CPU s':>10} {'prev/ours CPU':>13}")
    for n in sorted(set(ns) | set(oracle_ns)):
        authors = AUTHORS_SECONDS.get(n)
        step = get("nd", "kernel", n, "step_s")
        ratio = f"{authors / step:12.0f}x" if authors else " " * 13
        prev = get("nd", previous, n, "step_s") if previous else float("nan")
        cpu = get("nd", "kernel", n, "cpu_s")
        prev_cpu = get("nd", previous, n, "cpu_s") if previous else float("nan")
        print(
            f"{n:5d} {step:9.3f} {get('nd', 'kernel', n, 'compile_s'):10.1f}"
            f" {get('nd', 'kernel', n, 'peak_rss_gb'):12.2f} {get('nd', 'kernel', n, 'xla_gb'):8.3f}"
            f" {authors if authors else '':>10} {ratio} {prev:8.3f}"
            f" {get('nd', previous, n, 'peak_rss_gb') if previous else float('nan'):9.2f} {prev / step:9.2f}x"
            f" {cpu:7.3f} {prev_cpu:10.3f} {prev_cpu / cpu:12.2f}x"
        )
    print("  slow oracle (eqs. 21-29, jitted):")
    for n in oracle_ns:
        print(
            f"{n:5d} {get('nd', 'oracle', n, 'step_s'):9.3f} {get('nd', 'oracle', n, 'compile_s'):10.1f}"
            f" {get('nd', 'oracle', n, 'peak_rss_gb'):12.2f} {get('nd', 'oracle', n, 'xla_gb'):8.3f}"
        )
    print()
    print(f"Superposition stack, B={B}, m={M_SUP}, float32, forward+backward")
    print(head)
    for n in sorted(set(ns) | set(sup_oracle_ns)):
        print(
            f"{n:5d} {get('sup', 'kernel', n, 'step_s'):9.4f} {get('sup', 'kernel', n, 'compile_s'):10.1f}"
            f" {get('sup', 'kernel', n, 'peak_rss_gb'):12.2f} {get('sup', 'kernel', n, 'xla_gb'):8.3f}"
        )
    print("  slow oracle (eqs. 5-8, jitted):")
    for n in sup_oracle_ns:
        print(
            f"{n:5d} {get('sup', 'oracle', n, 'step_s'):9.4f} {get('sup', 'oracle', n, 'compile_s'):10.1f}"
            f" {get('sup', 'oracle', n, 'peak_rss_gb'):12.2f} {get('sup', 'oracle', n, 'xla_gb'):8.3f}"
        )

    print()
    print("Ratios and growth")
    commons = (("nd", oracle_ns, "dVPDA"), ("sup", sup_oracle_ns, "superposition"))
    for kind, oracle_sizes, label in commons:
        if oracle_sizes:  # the largest n run by both the oracle and the kernel
            common = max(oracle_sizes)
            o, k = get(kind, "oracle", common, "step_s"), get(kind, "kernel", common, "step_s")
            oc, kc = get(kind, "oracle", common, "compile_s"), get(kind, "kernel", common, "compile_s")
            print(f"  {label}: oracle / kernel at n = {common}: step {o / k:.1f}x, compile {oc / kc:.1f}x")
        pts = [(n, get(kind, "kernel", n, "step_s")) for n in ns if rows.get((kind, "kernel", n))]
        mem = [(n, get(kind, "kernel", n, "xla_gb")) for n in ns if rows.get((kind, "kernel", n))]
        rss = [(n, get(kind, "kernel", n, "peak_rss_gb")) for n in ns if rows.get((kind, "kernel", n))]
        if len(pts) >= 2:
            print(
                f"  {label}: growth exponent over n = {[n for n, _ in pts]}: time {slope(pts):.2f},"
                f" XLA memory {slope(mem):.2f}, peak RSS {slope(rss):.2f}"
            )
        opts = [(n, get(kind, "oracle", n, "step_s")) for n in (oracle_ns if kind == "nd" else sup_oracle_ns)]
        if len(opts) >= 2:
            print(f"  {label} oracle: time exponent over n = {[n for n, _ in opts]}: {slope(opts):.2f}")
    for n in (32, 64):
        if rows.get(("nd", "kernel", n)):
            t = get("nd", "kernel", n, "step_s")
            print(
                f"  dVPDA vs the authors' PyTorch at n = {n}: {AUTHORS_SECONDS[n] / t:.0f}x faster;"
                f" peak RSS {get('nd', 'kernel', n, 'peak_rss_gb'):.2f} GB vs {AUTHORS_PEAK_GB[n]} GB"
            )
    print()
    print("Bars")
    t64 = get("nd", "kernel", 64, "step_s")
    print(f"  n = 64 forward+backward under {BAR_SECONDS_N64:.3f} s (150x the authors): {t64:.3f} s ->"
          f" {'PASS' if t64 < BAR_SECONDS_N64 else 'FAIL'}")
    r256 = rows.get(("nd", "kernel", 256))
    if r256:
        print(f"  n = 256 peak RSS at most {BAR_MEMORY_GB_N256:.2f} GB: {r256['peak_rss_gb']:.2f} GB"
              f" ({BASELINE_PEAK_GB_N256 / r256['peak_rss_gb']:.2f}x below the {BASELINE_PEAK_GB_N256} GB baseline;"
              f" bar 2x) -> {'PASS' if r256['peak_rss_gb'] <= BAR_MEMORY_GB_N256 else 'FAIL'}")
        print(f"    of which XLA's compiled scratch {r256['xla_temp_gb']:.3f} GB; the process held"
              f" {r256['rss_after_compile_gb']:.2f} GB after compiling (peak while compiling"
              f" {r256['peak_rss_compile_gb']:.2f} GB), {r256['rss_after_trim_gb']:.2f} GB after"
              f" {'the malloc_trim' if r256['trimmed'] else 'no trim'}; JAX with a trivial program holds"
              f" {r256['floor_rss_gb']:.2f} GB")
        share = r256["peak_rss_gb"] - r256["floor_rss_gb"]
        print(f"    the kernel's own share (peak RSS - that floor): {share:.2f} GB")
        u256 = rows.get(("nd", "kernel-untrimmed", 256))
        if u256:
            print(f"    without the trim (glibc keeps the compiler's freed heap): peak RSS {u256['peak_rss_gb']:.2f} GB"
                  f" ({BASELINE_PEAK_GB_N256 / u256['peak_rss_gb']:.2f}x below the baseline) ->"
                  f" {'PASS' if u256['peak_rss_gb'] <= BAR_MEMORY_GB_N256 else 'FAIL'}")
        p256 = rows.get(("nd", previous, 256)) if previous else None
        if p256:
            print(f"    previous kernel: peak RSS {p256['peak_rss_gb']:.2f} GB,"
                  f" XLA scratch {p256['xla_temp_gb']:.3f} GB -> ratios previous/new:"
                  f" RSS {p256['peak_rss_gb'] / r256['peak_rss_gb']:.2f}x,"
                  f" XLA scratch {p256['xla_temp_gb'] / r256['xla_temp_gb']:.2f}x")
    mem = [(n, get("nd", "kernel", n, "xla_gb")) for n in ns if rows.get(("nd", "kernel", n))]
    if len(mem) >= 2:
        e = slope(mem)
        print(f"  peak memory grows no faster than n^2: XLA memory exponent {e:.2f} ->"
              f" {'PASS' if e <= 2.1 else 'FAIL'}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, kind, impl, n, repeats, trim = sys.argv
        print(json.dumps(measure(kind, impl, int(n), int(repeats), trim == "trim")))
    else:
        main()
