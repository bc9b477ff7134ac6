"""Trainer steps/s with each step's metrics fetched as it ends, against fetched once per logging interval.

    python benchmarks/host_sync.py                       # small TG on the built-in treebank, CPU
    python benchmarks/host_sync.py --steps 400 --repeats 3 --logging 50

Fetching a step's metrics (`jax.device_get`) makes the host wait for that
step, so it cannot dispatch the next one ahead, nor build the next batch
while the device works on it. The trainer keeps the metrics on the device
and fetches them in one batch at the logging step
(`logging.fetch_every_step=false`, the default); `true` is the behaviour
before. Both runs train the same model on the same batches (the losses are
compared: they must be equal); steps/s is the trainer's own, from
metrics.jsonl, over every logging window but the first (compiling), with
validation and checkpointing off. The runs alternate, `--repeats` of each;
the medians and their ratio are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tgjax.train.config import apply_overrides, default_config  # noqa: E402
from tgjax.train.loop import train  # noqa: E402
from tgjax.train.metrics import read_metrics  # noqa: E402


def config_for(args, fetch_every_step: bool):
    return apply_overrides(default_config(), [
        f"model.d_model={args.d_model}", "model.num_layers=2", "model.num_heads=4",
        f"model.ffw_hidden_size={4 * args.d_model}", "model.sequence_length=32", "model.memory_length=32",
        "data.num_train_sentences=2000", "data.valid_path=", f"training.batch_size={args.batch_size}",
        f"training.num_steps={args.steps}", "evaluation.interval_steps=0",
        f"checkpointing.interval_steps={args.steps}", "checkpointing.async_save=false",
        f"logging.interval_steps={args.logging}", "logging.tensorboard=false",
        f"logging.fetch_every_step={str(fetch_every_step).lower()}",
    ])


def steps_per_second(workdir: Path) -> float:
    """The trainer's steps/s over every train record but the first (its window holds the compile)."""
    records = [r for r in read_metrics(workdir)[0] if r["split"] == "train"]
    windows = [(r["step"] - previous["step"], r["steps_per_second"]) for previous, r in zip(records, records[1:])]
    return sum(steps for steps, _ in windows) / sum(steps / rate for steps, rate in windows)


def run(args, fetch_every_step: bool) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory() as workdir:
        result = train(config_for(args, fetch_every_step), workdir, quiet=True)
        return steps_per_second(Path(workdir)), result.losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--logging", type=int, default=50, help="logging.interval_steps")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    if args.steps < 3 * args.logging:
        parser.error("--steps must be at least 3 logging intervals (the first window is dropped)")
    rates: dict[bool, list[float]] = {True: [], False: []}
    losses: dict[bool, dict] = {}
    for _ in range(args.repeats):
        for every in (True, False):
            rate, losses[every] = run(args, every)
            rates[every].append(rate)
    old, new = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"steps/s, median of {args.repeats} ({args.steps} steps, d_model {args.d_model}, batch {args.batch_size}, "
          f"logging every {args.logging}):")
    runs = lambda every: ", ".join(f"{rate:.1f}" for rate in rates[every])
    print(f"  fetch every step (logging.fetch_every_step=true):  {old:8.2f}   runs {runs(True)}")
    print(f"  fetch per logging interval (default):              {new:8.2f}   runs {runs(False)}")
    print(f"  ratio: {new / old:.2f}x   losses equal: {losses[True] == losses[False]}")


if __name__ == "__main__":
    main()
