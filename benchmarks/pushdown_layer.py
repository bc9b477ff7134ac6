"""A Pushdown layer against a plain attention layer of the same size, forward+backward.

Three layers, each the release's post-LN block (`tgjax.nn.pushdown_attention.PushdownLayer`:
attention with relative positions, ReLU FFN 4d), on x [B, T, d] with a stack
tape [B, T, T] of depths < 50:

  plain     the same block without the depth term (`num_depths=0`);
  pushdown  the depth term as built: q·β for every depth value `[B, H, T, D]`, gathered by the tape;
  keys3d    the paper's Fig. 7 / the release's way: augmented keys k_j + β[W[i, j]] materialised
            `[B, T, T, H, d_head]`, then a batched product with q (for contrast; written here).

A step is jit(value_and_grad) of sum(y * r) with respect to the parameters and
x, float32. Memory: XLA's account of the compiled step (`memory_analysis()`,
temporaries), and the peak RSS of a subprocess that runs only that layer, less
its RSS before the first step (the runtime and the inputs). Time: median of
`--repeats` steps after one warm-up, each layer in its own process, so a
shared machine's load differs between them: read time ratios loosely. The
3-D-key layer needs ~T²·d·B·4 bytes per copy of its keys (6 GiB at the
default size): it is compiled at full size for its memory account but run at
`--batch-3d` rows (default 1).

    python benchmarks/pushdown_layer.py [--batch 8] [--seq 512] [--d 768] [--heads 12] [--repeats 3]

Bar: pushdown / plain memory <= 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tgjax.nn.pushdown_attention import PushdownAttention, PushdownLayer  # noqa: E402

NUM_DEPTHS = 50


class Keys3DAttention(PushdownAttention):
    """`PushdownAttention` scoring with materialised 3-D keys (the release's way), for contrast."""

    def scores(self, q, k, tape, distance):
        return keys3d_scores(self, q, k, tape, distance)


def keys3d_scores(attention, q, k, tape, distance):
    """The release's scores: (q · (k_j + β[W[i, j]]) + q · P_{i-j}) / sqrt(d_head) with 3-D keys."""
    beta = attention.depth_embedding[...]
    depth = jnp.clip(tape, 0, attention.num_depths - 1)
    augmented = k[:, None, :, :, :] + beta[depth][:, :, :, None, :]  # [B,T,T,H,dh]
    content_and_depth = jnp.einsum("bthk,btshk->bhts", q, augmented)
    rel_keys = jnp.einsum("pd,dhk->phk", attention.position_table[...], attention.rel_key[...])
    by_distance = jnp.einsum("bthk,phk->bhtp", q, rel_keys)
    index = jnp.clip(distance, 0, attention.max_relative_position).astype(jnp.int32)[:, None]
    position = jnp.take_along_axis(by_distance, index, axis=-1)
    return (content_and_depth + position) / np.sqrt(attention.head_dim)


def make_step(kind: str, B: int, T: int, d: int, heads: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    readout = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    tape = jnp.asarray(np.tril(rng.integers(0, NUM_DEPTHS, size=(B, T, T))), jnp.int32)
    layer = PushdownLayer(d, heads, 4 * d, num_depths=0 if kind == "plain" else NUM_DEPTHS,
                          max_relative_position=T, dropout=0.0, rngs=nnx.Rngs(seed))
    if kind == "keys3d":
        layer.attention.__class__ = Keys3DAttention
    graphdef, params, rest = nnx.split(layer, nnx.Param, ...)

    def loss(params, x, tape):
        return jnp.sum(nnx.merge(graphdef, params, rest)(x, tape) * readout)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    return step, (params, x, tape)


def temp_bytes(step, args) -> int:
    analysis = step.lower(*args).compile().memory_analysis()
    return -1 if analysis is None else int(analysis.temp_size_in_bytes)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def run_one(kind: str, B: int, T: int, d: int, heads: int, repeats: int, run_batch: int) -> dict:
    """One layer in this process: compiled temp bytes at B, then run at run_batch: time and RSS."""
    full_temp = temp_bytes(*make_step(kind, B, T, d, heads))
    step, args = make_step(kind, run_batch, T, d, heads)
    run_temp = temp_bytes(step, args) if run_batch != B else full_temp
    before = current_rss_mib()
    jax.block_until_ready(step(*args))  # warm-up (compile)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(step(*args))
        times.append(time.perf_counter() - start)
    return dict(kind=kind, temp_full=full_temp, temp_run=run_temp, run_batch=run_batch,
                median_s=statistics.median(times), peak_rss_mib=rss_mib(), rss_before_mib=before)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--d", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-3d", type=int, default=1, help="rows the 3-D-key layer is run at (memory)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one layer, print JSON
    args = parser.parse_args(argv)
    size = (args.batch, args.seq, args.d, args.heads)
    if args.one:
        run_batch = args.batch_3d if args.one == "keys3d" else args.batch
        print(json.dumps(run_one(args.one, *size, args.repeats, run_batch)))
        return
    print(f"devices: {jax.devices()}  cpus: {os.cpu_count()}  float32  load average {os.getloadavg()[0]:.2f}")
    print(f"B={args.batch} T={args.seq} d={args.d} heads={args.heads} depth table {NUM_DEPTHS}, forward+backward")
    rows = {}
    for kind in ("plain", "pushdown", "keys3d"):
        out = subprocess.run([sys.executable, __file__, "--one", kind, "--batch", str(args.batch), "--seq",
                              str(args.seq), "--d", str(args.d), "--heads", str(args.heads), "--repeats",
                              str(args.repeats), "--batch-3d", str(args.batch_3d)],
                             capture_output=True, text=True)
        if out.returncode:
            print(f"  {kind}: failed\n{out.stderr[-2000:]}")
            continue
        rows[kind] = row = json.loads(out.stdout.strip().splitlines()[-1])
        grown = row["peak_rss_mib"] - row["rss_before_mib"]
        print(f"  {kind:8s} temp {row['temp_full'] / 2**20:9.1f} MiB at B={args.batch}; run at B={row['run_batch']}: "
              f"temp {row['temp_run'] / 2**20:8.1f} MiB, peak RSS {row['peak_rss_mib']:8.1f} MiB "
              f"(+{grown:7.1f} over the start), median step {row['median_s'] * 1e3:8.1f} ms")
    # Time ratio: both layers in this process, stepped alternately, so the machine's load falls on both alike.
    steps = {kind: make_step(kind, *size) for kind in ("plain", "pushdown")}
    for step, step_args in steps.values():
        jax.block_until_ready(step(*step_args))
    times = {kind: [] for kind in steps}
    for _ in range(args.repeats):
        for kind, (step, step_args) in steps.items():
            start = time.perf_counter()
            jax.block_until_ready(step(*step_args))
            times[kind].append(time.perf_counter() - start)
    medians = {kind: statistics.median(ts) for kind, ts in times.items()}
    print(f"  alternating in one process: plain {medians['plain'] * 1e3:.1f} ms, pushdown "
          f"{medians['pushdown'] * 1e3:.1f} ms per step (median of {args.repeats}); "
          f"load average now {os.getloadavg()[0]:.2f}")
    if "plain" in rows and "pushdown" in rows:
        plain, push = rows["plain"], rows["pushdown"]
        grow = lambda r: r["peak_rss_mib"] - r["rss_before_mib"]  # noqa: E731
        print(f"ratio pushdown / plain: temp memory {push['temp_full'] / plain['temp_full']:.3f}x (bar <= 1.2x), "
              f"peak RSS {push['peak_rss_mib'] / plain['peak_rss_mib']:.3f}x "
              f"(growth {grow(push) / max(grow(plain), 1e-9):.3f}x), "
              f"time {medians['pushdown'] / medians['plain']:.2f}x")
    if "keys3d" in rows and "plain" in rows:
        print(f"ratio keys3d / plain: temp memory {rows['keys3d']['temp_full'] / rows['plain']['temp_full']:.2f}x "
              f"at B={args.batch} (compiled, not run)")


if __name__ == "__main__":
    main()
