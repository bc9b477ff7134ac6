"""Pushdown-LM at BLLIP size against a plain Transformer LM of the same size: XLA's memory for one train step.

The model is `configs/pushdown_bllip.py`'s (d = 1024, 16 layers, 8 heads, FFN
4096, T = 256, a depth table of 50, vocabulary 32,768; the attachment head's
key_dim 2 d = 2048), read as `tgjax train` reads it. The step is
jit(value_and_grad) of the training loss over the parameters, dropout on (the
forward and backward passes; no optimiser), on a batch of full rows (every
position real, one binary tree per row), compiled from abstract arrays, not
run. Printed per variant: XLA's buffer assignment (`memory_analysis()`:
arguments, outputs, temporaries and their sum, the most the step holds),
and the ratio of that sum to the baseline's:

    plain        the baseline: the same blocks without the depth term (`pushdown_layers=()`), no attachment
                 head, the LM cross-entropy only (an ordinary softmax)
    pushdown     the Pushdown-LM as it trains: every layer a Pushdown layer, the attachment head
                 (`model.head_depth_chunk`, default 1: the depth-chunked scores)
    table-head   the same with the head's table path (`head_depth_chunk=None`: MLP_c for every (token,
                 depth value), `[B, T, D, key_dim]`), the head before the depth-chunked scan

    python benchmarks/pushdown_memory.py                          # batch 120, 16 layers (CPU: about a minute)
    python benchmarks/pushdown_memory.py --layers 2 --batch 8     # quicker: the ratio per 2 layers + head
    python benchmarks/pushdown_memory.py --depth-chunks 1 5 10    # the head's chunk size

`--scan-remat` runs both models' layers as one rematerialised `lax.scan`
(`model.scan_layers=true model.remat=full`), the layout that keeps one
layer's activations at a time; the head is then a larger share.

Fewer layers (`--layers`) give the ratio for that many layers plus the
embedding, the LM softmax and (for the Pushdown variants) the head; given
two depths, the footer prints each variant's memory per layer and its
linear extrapolation to `--extrapolate-to` layers (16), and the ratio there
(`--layers 2 4` extrapolates to the 16-layer figures to the MiB).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tgjax.models.pushdown_lm import PushdownLM, PushdownLMConfig, pushdown_loss  # noqa: E402
from tgjax.nn.remat import remat_layer  # noqa: E402
from tgjax.ops.log_probs import token_log_probs  # noqa: E402
from tgjax.train.config import load_config  # noqa: E402
from tgjax.train.tasks.pushdown_lm import model_config  # noqa: E402

GIB = 2 ** 30


def bllip_model_config(num_layers: int | None, scan_remat: bool = False) -> PushdownLMConfig:
    """configs/pushdown_bllip.py's model (its own vocabulary size), at `num_layers` if given."""
    overrides = [f"model.num_layers={num_layers}"] if num_layers else []
    if scan_remat:
        overrides += ["model.scan_layers=true", "model.remat=full"]
    config = load_config(str(REPO / "configs" / "pushdown_bllip.py"), overrides)
    return model_config(config, config.model.vocab_size)


def abstract_batch(batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """The Pushdown batch's fields (`tgjax.data.pushdown.make_batch`) as shapes: the step is compiled, not run."""
    def spec(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    B, T = batch_size, length
    return dict(inputs=spec((B, T), jnp.int32), targets=spec((B, T), jnp.int32),
                attach=spec((B, T + 1), jnp.int32), attach_targets=spec((B, T), jnp.int32),
                weights=spec((B, T), jnp.float32), attach_weights=spec((B, T), jnp.float32),
                node_start=spec((B, T), jnp.int32), node_end=spec((B, T), jnp.int32),
                roots=spec((B, T + 1), jnp.bool_))


def plain_lm_loss(model: PushdownLM, batch, deterministic: bool) -> jax.Array:
    """`PushdownLM.__call__` without the tape and the head (plain layers ignore the tape), its layer layout
    (loop or scan, remat) included, then the LM loss."""
    config = model.config
    table = model.embedding[...]
    x = model.embedding_dropout(table[batch["inputs"]] * np.sqrt(config.d_model), deterministic=deterministic)
    valid = batch["weights"] > 0
    if config.scan_layers:
        x = model._scanned_layers(x, None, valid, deterministic)
    else:
        run_layer = remat_layer(lambda layer, x: layer(x, None, valid, deterministic=deterministic), config.remat)
        for layer in model.layers:
            x = run_layer(layer, x)
    lm_logits = x @ table.T + model.output_bias[...]
    weights = batch["weights"]
    return -(token_log_probs(lm_logits, batch["targets"]) * weights).sum() / jnp.maximum(weights.sum(), 1.0)


def make_step(config: PushdownLMConfig, plain: bool):
    """jit(value_and_grad) of the training loss over the parameters, dropout on (as `pushdown_remat.py`)."""
    model = PushdownLM(config, rngs=nnx.Rngs(params=0, dropout=1))
    if plain:
        del model.head  # not an argument of the plain step
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    @jax.jit
    def step(params, rest, batch):
        def loss_fn(params):
            model = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))
            nnx.reseed(model, dropout=jax.random.key(1))
            if plain:
                return plain_lm_loss(model, batch, deterministic=False)
            return pushdown_loss(model(batch, deterministic=False), batch, config)[0]

        return jax.value_and_grad(loss_fn)(params)

    abstract = lambda tree: jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)  # noqa: E731
    return step, abstract(params), abstract(rest)


