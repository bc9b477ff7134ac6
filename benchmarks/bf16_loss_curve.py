"""bf16 against fp32 training: the loss curves of 200 steps differ by no more than two fp32 seeds do.

Trains configs/tiny.py (a 2-layer TG, d 64, on the built-in treebank) with
the trainer three times for `--steps` steps: fp32 (seed 1), bf16 compute
over fp32 parameters and Adam state (seed 1), and fp32 again with seed 2
(the noise: another initialisation and dropout stream). Printed: the mean
absolute difference of the training-loss curves (each smoothed over a
`--window`-step moving average, compared over the second half of the run)
for bf16 vs fp32 and for the two fp32 seeds, their ratio (bf16 is "within
noise" when it is <= 1), and the three final validation losses.

    python benchmarks/bf16_loss_curve.py                 # 200 steps x 3 runs (CPU: a few minutes)
    python benchmarks/bf16_loss_curve.py --config configs/tg_ptb.py:ptb/train.txt,ptb/valid.txt --steps 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from tgjax.train.config import load_config  # noqa: E402
from tgjax.train.loop import train  # noqa: E402


def run(config_spec: str, steps: int, dtype: str, seed: int, workdir: Path):
    config = load_config(config_spec, [
        f"training.num_steps={steps}", f"model.dtype={dtype}", f"training.seed={seed}",
        "logging.interval_steps=1", f"evaluation.interval_steps={steps}", f"checkpointing.interval_steps={steps}",
        "checkpointing.async_save=false",
    ])
    result = train(config, workdir / f"{dtype}_seed{seed}", quiet=True)
    losses = np.array([result.losses[s] for s in sorted(result.losses)])
    return losses, result.valid_losses.get(steps)


def smoothed(x: np.ndarray, window: int) -> np.ndarray:
    return np.convolve(x, np.ones(window) / window, mode="valid")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    args = parser.parse_args(argv)
    print(f"{args.config}, {args.steps} steps; load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32, fp32_valid = run(args.config, args.steps, "float32", 1, Path(tmp))
        half, half_valid = run(args.config, args.steps, args.dtype, 1, Path(tmp))
        other, other_valid = run(args.config, args.steps, "float32", 2, Path(tmp))
    second_half = slice(len(smoothed(fp32, args.window)) // 2, None)
    gap = lambda a, b: float(np.mean(np.abs(smoothed(a, args.window) - smoothed(b, args.window))[second_half]))
    half_gap, seed_gap = gap(half, fp32), gap(other, fp32)
    print(f"training loss, first -> last step: fp32 {fp32[0]:.3f} -> {fp32[-1]:.3f} | {args.dtype} {half[0]:.3f} -> "
          f"{half[-1]:.3f} | fp32 seed 2 {other[0]:.3f} -> {other[-1]:.3f}")
    print(f"mean |difference| of the smoothed curves, steps {args.steps // 2}..{args.steps}: "
          f"{args.dtype} vs fp32 {half_gap:.4f}; fp32 seed 2 vs seed 1 {seed_gap:.4f}; "
          f"ratio {half_gap / seed_gap:.2f} ({'within' if half_gap <= seed_gap else 'OUTSIDE'} seed noise)")
    if fp32_valid is not None:
        print(f"validation loss at step {args.steps}: fp32 {fp32_valid:.4f} | {args.dtype} {half_valid:.4f} | "
              f"fp32 seed 2 {other_valid:.4f}")
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
