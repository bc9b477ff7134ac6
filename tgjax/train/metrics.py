"""What a run reports: `metrics.jsonl`, TensorBoard events, and a progress line.

`WORKDIR/metrics.jsonl` has one JSON object per logged step:

    {"split": "train", "step": 120, "loss": 2.31, "learning_rate": 0.00042, "tokens_per_second": 5230.1,
     "steps_per_second": 9.8, "grad_norm": 0.71, "num_events": 3104}
    {"split": "valid", "step": 200, "loss": 1.87, "unigram_loss": 3.02, "num_events": 13250, "best": true}

On resume, records after the resumed step (from a run that stopped before
its next checkpoint) are dropped from the file, and TensorBoard purges them,
so the history reads as one run. Only process 0 writes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from tgjax.extras import MissingExtra, require_extra


class MetricsWriter:
    """Appends records to `metrics.jsonl` and scalars to TensorBoard (`WORKDIR/tensorboard`)."""

    def __init__(self, workdir: str | Path, *, start_step: int = 0, tensorboard: bool = True, enabled: bool = True):
        self.path = Path(workdir) / "metrics.jsonl"
        self.enabled = enabled
        self._writer = None
        if not enabled:
            return
        self._truncate_after(start_step)
        self._file = open(self.path, "a", encoding="utf-8")
        if tensorboard:
            try:
                tensorboardx = require_extra("tensorboardX", extra="tensorboard", purpose="TensorBoard events")
            except MissingExtra as e:  # the default config asks for events: train on, with metrics.jsonl only
                print(f"tgjax: no TensorBoard events ({e}); set logging.tensorboard=false to silence this",
                      file=sys.stderr)
                return
            # purge_step: events from a previous attempt past the resumed step are hidden.
            self._writer = tensorboardx.SummaryWriter(str(Path(workdir) / "tensorboard"),
                                                      purge_step=start_step + 1 if start_step else None)

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        records, unreadable = read_metrics(self.path)
        if unreadable:
            print(f"warning: {self.path}: dropped {len(unreadable)} line(s) that are not JSON (cut short by a "
                  f"crash?): line(s) {', '.join(map(str, unreadable[:10]))}", file=sys.stderr)
        kept = [json.dumps(r, allow_nan=True) for r in records if r.get("step", 0) <= step]
        self.path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        """One record: `step` and `split` ("train" / "valid") plus any scalars."""
        if not self.enabled:
            return
        self._file.write(json.dumps(record, allow_nan=True) + "\n")
        self._file.flush()
        if self._writer is not None:
            step, split = record["step"], record["split"]
            for name, value in record.items():
                if name not in ("step", "split") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._writer.add_scalar(f"{split}/{name}", value, step)
            self._writer.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._writer is not None:
            self._writer.close()


def read_metrics(path: str | Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a `metrics.jsonl` (a file, or a workdir holding one), and the 1-based numbers of the
    lines that are not JSON objects (a line cut short by a crash). FileNotFoundError names the file."""
    path = Path(path)
    if path.is_dir() or path.suffix != ".jsonl":
        path = path / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (a run's metrics.jsonl, written by tgjax train)")
    records, unreadable = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line.strip():
            unreadable.append(number)
    return records, unreadable


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class Progress:
    """One status line: step, steps/s, tokens/s, loss, learning rate, ETA.

    On a terminal the line is redrawn in place; otherwise (logs, pipes) one
    line is printed per logging interval.
    """

    def __init__(self, total_steps: int, start_step: int, *, stream: TextIO | None = None, enabled: bool = True):
        self.total, self.start_step = total_steps, start_step
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.inline = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self._drawn = False

    def update(self, step: int, *, loss: float, learning_rate: float, steps_per_second: float,
               tokens_per_second: float) -> None:
        if not self.enabled:
            return
        done = step - self.start_step
        elapsed = time.perf_counter() - self.start
        overall = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - step) / overall if overall > 0 else float("inf")
        width = len(str(self.total))
        line = (f"step {step:>{width}}/{self.total} | {steps_per_second:6.2f} steps/s | "
                f"{tokens_per_second:9,.0f} tokens/s | loss {loss:7.4f} | lr {learning_rate:.2e} | "
                f"ETA {format_duration(eta)}")
        if self.inline:
            print("\r" + line, end="", file=self.stream, flush=True)
            self._drawn = True
        else:
            print(line, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        """A line of its own (validation results, checkpoints), not overwritten by the next update."""
        if not self.enabled:
            return
        if self._drawn:
            print(file=self.stream)
            self._drawn = False
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.enabled and self._drawn:
            print(file=self.stream, flush=True)
            self._drawn = False
