"""What a run reports: `metrics.jsonl`, TensorBoard events, and the summing window behind each train record
(the progress line: `tgjax.progress`).

`WORKDIR/metrics.jsonl` has one JSON object per logged step:

    {"split": "train", "step": 120, "loss": 2.31, "learning_rate": 0.00042, "tokens_per_second": 5230.1,
     "steps_per_second": 9.8, "grad_norm": 0.71, "num_events": 3104}
    {"split": "valid", "step": 200, "loss": 1.87, "unigram_loss": 3.02, "num_events": 13250, "best": true}

On resume, records after the resumed step (from a run that stopped before
its next checkpoint) are dropped from the file, and TensorBoard purges them,
so the history reads as one run. Only process 0 writes.

A workdir on a bucket (`gs://...`, `tgjax.workdir.workdir_path`) gets the same
files: an object cannot be appended to, so the writer keeps them in a local
staging directory (the bucket's `metrics.jsonl` fetched into it first;
TensorBoard's events written there by tensorboardX) and copies them up through
`etils.epath` at most every `upload_seconds` and when it closes. A run killed
outright loses at most that much of its records, which a resume from its last
checkpoint drops anyway.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tgjax.extras import MissingExtra, require_extra
from tgjax.workdir import is_url, workdir_path


class MetricsWriter:
    """Appends records to `metrics.jsonl` and scalars to TensorBoard (`WORKDIR/tensorboard`).

    `workdir` is a local directory or a bucket URL; for a bucket the files are
    written in a local staging directory and uploaded (see the module
    docstring).
    """

    def __init__(self, workdir: str | os.PathLike, *, start_step: int = 0, tensorboard: bool = True,
                 enabled: bool = True, upload_seconds: float = 30.0):
        self.workdir = workdir_path(workdir)
        self.path = self.workdir / "metrics.jsonl"  # where the records end up
        self.enabled = enabled
        self.upload_seconds = upload_seconds
        self._writer = None
        self._staging: Path | None = None  # a bucket workdir's local copy
        if not enabled:
            return
        local = self.workdir
        if is_url(self.workdir):
            self._staging = local = Path(tempfile.mkdtemp(prefix="tgjax-metrics-"))
            if self.path.exists():
                (local / "metrics.jsonl").write_bytes(self.path.read_bytes())
        self._local_path = local / "metrics.jsonl"
        self._truncate_after(start_step)
        self._file = self._local_path.open("a", encoding="utf-8")
        self._uploaded_at = -math.inf
        if tensorboard:
            try:
                tensorboardx = require_extra("tensorboardX", extra="tensorboard", purpose="TensorBoard events")
            except MissingExtra as e:  # the default config asks for events: train on, with metrics.jsonl only
                print(f"tgjax: no TensorBoard events ({e}); set logging.tensorboard=false to silence this",
                      file=sys.stderr)
                return
            # purge_step: events from a previous attempt past the resumed step are hidden.
            self._writer = tensorboardx.SummaryWriter(str(local / "tensorboard"),
                                                      purge_step=start_step + 1 if start_step else None)

    def _truncate_after(self, step: int) -> None:
        if not self._local_path.exists():
            return
        records, unreadable = read_metrics(self._local_path)
        if unreadable:
            print(f"warning: {self.path}: dropped {len(unreadable)} line(s) that are not JSON (cut short by a "
                  f"crash?): line(s) {', '.join(map(str, unreadable[:10]))}", file=sys.stderr)
        kept = [json.dumps(r, allow_nan=True) for r in records if r.get("step", 0) <= step]
        self._local_path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
        if self._staging is not None:
            self._upload()  # the dropped records go from the bucket too, whatever happens next

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
        if self._staging is not None and time.monotonic() - self._uploaded_at >= self.upload_seconds:
            self._upload()

    def _upload(self) -> None:
        """Copies the staged files (metrics.jsonl, TensorBoard's events) to the bucket workdir, whole."""
        assert self._staging is not None
        self._uploaded_at = time.monotonic()
        for local in sorted(self._staging.rglob("*")):
            if local.is_file():
                target = self.workdir / local.relative_to(self._staging).as_posix()
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(local.read_bytes())

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._writer is not None:
            self._writer.close()
        if self._staging is not None:
            self._upload()
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


def read_metrics(path: str | Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a `metrics.jsonl` (a file, or a workdir holding one), and the 1-based numbers of the
    lines that are not JSON objects (a line cut short by a crash). FileNotFoundError names the file. A bucket
    URL (`gs://...`) is read through `etils.epath`."""
    path = workdir_path(path) if is_url(path) else Path(path)
    if path.is_dir() or path.suffix != ".jsonl":
        path = path / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (a run's metrics.jsonl, written by tgjax train)")
    from tgjax.data.text_files import decode_line

    records, unreadable = [], []
    data = path.read_bytes()
    raw_lines = data.splitlines()
    for number, raw in enumerate(raw_lines, start=1):
        if number == len(raw_lines) and not data.endswith(b"\n"):  # cut short by a kill, maybe mid-character
            raw = raw.decode("utf-8", errors="replace").encode()
        line = decode_line(raw, str(path), number)  # bad bytes elsewhere: an error naming file:line:column
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line.strip():
            unreadable.append(number)
    return records, unreadable




class SummingWindow:
    """A task's train record over one logging interval (a `tgjax.train.task.MetricsWindow`).

    Each step's metrics (host scalars) are summed; the record divides the sums:

        SummingWindow(ratios={"loss": ("sum_nll", "num_masked")}, tokens="num_tokens", perplexity_of="loss")

    gives `loss = Σ sum_nll / max(Σ num_masked, 1)`, `perplexity = exp(min(loss, 50))`,
    `tokens_per_second = Σ num_tokens / seconds`, and always `steps_per_second`,
    and the last step's `learning_rate` and `grad_norm` (when the step reports one).

    Args:
      ratios: record name -> (numerator key, denominator key), or (numerator key, None) for a mean per step.
      tokens: the metrics key that counts tokens, for tokens/s.
      totals: record name -> metrics key, summed and recorded as is (an int stays an int).
      perplexity_of: a ratio whose exp (capped at e^50) is recorded as "perplexity".
      steps_per_epoch: when given, the record has the `epoch` its step falls in (1-based).
      learning_rate: a constant rate to record, for a step that does not report its own.
    """

    def __init__(self, *, ratios: dict[str, tuple[str, str | None]], tokens: str,
                 totals: dict[str, str] | None = None, perplexity_of: str | None = None,
                 steps_per_epoch: int | None = None, learning_rate: float | None = None):
        self.ratios, self.tokens, self.totals = ratios, tokens, totals or {}
        self.perplexity_of = perplexity_of
        self.steps_per_epoch, self.learning_rate = steps_per_epoch, learning_rate
        self.keys = sorted({key for pair in ratios.values() for key in pair if key is not None}
                           | {tokens} | set(self.totals.values()))
        self.sums: dict[str, int | float] = dict.fromkeys(self.keys, 0)
        self.steps = 0
        self.start = time.perf_counter()  # the trainer moves it past validation and saving

    def add(self, metrics: dict) -> None:
        self.steps += 1
        for key in self.keys:
            self.sums[key] += np.asarray(metrics[key]).item()  # a Python int or float, as the metric's dtype

    def record(self, step: int, metrics: dict) -> dict[str, Any]:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        record: dict[str, Any] = {"split": "train", "step": step}
        if self.steps_per_epoch is not None:
            record["epoch"] = -(-step // self.steps_per_epoch)
        for name, (numerator, denominator) in self.ratios.items():
            count = self.steps if denominator is None else self.sums[denominator]
            record[name] = self.sums[numerator] / max(count, 1)
        if self.perplexity_of is not None:
            record["perplexity"] = math.exp(min(record[self.perplexity_of], 50.0))
        record.update({name: self.sums[key] for name, key in self.totals.items()})
        record["learning_rate"] = (float(metrics["learning_rate"]) if self.learning_rate is None
                                   else self.learning_rate)
        if "grad_norm" in metrics:  # a step without gradients of its own (PPO's inner epochs) has none
            record["grad_norm"] = float(metrics["grad_norm"])
        record.update(steps_per_second=self.steps / elapsed, tokens_per_second=self.sums[self.tokens] / elapsed)
        return record
