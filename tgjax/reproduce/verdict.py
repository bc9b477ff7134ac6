"""Means, spreads and the one verdict rule every row of the ledger follows.

A verdict of "reproduced" or "in direction" needs at least `MIN_SEEDS` seeds of both sides (`MIN_SEEDS_SHORT`
where a run takes under `SHORT_RUN_SECONDS`: more seeds are cheap there) and a difference larger than the spread
over them (the larger of the two sample standard deviations); a difference as large
the other way is "contradicted"; anything else is "not yet". The rule is here once so that the curated claims
file and the automated runs are judged alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

VERDICTS = ("reproduced", "in direction", "not yet", "contradicted")
MIN_SEEDS = 3
MIN_SEEDS_SHORT = 5
SHORT_RUN_SECONDS = 300.0


def seeds_needed(run_seconds: float | None = None) -> int:
    """How many seeds of each side a verdict needs: `MIN_SEEDS_SHORT` for runs of under `SHORT_RUN_SECONDS` of
    training (`run_seconds`, the longest run's), else `MIN_SEEDS` (also when the time is unknown)."""
    return MIN_SEEDS_SHORT if run_seconds is not None and run_seconds < SHORT_RUN_SECONDS else MIN_SEEDS


@dataclasses.dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation of one quantity over seeds (sd None below two seeds)."""

    mean: float
    sd: float | None
    n: int

    def text(self, digits: int = 2) -> str:
        if self.n == 1:
            return f"{self.mean:.{digits}f} (1 seed, no spread)"
        if self.n < MIN_SEEDS:
            return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f} ({self.n} seeds: too few for a spread)"
        return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f} ({self.n} seeds)"


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values to summarise")
    n = len(values)
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Spread(mean, sd, n)


def record_text(found: dict | None) -> str:
    """A spread as the runs' records keep it (`{"mean", "sd", "n"}`, or None where nothing was judged) as one
    phrase: "mean ± sd (n = N)", "mean no spread (n = 1)" or "none judged"; the CLI and the ledger both print it."""
    if not found:
        return "none judged"
    sd = "no spread" if found["sd"] is None else f"± {found['sd']:.2f}"
    return f"{found['mean']:.2f} {sd} (n = {found['n']})"


def judge(model: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool = True,
          paper: float | None = None, tolerance: float = 0.0, run_seconds: float | None = None) -> tuple[str, str]:
    """(verdict, why) for "the model beats the baseline" measured over seeds (`seeds_needed(run_seconds)` of
    each side at least; `run_seconds`: the longest run's training time, if known).

    "reproduced" additionally needs the model's mean within `tolerance` (or the spread, if larger) of the
    paper's number; without a paper number it stops at "in direction".
    """
    n, needed = min(len(model), len(baseline)), seeds_needed(run_seconds)
    if n < needed:
        short = f" (runs of under {SHORT_RUN_SECONDS:.0f} s)" if needed == MIN_SEEDS_SHORT else ""
        return "not yet", f"{n} seed(s) of each side: fewer than {needed}{short}, so no spread to judge a difference by"
    ours, theirs = spread(model), spread(baseline)
    noise = max(ours.sd or 0.0, theirs.sd or 0.0)
    gain = (ours.mean - theirs.mean) * (1 if higher_is_better else -1)
    margin = f"difference {gain:+.2f} against a spread of {noise:.2f} over {n} seeds"
    if gain > noise:
        if paper is not None and abs(ours.mean - paper) <= max(tolerance, noise):
            return "reproduced", f"{margin}; the model's mean is within {max(tolerance, noise):.2f} of the paper's"
        far = "" if paper is None else f"; the model's mean is {abs(ours.mean - paper):.2f} from the paper's {paper}"
        return "in direction", margin + far
    if -gain > noise:
        return "contradicted", margin + " (the baseline is ahead)"
    return "not yet", margin + ": within the spread"


def combine(verdicts: dict[str, str]) -> tuple[str, str]:
    """(verdict, why) of a claim made on several parts at once ({part: its verdict}): contradicted when a part
    is; reproduced or in direction only when every part is (the weaker of the two when they differ); otherwise
    not yet."""
    if not verdicts:
        raise ValueError("no parts to combine")
    for verdict in verdicts.values():
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    listing = "; ".join(f"{part}: {verdict}" for part, verdict in verdicts.items())
    found = set(verdicts.values())
    if "contradicted" in found:
        against = ", ".join(part for part, verdict in verdicts.items() if verdict == "contradicted")
        return "contradicted", f"contradicted on {against} ({listing})"
    if found <= {"reproduced", "in direction"}:
        combined = "reproduced" if found == {"reproduced"} else "in direction"
        return combined, f"every part {combined} ({listing})"
    return "not yet", f"not every part shows it ({listing})"


def check_curated(verdict: str, seeds: int | None) -> None:
    """Refuses a curated verdict the rule does not allow (a claimed direction on fewer than MIN_SEEDS seeds)."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    if verdict != "not yet" and (seeds or 0) < MIN_SEEDS:
        raise ValueError(f"verdict {verdict!r} needs at least {MIN_SEEDS} seeds, the evidence has {seeds or 0}")
