"""The first steps' training losses of families' test-sized configs, pinned before their train steps moved to the
trainer's one step (`tgjax.train.step`): a refactoring must not change a number.

    python -m tests.train.loss_pins record [FAMILY ...]    # rewrites their pins from the current code

Only record when a change of numbers is intended (say so in the commit); tests/train/test_loss_pins.py compares.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from tgjax.train.config import apply_overrides, load_config
from tgjax.train.loop import train

PINS = Path(__file__).with_name("loss_pins.json")
STEPS = 12
COMMON = ["logging.interval_steps=1", "logging.tensorboard=false", "checkpointing.interval_steps=1000",
          "checkpointing.async_save=false", f"training.num_steps={STEPS}", "evaluation.interval_steps=1000"]


def family_config(family: str, workdir: Path):
    if family == "mlm":
        return load_config("configs/udgn_tiny.py", [
            "model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
            "model.parser_hidden=8", "data.num_train_sentences=60", "data.num_valid_sentences=8",
            "training.token_budget=128", "training.length_bucket=32", "evaluation.runs=1", *COMMON])
    if family == "craft_bc":
        from tgjax.train.tasks.craft_bc import default_config

        return apply_overrides(default_config(), [
            "data.tasks=AC,CD", "data.num_demos=8", "model.hidden_size=8", "training.batch_size=4",
            "evaluation.batch_size=4", f"data.demo_dir={workdir / 'demos'}", *COMMON])
    if family == "pushdown_lm":
        return load_config("configs/pushdown_tiny.py", [
            "model.d_model=32", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=64",
            "model.sequence_length=32", "data.num_train_sentences=40", "data.num_valid_sentences=8",
            "training.batch_size=8", "evaluation.batch_size=8", *COMMON])
    if family == "cfl":  # one trial of one epoch: 15 batches of 8
        return load_config("configs/stack_cfl.py:marked_reversal,tf_sup", [
            "training.epochs=1", "data.train_size=120", "data.valid_size=8", "data.length_bucket=88",
            "training.batch_size=8", "evaluation.batch_size=8", "logging.interval_steps=1"])
    raise ValueError(f"no pinned config for {family!r}")


def losses(family: str) -> list[float]:
    with tempfile.TemporaryDirectory() as directory:
        result = train(family_config(family, Path(directory)), Path(directory) / "run", quiet=True)
    return [result.losses[step] for step in range(1, STEPS + 1)]


FAMILIES = ("mlm", "craft_bc", "pushdown_lm", "cfl")

if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    # `record FAMILY ...`: only those families' pins (the others keep theirs); `record`: all of them.
    chosen = sys.argv[2:] or FAMILIES
    pins = json.loads(PINS.read_text()) if PINS.exists() else {}
    PINS.write_text(json.dumps({**pins, **{family: losses(family) for family in chosen}}, indent=1) + "\n")
    print(f"wrote {PINS} ({', '.join(chosen)})")
