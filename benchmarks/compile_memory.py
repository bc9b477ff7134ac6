"""Compile time and peak memory of a tg_bllip-shaped train step with and without scan and remat, as ratios.

The model is configs/tg_bllip.py's shape (16 layers, 8 heads, FFN 4 d,
T = M = 256) at a reduced width on CPU (d = 256 by default; `--d-model 1024
--vocab 32768` is TG-252M itself). The step is the trainer's own
(`tgjax.train.tasks.treebank_lm.state.make_train_step`: forward, loss, backward, clipped Adam),
lowered and compiled from abstract arrays for each variant:

    default      layers in a list, no remat (today's model)
    remat        nnx.remat around each layer
    scan         layers stacked under nnx.scan
    scan+remat   both

Printed per variant: lowering and compile seconds, XLA's buffer assignment
(arguments, outputs, temporaries; "peak" = arguments + outputs + temporaries
- aliased, the most the step holds at once), and each as a ratio to the
default. `--layers 4 16` also shows how compile time grows with depth (the
point of scan: it should not). `--steps N` times N executed steps as well
(remat trades compute for memory). Memory figures are exact for the
compiled program; times vary with the machine's load (printed).

    python benchmarks/compile_memory.py                    # 16 layers, d=256, batch 8 (CPU: a few minutes)
    python benchmarks/compile_memory.py --layers 4 16      # depth growth of compile time
    python benchmarks/compile_memory.py --d-model 1024 --vocab 32768 --batch-size 16 --steps 5   # TG-252M (GPU)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
from tg_steps import abstract_trainer_step, trainer_step  # noqa: E402

from tgjax.models import model_config  # noqa: E402

VARIANTS = {
    "default": dict(),
    "remat": dict(remat=True),
    "scan": dict(scan_layers=True),
    "scan+remat": dict(scan_layers=True, remat=True),
}


def bllip_shaped(num_layers: int, d_model: int, vocab_size: int, dtype: str, **switches):
    """configs/tg_bllip.py's model at another width / depth (heads 8, FFN 4 d, T = M = 256)."""
    return model_config("tg", vocab_size, d_model=d_model, num_layers=num_layers, num_heads=8,
                        ffw_hidden_size=4 * d_model, sequence_length=256, memory_length=256, dtype=dtype, **switches)


def measure(config, batch_size: int, steps: int) -> dict:
    step, state, rest, batch = abstract_trainer_step(config, batch_size)
    start = time.perf_counter()
    lowered = step.lower(state, rest, batch)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    stats = compiled.memory_analysis()
    out = {"lower_s": lowered_at - start, "compile_s": compiled_at - lowered_at}
    if stats is not None:
        out.update(arguments=stats.argument_size_in_bytes, outputs=stats.output_size_in_bytes,
                   temporaries=stats.temp_size_in_bytes,
                   peak=stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
                   - stats.alias_size_in_bytes)
    if steps:
        step, state, rest, batch = trainer_step(config, batch_size)
        state, metrics = step(state, rest, batch)  # compiles (again: a concrete call does not reuse `compiled`)
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(steps):
            state, metrics = step(state, rest, batch)
        jax.block_until_ready(metrics)
        out["step_s"] = (time.perf_counter() - start) / steps
    return out


def mib(n: int) -> str:
    return f"{n / 2 ** 20:9.1f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[16], help="depths to measure (tg_bllip: 16)")
    parser.add_argument("--d-model", type=int, default=256, help="width (tg_bllip: 1024)")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size (tg_bllip: 32768)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--steps", type=int, default=0, help="also time this many executed steps per variant")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({device.platform}); load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    for num_layers in args.layers:
        base = bllip_shaped(num_layers, args.d_model, args.vocab, args.dtype)
        print(f"\ntg_bllip-shaped: {num_layers} layers, d={args.d_model}, heads 8, FFN {4 * args.d_model}, "
              f"T=M=256, vocab {args.vocab}, batch {args.batch_size}, {args.dtype} compute")
        print(f"{'variant':<11} {'lower s':>8} {'compile s':>9} {'x':>6} {'args MiB':>9} {'temp MiB':>9} "
              f"{'peak MiB':>9} {'x':>6}" + (f" {'step s':>8} {'x':>6}" if args.steps else ""))
        results = {}
        for name in args.variants:
            results[name] = r = measure(dataclasses.replace(base, **VARIANTS[name]), args.batch_size, args.steps)
            ref = results.get("default", r)
            line = (f"{name:<11} {r['lower_s']:8.2f} {r['compile_s']:9.2f} "
                    f"{(r['lower_s'] + r['compile_s']) / (ref['lower_s'] + ref['compile_s']):6.2f}")
            if "peak" in r:
                line += (f" {mib(r['arguments'])} {mib(r['temporaries'])} {mib(r['peak'])} "
                         f"{r['peak'] / ref['peak']:6.2f}")
            if args.steps:
                line += f" {r['step_s']:8.3f} {r['step_s'] / ref['step_s']:6.2f}"
            print(line, flush=True)
    print(f"\n(x: ratio to 'default' of lower + compile time, of peak memory{', of step time' if args.steps else ''}; "
          f"load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
