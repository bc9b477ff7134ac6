"""Model FLOPs utilisation (MFU) of TG-252M's train step on whatever `jax.devices()[0]` is.

Builds configs/tg_bllip.py's model (16 layers, d = 1024, 8 heads, FFN 4096,
T = M = 256, vocabulary 32,768: 251.9M parameters), runs the trainer's own
jitted step (`tgjax.train.tasks.treebank_lm.state.make_train_step`: forward, loss, backward,
clipped Adam; dropout on; memory carried) on synthetic full segments (random
bracketings in the pipeline's compact fields: no data file is read), and
prints tokens/s and MFU = model FLOPs/s / peak FLOPs/s.

Model FLOPs per token (forward; a multiply-add is 2 FLOPs; training = 3 x
forward, the usual backward = 2 x forward; remat's recomputation is not
counted, as MFU is defined):

    dense       2 N_dense,  N_dense = L (4 d^2 + 2 d F) + d V   (q, k, v, out; FFN; tied output projection)
    attention   L (4 d (M + T) + 2 d P + 2 P d^2 / T)   (q.k and weights.v over all M + T keys; q.r over the
                P relative positions, whose keys W_kR PE(R) each segment computes once)
    memory kv   L 4 d^2 M / T              (each segment projects its M memory rows to keys and values)

so 6 N tokens (N: all parameters) is printed beside it for reference. The
peak is `--peak-tflops` (989 = H100 SXM bf16 dense), by default taken from
the device kind when it is known.

    python benchmarks/mfu.py                             # TG-252M, bf16 compute, batch 32 (GPU / TPU)
    python benchmarks/mfu.py --variants default scan --peak-tflops 989
    python benchmarks/mfu.py --small                     # a tiny model: runs on CPU in about a minute
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
from flax import nnx  # noqa: E402
from tg_steps import trainer_step  # noqa: E402

from tgjax.models import ModelConfig, count_parameters, model_config  # noqa: E402
from tgjax.models.transformer_lm import TransformerLM  # noqa: E402

# Dense bf16 peak TFLOP/s by device kind (substring, lower case) from the vendors' data sheets.
PEAK_TFLOPS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "tpu v4": 275.0, "tpu v5 lite": 197.0,
               "tpu v5e": 197.0, "tpu v5p": 459.0, "tpu v6": 918.0}
VARIANTS = {"default": dict(), "remat": dict(remat=True), "scan": dict(scan_layers=True),
            "scan+remat": dict(scan_layers=True, remat=True)}
TG_252M = dict(d_model=1024, num_layers=16, num_heads=8, ffw_hidden_size=4096, sequence_length=256,
               memory_length=256)
SMALL = dict(d_model=128, num_layers=2, num_heads=4, ffw_hidden_size=512, sequence_length=32, memory_length=32)


def flops_per_token(c: ModelConfig) -> dict[str, float]:
    """Training FLOPs per token, by term (see the module docstring)."""
    L, d, F, V, T, M = c.num_layers, c.d_model, c.ffw_hidden_size, c.vocab_size, c.sequence_length, c.memory_length
    lo, hi = c.relative_range
    P = hi - lo + 1
    forward = {
        "dense": 2.0 * (L * (4 * d * d + 2 * d * F) + d * V),
        "attention": float(L * (4 * d * (M + T) + 2 * d * P + 2 * P * d * d / T)),
        "memory kv": float(L * 4 * d * d * M / T),
    }
    return {k: 3.0 * v for k, v in forward.items()}


def peak_of(device) -> float | None:
    kind = device.device_kind.lower()
    return next((peak for name, peak in PEAK_TFLOPS.items() if name in kind), None)


def run(config: ModelConfig, batch_size: int, steps: int, warmup: int) -> dict:
    start = time.perf_counter()
    step, state, rest, batch = trainer_step(config, batch_size)
    state, metrics = step(state, rest, batch)  # compiles
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    for _ in range(warmup):
        state, metrics = step(state, rest, batch)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        state, metrics = step(state, rest, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    return {"compile_s": compile_s, "step_s": statistics.median(times), "loss": float(metrics["loss"]),
            "tokens": int(metrics["num_tokens"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a tiny model (d 128, 2 layers, T=M=32) for CPU")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per step (default 32; --small: 4)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--variants", nargs="+", default=["scan"], choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=10, help="timed steps (the median is used)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak TFLOP/s in --dtype (default: from the device kind, e.g. H100 989)")
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    peak = args.peak_tflops or peak_of(device)
    sizes = SMALL if args.small else TG_252M
    vocab = 512 if args.small else 32_768
    batch_size = args.batch_size or (4 if args.small else 32)
    base = model_config("tg", vocab, dtype=args.dtype, **sizes)
    num_params = count_parameters(nnx.eval_shape(lambda: TransformerLM(base, rngs=nnx.Rngs(0))))
    per_token = flops_per_token(base)
    total = sum(per_token.values())
    print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"model: {'small' if args.small else 'TG-252M'} ({num_params:,} parameters: L={base.num_layers}, "
          f"d={base.d_model}, F={base.ffw_hidden_size}, V={vocab}, T=M={base.sequence_length}), "
          f"{args.dtype} compute, float32 parameters; batch {batch_size} rows = {batch_size * base.sequence_length} "
          f"tokens/step")
    print("training FLOPs/token: " + ", ".join(f"{k} {v / 1e9:.3f} G" for k, v in per_token.items())
          + f"; total {total / 1e9:.3f} G (6N = {6 * num_params / 1e9:.3f} G)")
    print(f"peak: {f'{peak:g} TFLOP/s' if peak else 'unknown (pass --peak-tflops)'}")
    print(f"{'variant':<11} {'compile s':>9} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} "
          f"{'MFU(6N)':>7} {'loss':>7}")
    for name in args.variants:
        r = run(dataclasses.replace(base, **VARIANTS[name]), batch_size, args.steps, args.warmup)
        tokens_per_s = r["tokens"] / r["step_s"]
        tflops = tokens_per_s * total / 1e12
        mfu = f"{100 * tflops / peak:5.1f}%" if peak else "   n/a"
        mfu_6n = f"{100 * tokens_per_s * 6 * num_params / 1e12 / peak:6.1f}%" if peak else "    n/a"
        print(f"{name:<11} {r['compile_s']:9.1f} {1e3 * r['step_s']:9.1f} {tokens_per_s:10.0f} {tflops:8.2f} "
              f"{mfu} {mfu_6n} {r['loss']:7.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