def measure(config: PushdownLMConfig, batch_size: int, plain: bool) -> dict:
    step, params, rest = make_step(config, plain)
    started = time.perf_counter()
    compiled = step.lower(params, rest, abstract_batch(batch_size, config.sequence_length)).compile()
    stats = compiled.memory_analysis()
    total = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    return dict(arguments=stats.argument_size_in_bytes, outputs=stats.output_size_in_bytes,
                temporaries=stats.temp_size_in_bytes, total=total, compile_s=time.perf_counter() - started,
                params=sum(int(np.prod(p.shape)) for p in jax.tree.leaves(params)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=120, help="rows per batch (configs/pushdown_bllip.py: 120)")
    parser.add_argument("--layers", type=int, nargs="+", default=[16],
                        help="depths to measure (the config: 16); two depths also give the per-layer figures")
    parser.add_argument("--depth-chunks", type=int, nargs="+", default=[1],
                        help="the head's depth values per scan step (`model.head_depth_chunk`), one row each")
    parser.add_argument("--no-table", action="store_true", help="skip the table head (the slowest to compile)")
    parser.add_argument("--extrapolate-to", type=int, default=16)
    parser.add_argument("--scan-remat", action="store_true",
                        help="both models' layers as one rematerialised scan (`model.scan_layers=true "
                             "model.remat=full`) instead of the config's loop")
    args = parser.parse_args(argv)
    device = jax.devices()[0]
    base = bllip_model_config(args.layers[0], args.scan_remat)
    print(f"Pushdown-LM (configs/pushdown_bllip.py) train step (forward + backward, dropout on, compiled, not run): "
          f"d={base.d_model}, heads {base.num_heads}, FFN {base.ffw_hidden_size}, T={base.sequence_length}, "
          f"{base.num_depths} depths, head key_dim {base.head_key_dim or 2 * base.d_model}, "
          f"vocab {base.vocab_size}, batch {args.batch}, layers "
          f"{'as one scan, remat ' + base.remat if base.scan_layers else 'in a loop, remat ' + base.remat}")
    print(f"on {device.device_kind} ({device.platform}, {os.cpu_count()} CPUs), {datetime.date.today()}; "
          f"XLA's memory_analysis(), GiB; x: total against plain at the same depth")
    print(f"{'layers':>6}  {'variant':<18} {'params M':>9} {'args':>8} {'outputs':>8} {'temp':>8} {'total':>8} "
          f"{'x':>6} {'per row':>8}  {'compile s':>9}")
    by_depth = {}
    for num_layers in args.layers:
        config = bllip_model_config(num_layers, args.scan_remat)
        variants = {"plain": (dataclasses.replace(config, pushdown_layers=()), True)}
        for chunk in args.depth_chunks:
            variants[f"pushdown (chunk {chunk})"] = (dataclasses.replace(config, head_depth_chunk=chunk), False)
        if not args.no_table:
            variants["table-head"] = (dataclasses.replace(config, head_depth_chunk=None), False)
        results = {}
        for name, (variant, plain) in variants.items():
            results[name] = r = measure(variant, args.batch, plain)
            line = (f"{num_layers:>6}  {name:<18} {r['params'] / 1e6:>9.1f} {r['arguments'] / GIB:>8.3f} "
                    f"{r['outputs'] / GIB:>8.3f} {r['temporaries'] / GIB:>8.3f} {r['total'] / GIB:>8.3f} "
                    f"{r['total'] / results['plain']['total']:>5.3f}x {r['total'] / args.batch / GIB:>8.4f}  "
                    f"{r['compile_s']:>9.1f}")
            print(line, flush=True)
        by_depth[num_layers] = results
    if len(by_depth) >= 2:
        (l0, r0), (l1, r1) = sorted(by_depth.items())[:2]
        target = args.extrapolate_to
        print(f"\nlinear in the depth from {l0} and {l1} layers, extrapolated to {target}:")
        for name in r0:
            slope = (r1[name]["total"] - r0[name]["total"]) / (l1 - l0)
            at = r0[name]["total"] + slope * (target - l0)
            plain_at = r0["plain"]["total"] + (r1["plain"]["total"] - r0["plain"]["total"]) / (l1 - l0) * (target - l0)
            print(f"  {name:<18} {slope / GIB:8.3f} GiB per layer, {at / GIB:8.3f} GiB at {target}: "
                  f"{at / plain_at:5.3f}x plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
