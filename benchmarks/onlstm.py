"""ON-LSTM forward+backward step time against a plain LSTM of the same size.

Both layers are one `lax.scan` over time with the input projection done
before the scan in one matmul, the same structure; they differ only in the
cell: the ON-LSTM has 2 nc more gate columns (the master gates, nc = H / C)
and the cumax/overlap arithmetic. A step is jit(value_and_grad) of
sum(h * r) (r fixed random) with respect to all four parameter arrays and
the inputs, from a zero state, in float32. The two are timed alternately
(ON-LSTM, LSTM, ON-LSTM, ...) in the same process, so that a shared
machine's load falls on both sides of the ratio alike; each side's median
is reported, with tokens/s = B * T / median, and the load average (uptime)
before and after.

Sizes: the paper's PTB layer (B = 20, T = 70, D = 400, H = 1150, chunk 10)
and a smaller one (B = 20, T = 70, D = 128, H = 256, chunk 8).

    python benchmarks/onlstm.py [--repeats 7] [--sizes paper,small]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import main_over_sizes, time_once  # noqa: E402
from tgjax.ops import onlstm_scan  # noqa: E402

SIZES = {
    "paper": dict(B=20, T=70, D=400, H=1150, chunk_size=10),
    "small": dict(B=20, T=70, D=128, H=256, chunk_size=8),
}


def lstm_scan(x, h0, c0, w_ih, b_ih, w_hh, b_hh):
    """A plain LSTM with the same scan structure: x [B, T, D], w_ih [D, 4H] (i, f, g, o), w_hh [H, 4H]."""
    gates_from_input = jnp.einsum("btd,dg->tbg", x, w_ih) + (b_ih + b_hh)

    def step(carry, input_gates):
        h_prev, c_prev = carry
        i, f, g, o = jnp.split(input_gates + h_prev @ w_hh, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c_prev + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    (h_last, c_last), hs = lax.scan(step, (h0, c0), gates_from_input)
    return jnp.swapaxes(hs, 0, 1), h_last, c_last


def make_step(kind: str, B, T, D, H, chunk_size, seed=0):
    """A jitted forward+backward step and its arguments."""
    rng = np.random.default_rng(seed)
    G = 2 * (H // chunk_size) + 4 * H if kind == "onlstm" else 4 * H
    scale_in, scale_h = 1 / np.sqrt(D), 1 / np.sqrt(H)
    f32 = lambda a: jnp.asarray(a, jnp.float32)  # noqa: E731
    params = (f32(rng.uniform(-scale_in, scale_in, (D, G))), f32(rng.uniform(-scale_in, scale_in, G)),
              f32(rng.uniform(-scale_h, scale_h, (H, G))), f32(rng.uniform(-scale_h, scale_h, G)))
    x = f32(rng.normal(size=(B, T, D)))
    readout = f32(rng.normal(size=(B, T, H)))
    zeros = jnp.zeros((B, H), jnp.float32)

    def loss(params, x):
        if kind == "onlstm":
            hs = onlstm_scan(x, zeros, zeros, *params, chunk_size=chunk_size)[0]
        else:
            hs = lstm_scan(x, zeros, zeros, *params)[0]
        return jnp.sum(hs * readout)

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    return step, (params, x), G


def bench(name: str, size: dict, repeats: int) -> dict:
    B, T = size["B"], size["T"]
    steps = {kind: make_step(kind, **size) for kind in ("onlstm", "lstm")}
    compile_s = {kind: time_once(step, args) for kind, (step, args, _) in steps.items()}  # includes compile
    times = {"onlstm": [], "lstm": []}
    for _ in range(repeats):
        for kind, (step, args, _) in steps.items():
            times[kind].append(time_once(step, args))
    medians = {kind: statistics.median(ts) for kind, ts in times.items()}
    ratio = medians["onlstm"] / medians["lstm"]
    print(f"\n{name}: B={B} T={T} D={size['D']} H={size['H']} chunk={size['chunk_size']} "
          f"(gate columns: ON-LSTM {steps['onlstm'][2]}, LSTM {steps['lstm'][2]})")
    for kind in ("onlstm", "lstm"):
        ts = times[kind]
        print(f"  {kind:7s} fwd+bwd median {medians[kind] * 1e3:8.1f} ms  (min {min(ts) * 1e3:.1f}, "
              f"max {max(ts) * 1e3:.1f}; first call incl. compile {compile_s[kind]:.1f} s)  "
              f"{B * T / medians[kind]:9.0f} tokens/s")
    print(f"  ratio ON-LSTM / LSTM step time: {ratio:.2f}")
    return dict(medians=medians, ratio=ratio)


def main(argv=None):
    main_over_sizes(__doc__, SIZES, "paper,small", bench, argv)


if __name__ == "__main__":
    main()
