"""Pushdown-LM's train step by layer layout (`model.remat`, `model.scan_layers`): XLA's memory, FLOPs, compile time.

The model is `configs/pushdown_dyck.py`'s (6 layers, d = 128, 8 heads, FFN
512, binary tape), the step jit(value_and_grad) of the LM + attachment loss on
a batch of random Dyck strings padded to `--widths` columns (rows of 512 are
the paper's; with `training.bucket_lengths` most batches are narrower). For
each width the step is compiled once per layout — the loop (the baseline),
the loop with remat, one `lax.scan` over the layers, the scan with remat —
and printed with ratios against the baseline: XLA's account of the compiled
program (`memory_analysis()`: temporaries, the activations the backward
pass keeps; `cost_analysis()`: FLOPs, not for the scans, whose loop body
XLA counts once) and the seconds to lower and compile
it. Without remat the six layers' `[B, heads, T, T]` attention tensors all
stay live for the backward pass (about 18 GB of RSS on a CPU at width 512,
batch 64); remat is meant to keep one layer's at a time, for one more
forward pass of each layer, which XLA:CPU honours only inside the scan.
`--run N` also times N steps of each (after one warm-up), alternating, in
this process.

    python benchmarks/pushdown_remat.py                          # widths 128 512, compile only
    python benchmarks/pushdown_remat.py --widths 512 --run 5     # an accelerator: time too
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tgjax.data import dyck  # noqa: E402
from tgjax.data.pushdown import make_batch  # noqa: E402
from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig, pushdown_loss  # noqa: E402
from tgjax.train.config import load_config  # noqa: E402
from tgjax.train.tasks.pushdown_lm import BATCH_FIELDS, model_config  # noqa: E402

VARIANTS = {"loop": {}, "remat": dict(remat=True), "scan": dict(scan_layers=True),
            "scan+remat": dict(scan_layers=True, remat=True)}


def dyck_model_config(width: int, **layout) -> PushdownLMConfig:
    """configs/pushdown_dyck.py's model (read from the config, as `tgjax train` reads it) at rows of `width`,
    its layers run as `layout` says."""
    overrides = [f"model.sequence_length={width}", *(f"model.{key}={value}" for key, value in layout.items())]
    config = load_config(str(REPO / "configs" / "pushdown_dyck.py"), overrides)
    return model_config(config, dyck.dyck_vocabulary(config.data.dyck_num_types).size)


def dyck_batch(batch_size: int, width: int, seed: int = 0) -> dict[str, jax.Array]:
    """`batch_size` random Dyck_(20,10) strings that fill rows of `width` (the longest nearly fills one)."""
    strings, _ = dyck.dyck_corpus(batch_size, seed, max_length=width - 2, min_length=width // 2)
    rows = dyck.encode_for_pushdown(strings, dyck.dyck_vocabulary(20))
    batch, _ = make_batch(rows, width)
    return {k: jnp.asarray(batch[k]) for k in BATCH_FIELDS}


def make_step(config: PushdownLMConfig):
    """jit(value_and_grad) of the training loss over the parameters, dropout on (as in training)."""
    model = PushdownLM(config, rngs=nnx.Rngs(params=0, dropout=1))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    @jax.jit
    def step(params, rest, batch):
        def loss_fn(params):  # as the trainer's step: the dropout state copied into this trace, then reseeded
            model = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))
            nnx.reseed(model, dropout=jax.random.key(1))
            return pushdown_loss(model(batch, deterministic=False), batch, config)[0]

        return jax.value_and_grad(loss_fn)(params)

    return step, params, rest


def measure(width: int, batch_size: int, layout: dict, run: int) -> dict:
    step, params, rest = make_step(dyck_model_config(width, **layout))
    batch = dyck_batch(batch_size, width)
    started = time.perf_counter()
    compiled = step.lower(params, rest, batch).compile()
    compile_s = time.perf_counter() - started
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    result = dict(temp_gb=(memory.temp_size_in_bytes / 1e9) if memory is not None else float("nan"),
                  gflop=float((cost or {}).get("flops", float("nan"))) / 1e9, compile_s=compile_s, seconds=[])
    if run:
        jax.block_until_ready(compiled(params, rest, batch))  # warm-up
        result["call"] = lambda: jax.block_until_ready(compiled(params, rest, batch))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 512], help="row widths (columns)")
    parser.add_argument("--batch", type=int, default=64, help="strings per batch (the paper: 64)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                        help="layer layouts; ratios are against the first (default: loop)")
    parser.add_argument("--run", type=int, default=0, help="time this many steps of each (0: compile only)")
    args = parser.parse_args(argv)
    print(f"Pushdown-LM (configs/pushdown_dyck.py) train step, batch {args.batch}, on {jax.devices()[0].platform}; "
          f"ratios against {args.variants[0]}")
    header = (f"{'width':>5}  {'layers':<11} {'temporaries GB':>15} {'x':>6}  {'GFLOP':>8} {'x':>6}  "
              f"{'compile s':>9} {'x':>6}")
    print(header + (f"  {'step s':>8} {'x':>6}" if args.run else ""))
    for width in args.widths:
        results = {name: measure(width, args.batch, VARIANTS[name], args.run) for name in args.variants}
        for _ in range(args.run):  # alternate, so that a shared machine's load falls on all of them
            for result in results.values():
                started = time.perf_counter()
                result["call"]()
                result["seconds"].append(time.perf_counter() - started)
        base = results[args.variants[0]]
        for name, result in results.items():
            # XLA's cost analysis counts a loop's body once, not once per layer: no FLOPs for the scans
            flops = (f"{result['gflop']:>8.1f} {result['gflop'] / base['gflop']:>5.2f}x" if "scan" not in name
                     else f"{'(scan)':>8} {'':>6}")
            line = (f"{width:>5}  {name:<11} {result['temp_gb']:>15.3f} {result['temp_gb'] / base['temp_gb']:>5.2f}x"
                    f"  {flops}"
                    f"  {result['compile_s']:>9.1f} {result['compile_s'] / base['compile_s']:>5.2f}x")
            if args.run:
                step_s, base_s = statistics.median(result["seconds"]), statistics.median(base["seconds"])
                line += f"  {step_s:>8.4f} {step_s / base_s:>5.2f}x"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
