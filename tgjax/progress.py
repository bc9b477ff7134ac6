"""One progress printer for every long loop: training, a data epoch, scoring, parsing.

    progress = Progress(total=1000, label="step", stream=sys.stderr)
    progress.update(10, totals={"tokens": 51_200}, fields=["loss 3.1234"])
    ->  step   10/1000 | 4.95 steps/s | 25,344 tokens/s | loss 3.1234 | ETA 3m20s

On a terminal the line is redrawn in place; elsewhere (a log file, a pipe)
each printed update is a line of its own, so logs keep the history. `message`
prints a line between updates without it being overwritten. Rates are over
the whole run unless the caller measured its own (`rates=`: the trainer's
window, which leaves validation pauses out); the ETA always uses the rate
over the whole run, pauses included, since those recur.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TextIO


def format_duration(seconds: float) -> str:
    """`1h02m03s`, `2m03s`, or `?` for an unknown (infinite or NaN) duration."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _format_rate(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


class Progress:
    """A status line: `{label} {done}/{total} | {noun}s/s | other rates | fields | ETA`.

    Args:
      total: how many units make the whole run, or None when unknown (no ETA).
      label: the line's first word (`step`, `scored`, `searched`).
      noun: the unit `done` counts, singular (`step`, `sentence`): printed as `{noun}s/s`.
      start: units already done before this run (a resumed training run), left out of rates.
      stream: where the line goes (default stderr).
      enabled: False prints nothing at all (quiet, or not the main process).
      min_interval: seconds between printed updates; the last update (`done == total`) always prints.
    """

    def __init__(self, total: int | None, *, label: str = "step", noun: str = "step", start: int = 0,
                 stream: TextIO | None = None, enabled: bool = True, min_interval: float = 0.0):
        self.total, self.label, self.noun, self.start_count = total, label, noun, start
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.inline = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.min_interval = min_interval
        self.start = time.perf_counter()
        self._last_print = -math.inf
        self._drawn = False

    def line(self, done: int, elapsed: float, *, totals: Mapping[str, float] | None = None,
             rates: Mapping[str, float] | None = None, fields: Sequence[str] = ()) -> str:
        """The text of one update (see `update`), `elapsed` seconds after the start."""
        overall = (done - self.start_count) / elapsed if elapsed > 0 else 0.0
        measured = dict(rates or {})
        per_second = {f"{self.noun}s": measured.pop(f"{self.noun}s", overall)}
        for name, value in (totals or {}).items():
            per_second[name] = value / elapsed if elapsed > 0 else 0.0
        per_second.update(measured)
        if self.total is None:
            parts = [f"{self.label} {done}"]
        else:
            parts = [f"{self.label} {done:>{len(str(self.total))}}/{self.total}"]
        parts += [f"{_format_rate(value)} {name}/s" for name, value in per_second.items()]
        parts += list(fields)
        if self.total is not None:
            parts.append(f"ETA {format_duration((self.total - done) / overall if overall > 0 else math.inf)}")
        return " | ".join(parts)

    def update(self, done: int, *, totals: Mapping[str, float] | None = None,
               rates: Mapping[str, float] | None = None, fields: Sequence[str] = ()) -> None:
        """Prints the line for `done` units (subject to `min_interval`).

        Args:
          done: units done so far, `start` included.
          totals: other quantities counted since the start (`{"tokens": n}`), printed per second.
          rates: per-second rates the caller measured itself (`{"steps": r, "tokens": r}`); they
            replace the ones computed here.
          fields: further items, already formatted (`"loss 3.1234"`).
        """
        if not self.enabled:
            return
        now = time.perf_counter()
        final = self.total is not None and done >= self.total
        if now - self._last_print < self.min_interval and not final:
            return
        self._last_print = now
        text = self.line(done, now - self.start, totals=totals, rates=rates, fields=fields)
        if self.inline:
            print("\r" + text, end="", file=self.stream, flush=True)
            self._drawn = True
        else:
            print(text, file=self.stream, flush=True)

    def message(self, text: str) -> None:
        """A line of its own (validation results, checkpoints), not overwritten by the next update."""
        if not self.enabled:
            return
        self._end_line()
        print(text, file=self.stream, flush=True)

    def close(self) -> float:
        """Ends a line drawn in place; returns the seconds since the start."""
        if self.enabled:
            self._end_line()
        return time.perf_counter() - self.start

    def _end_line(self) -> None:
        if self._drawn:
            print(file=self.stream, flush=True)
            self._drawn = False
