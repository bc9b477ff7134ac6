"""DGN layer time and memory (forward+backward) against standard multi-head attention of the same width.

Layers, all on x [B, T, d] with a padding mask, residual included:
  dgn         `tgjax.nn.dgn.DependencyGraphLayer` with the release's channels
              (K = 8, d_c = 128: hidden K·d_c = 1024 = 2d) and a dense mask A [B, T, T];
  dgn_matched the same layer with K·d_c = d (8 × 64), the width of the attention;
  mha         `flax.nnx.MultiHeadAttention` (8 heads, d_model = d, softmax over
              positions, q/k/v/out projections with biases) plus the residual.
A step is jit(value_and_grad) of sum(y * r) with respect to the layer's
parameters, x and (for the DGN) the mask, in float32. The layers are timed
alternately in one process, so a shared machine's load falls on all alike;
medians are reported with tokens/s. Memory is XLA's own account of the
compiled step (`memory_analysis()`: temporaries, and arguments + outputs),
not a process RSS.

    python benchmarks/dgn.py [--repeats 7] [--sizes ptb,long]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import main_over_sizes, time_once  # noqa: E402
from tgjax.nn.dgn import DependencyGraphLayer  # noqa: E402

SIZES = {
    "ptb": dict(B=32, T=48, d=512),  # ~ a 4096-token batch of PTB-length sentences, the release's size
    "long": dict(B=8, T=256, d=512),
}


class Attention(nnx.Module):
    """Standard multi-head self-attention with the residual, as the baseline."""

    def __init__(self, d, heads, rngs):
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, rngs=rngs)

    def __call__(self, x, valid):
        mask = nnx.make_attention_mask(valid, valid)
        return x + self.attention(x, mask=mask, deterministic=True)


def make_step(kind: str, B: int, T: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    readout = jnp.asarray(rng.normal(size=(B, T, d)), jnp.float32)
    valid = jnp.asarray(np.arange(T)[None, :] < rng.integers(T // 2, T + 1, size=(B, 1)))
    logits = rng.normal(size=(B, T, T))
    A = jnp.asarray(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), jnp.float32)
    if kind == "mha":
        layer = Attention(d, 8, nnx.Rngs(seed))
        def apply(layer, x, A):
            return layer(x, valid)
    else:
        channel_size = 128 if kind == "dgn" else d // 8
        layer = DependencyGraphLayer(d, 8, channel_size, rngs=nnx.Rngs(seed))
        def apply(layer, x, A):
            return layer(x, A, valid, deterministic=True)
    graphdef, params = nnx.split(layer)

    def loss(params, x, A):
        return jnp.sum(apply(nnx.merge(graphdef, params), x, A) * readout)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    args = (params, x, A)
    num_params = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params))
    return step, args, num_params


def memory(step, args) -> dict:
    analysis = step.lower(*args).compile().memory_analysis()
    if analysis is None:
        return {}
    return dict(temp=analysis.temp_size_in_bytes,
                io=analysis.argument_size_in_bytes + analysis.output_size_in_bytes)


def bench(name: str, size: dict, repeats: int) -> None:
    kinds = ("dgn", "dgn_matched", "mha")
    steps = {kind: make_step(kind, **size) for kind in kinds}
    first = {kind: time_once(step, args) for kind, (step, args, _) in steps.items()}
    times = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind, (step, args, _) in steps.items():
            times[kind].append(time_once(step, args))
    medians = {kind: statistics.median(ts) for kind, ts in times.items()}
    mems = {kind: memory(step, args) for kind, (step, args, _) in steps.items()}
    B, T = size["B"], size["T"]
    print(f"\n{name}: B={B} T={T} d={size['d']}")
    for kind in kinds:
        mem = mems[kind]
        mem_text = f"temp {mem['temp'] / 2**20:7.1f} MiB, args+outs {mem['io'] / 2**20:6.1f} MiB" if mem else "n/a"
        print(f"  {kind:11s} {steps[kind][2]:>9,} params  fwd+bwd median {medians[kind] * 1e3:8.1f} ms "
              f"(min {min(times[kind]) * 1e3:.1f}; first call incl. compile {first[kind]:.1f} s)  "
              f"{B * T / medians[kind]:9.0f} tokens/s  {mem_text}")
    for kind in ("dgn", "dgn_matched"):
        line = f"  ratio {kind} / mha: time {medians[kind] / medians['mha']:.2f}"
        if mems[kind] and mems["mha"]:
            line += f", temporary memory {mems[kind]['temp'] / max(mems['mha']['temp'], 1):.2f}"
        print(line)


def main(argv=None):
    main_over_sizes(__doc__, SIZES, "ptb,long", bench, argv)


if __name__ == "__main__":
    main()
