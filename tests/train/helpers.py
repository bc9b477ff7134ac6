"""Small configs and readers shared by the trainer tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tgjax.train.config import apply_overrides, default_config

# d_model 32, 2 layers, T = M = 16, batch 8, on a slice of the built-in treebank: one step is milliseconds.
TEST_OVERRIDES = [
    "model.d_model=32", "model.num_layers=2", "model.num_heads=4", "model.ffw_hidden_size=64",
    "model.sequence_length=16", "model.memory_length=16",
    "data.num_train_sentences=64", "data.num_valid_sentences=16",
    "training.batch_size=8", "evaluation.batch_size=8", "training.num_steps=10",
    "training.lr_schedule.kwargs.max_lr=0.003", "training.lr_schedule.kwargs.warmup_steps=3",
    "training.lr_schedule.kwargs.cosine_cycle_length=7",
    "evaluation.interval_steps=5", "checkpointing.interval_steps=2", "logging.interval_steps=1",
    "checkpointing.max_to_keep=10", "logging.tensorboard=false",
]


def small_config(*overrides: str):
    """The test-sized config with `overrides` ("a.b=v") applied on top."""
    return apply_overrides(default_config(), [*TEST_OVERRIDES, *overrides])


def read_metrics(workdir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]


def train_losses(workdir: Path) -> dict[int, float]:
    """step -> training loss from metrics.jsonl (logging.interval_steps=1: each step's own loss)."""
    return {r["step"]: r["loss"] for r in read_metrics(workdir) if r["split"] == "train"}


def assert_resumes_bit_identically(make_config: Callable, workdir: Path, *, stop_after_step: int,
                                   num_steps: int) -> None:
    """Train `make_config()` whole in workdir/whole, and stopped after `stop_after_step` then resumed in
    workdir/parts: the training losses (logging.interval_steps=1) must be the same, step for step, and the
    second part must have resumed (each step trained once, no checkpoint set aside): a deterministic run
    that silently starts again from step 0 would give the same losses."""
    from tgjax.train.loop import train

    train(make_config(), workdir / "whole", quiet=True)
    train(make_config(), workdir / "parts", stop_after_step=stop_after_step, quiet=True)
    resumed = train(make_config(), workdir / "parts", quiet=True)
    assert resumed.start_step == stop_after_step and not resumed.checkpoint_problems, resumed.checkpoint_problems
    whole = train_losses(workdir / "whole")
    assert whole == train_losses(workdir / "parts") and len(whole) == num_steps
