"""The CFL grid over several seeds: mean ± sd per cell, the paper's best-by-validation pick, and §6's claims judged.

`benchmarks/cfl_grid.py --seed S` runs the five CFLs × {Tf, Tf+Sup, Tf+Nd}
once (one trial per cell). This reads several such runs (their
`cfl_grid.json`, or the compact per-seed record this script writes) and
writes into --out:

  cfl_seeds_cells.json     every seed's cells in compact form (test Δ overall, ≤ 80, > 80, validation Δ, epochs,
                           seconds, per-length Δ): the record the tables are made from, readable again with --cells
  cfl_seeds_table.md       per cell: mean ± sd over the seeds; the paper's protocol at this scale (the trial with
                           the best validation Δ, tested); every claim of §6 and Fig. 2's caption with its verdict
  cfl_seeds_by_length.png  test Δ by string length, mean ± sd over the seeds with per-length bins (Fig. 2, right)

A verdict follows `tgjax.reproduce.verdict.judge` (the ledger's one rule): at
least 3 seeds of each side (5 where both sides' trials train for under 5
minutes), and a difference of means larger than the larger of the two sample
standard deviations; as large the other way is "contradicted".

A cell trained again (`cfl_grid.py --seed S --tasks T --models M` with other settings, e.g. without the time cap
that stopped it) is given with --rerun: its cells replace the same seed's, and the cells they replace stay in the
record under the seed's "replaced", with the rerun's source, so no figure is dropped without trace. A cell the seed
did not have (a model trained later for that seed) is added, and named with the rerun's source under "added".

    python benchmarks/cfl_grid_seeds.py --grid OUT_SEED2 --grid OUT_SEED3 --cells RECORD.json --out OUT
    python benchmarks/cfl_grid_seeds.py --cells RECORD.json --rerun OUT_RERUN --out OUT
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from cfl_grid import MAX_TRAIN_LENGTH, MODEL_LABELS, MODELS, TASK_LABELS, TASKS, range_delta  # noqa: E402

from tgjax.data import text_files  # noqa: E402
from tgjax.reproduce.verdict import judge, spread  # noqa: E402

DCFLS = ("marked_reversal", "dyck")
NONDETERMINISTIC = ("unmarked_reversal", "padded_reversal", "hardest_cfl")

# A comparison: (task, model, baseline, quantity); the claim is "model's quantity is lower than baseline's",
# quantity one of "test" (whole test range), "within" (lengths ≤ 80), "rise" (past 80 minus within: how much
# worse the model does on lengths it never saw; for the over-fitting claim the model is expected *higher*).
Comparison = tuple[str, str, str, str]


def _lower(task: str, model: str, baseline: str, quantity: str = "test") -> Comparison:
    return task, model, baseline, quantity


CLAIMS: tuple[tuple[str, str, tuple[Comparison, ...]], ...] = (
    ("Tf+Sup outperforms Tf on all tasks except the Hardest CFL", "§6",
     tuple(_lower(t, "tf_sup", "tf") for t in TASKS if t != "hardest_cfl")),
    ("Tf+Nd achieves strong results on all tasks (here: in distribution, lower than Tf)", "§6",
     tuple(_lower(t, "tf_nd", "tf", "within") for t in TASKS)),
    ("... except out-of-distribution lengths on the DCFLs: Tf+Nd over-fits the training lengths there "
     "(here: its rise past length 80 is larger than Tf's)", "§6",
     tuple(_lower(t, "tf", "tf_nd", "rise") for t in DCFLS)),
    ("Tf+Nd outperforms all models on the Hardest CFL in distribution, with the fewest parameters",
     "§6; Fig. 2 caption",
     (_lower("hardest_cfl", "tf_nd", "tf", "within"), _lower("hardest_cfl", "tf_nd", "tf_sup", "within"))),
    ("Tf+Nd outperforms Tf and Tf+Sup on every nondeterministic CFL (wwᴿ, waᵖwᴿ, Hardest CFL)", "§6",
     tuple(_lower(t, "tf_nd", b) for t in NONDETERMINISTIC for b in ("tf", "tf_sup"))),
    ("Tf and even Tf+Sup do poorly on wwᴿ, which shows the value of nondeterminism", "§6",
     (_lower("unmarked_reversal", "tf_nd", "tf"), _lower("unmarked_reversal", "tf_nd", "tf_sup"))),
    ("Tf+Nd outperforms Tf on w#wᴿ, waᵖwᴿ and the Hardest CFL", "Fig. 2 caption",
     tuple(_lower(t, "tf_nd", "tf") for t in ("marked_reversal", "padded_reversal", "hardest_cfl"))),
)
# §6's comparisons with the LSTM counterparts (LSTM beats Tf on all but Dyck; LSTM+Sup generally beats Tf+Sup;
# LSTM+Nd generalises better in length than Tf+Nd and beats it on wwᴿ; Tf+Nd better in distribution on the
# Hardest CFL) need LSTM, LSTM+Sup and LSTM+Nd, which this grid does not train.
NOT_MEASURED = ("LSTM outperforms Tf on all tasks except Dyck; LSTM+Sup generally outperforms Tf+Sup; LSTM+Nd "
                "generalises better in length than Tf+Nd and outperforms it on wwᴿ, Tf+Nd is better in distribution "
                "on the Hardest CFL (§6)")


def cell_of_result(result: dict) -> dict:
    """The compact cell of one job's results.json."""
    bins = result["test"]["bins"]
    trials = result.get("trials") or [{}]
    return {"test": result["test"]["cross_entropy_difference"],
            "within": range_delta(bins, within=True), "past": range_delta(bins, within=False),
            "valid": result.get("valid_cross_entropy_difference"), "epochs": result.get("epochs_run"),
            "stopped_by_budget": any(t.get("stopped_by_budget") for t in trials),
            "seconds": max((t.get("seconds") or 0.0) for t in trials) or None,
            "num_parameters": result.get("num_parameters"),
            "by_length": {str(k): v["cross_entropy_difference"] for k, v in bins.items()}}


def read_json(path: Path, expected: str, key: str) -> dict:
    """The JSON object in `path`, which must hold `key`; anything else stops with one line naming the file (and,
    for bad bytes or invalid JSON, the line and column: `tgjax.data.text_files.read_json`)."""
    try:
        data = text_files.read_json(path)
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such file; expected {expected}") from None
    except ValueError as error:
        raise SystemExit(f"{error}; expected {expected}") from None
    if not isinstance(data, dict) or key not in data:
        raise SystemExit(f"{path}: no {key!r} in it; expected {expected}")
    return data


def seed_of_grid(path: Path) -> dict:
    """One cfl_grid.json (or the directory holding it) as {"seed", "source", "scale", "cells"}."""
    path = path / "cfl_grid.json" if path.is_dir() else path
    grid = read_json(path, "a finished benchmarks/cfl_grid.py run's cfl_grid.json", "jobs")
    cells: dict[str, dict[str, dict]] = {}
    for job in grid["jobs"]:
        if job.get("result") is not None:
            cells.setdefault(job["task"], {})[job["model"]] = cell_of_result(job["result"])
    return {"seed": grid["args"]["seed"], "source": str(path), "scale": grid.get("scale"), "cells": cells}


def read_seeds(grids: Sequence[Path], records: Sequence[Path]) -> list[dict]:
    """Every seed from the grids and the compact records; a seed given twice is refused (it would count twice)."""
    seeds = [seed_of_grid(Path(g)) for g in grids]
    for record in records:
        seeds += read_json(Path(record), "a record this script wrote (cfl_seeds_cells.json)", "seeds")["seeds"]
    numbers = [s["seed"] for s in seeds]
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise SystemExit(f"seed(s) {repeated} given more than once (each seed is one trial per cell)")
    return sorted(seeds, key=lambda s: s["seed"])


def apply_reruns(seeds: list[dict], reruns: Sequence[Path]) -> list[dict]:
    """`seeds` with each rerun's cells in place of the same seed's (a rerun of a seed not in `seeds` is refused);
    each replaced cell is kept under the seed's "replaced"[task][model], with "replaced_by": the rerun's source;
    a cell the seed lacked is added, its source under the seed's "added"[task][model]."""
    by_seed = {s["seed"]: s for s in seeds}
    for path in reruns:
        rerun = seed_of_grid(Path(path))
        seed = by_seed.get(rerun["seed"])
        if seed is None:
            raise SystemExit(f"{rerun['source']}: a rerun of seed {rerun['seed']}, which no --grid or --cells gives")
        for task, models in rerun["cells"].items():
            for model, cell in models.items():
                old = seed["cells"].setdefault(task, {}).get(model)
                if old is not None:
                    seed.setdefault("replaced", {}).setdefault(task, {})[model] = {**old, "replaced_by":
                                                                                   rerun["source"]}
                else:
                    seed.setdefault("added", {}).setdefault(task, {})[model] = rerun["source"]
                seed["cells"][task][model] = cell
    return seeds


def values(seeds: Sequence[dict], task: str, model: str, quantity: str) -> list[float]:
    """One number per seed that has the cell: test / within / past / valid, or rise = past - within."""
    out = []
    for seed in seeds:
        cell = seed["cells"].get(task, {}).get(model)
        if cell is None:
            continue
        value = cell["past"] - cell["within"] if quantity == "rise" else cell.get(quantity)
        if value is not None and not math.isnan(value):
            out.append(float(value))
    return out


def longest_seconds(seeds: Sequence[dict], task: str, models: Sequence[str]) -> float | None:
    """The longest training time of any trial of these cells (None when no seed recorded one)."""
    times = [seed["cells"][task][m]["seconds"] for seed in seeds for m in models
             if m in seed["cells"].get(task, {}) and seed["cells"][task][m].get("seconds")]
    return max(times) if times else None


def judge_comparison(seeds: Sequence[dict], comparison: Comparison) -> tuple[str, str]:
    task, model, baseline, quantity = comparison
    return judge(values(seeds, task, model, quantity), values(seeds, task, baseline, quantity),
                 higher_is_better=False, run_seconds=longest_seconds(seeds, task, (model, baseline)))


def claim_verdict(verdicts: Sequence[str]) -> str:
    """A claim holds ("in direction") only if each of its comparisons does; one contradicted part contradicts it."""
    if "contradicted" in verdicts:
        return "contradicted"
    return "in direction" if verdicts and all(v == "in direction" for v in verdicts) else "not yet"


def best_by_validation(seeds: Sequence[dict], task: str, model: str) -> tuple[dict, int, int] | None:
    """(the cell with the lowest validation Δ, its seed, how many trials it was chosen from), as the paper picks
    its best of 10. Only the seeds where every model of the task has a validation Δ take part, so that each model
    has the same number of restarts; None when there is no such seed."""
    common = [s for s in seeds
              if all(s["cells"].get(task, {}).get(m, {}).get("valid") is not None for m in MODELS)]
    if not common:
        return None
    best = min(common, key=lambda s: s["cells"][task][model]["valid"])
    return best["cells"][task][model], best["seed"], len(common)


def _mean_sd(xs: Sequence[float], digits: int = 3) -> str:
    if not xs:
        return "—"
    s = spread(xs)
    return f"{s.mean:.{digits}f}" if s.n == 1 else f"{s.mean:.{digits}f} ± {s.sd:.{digits}f}"


def _comparison_text(seeds: Sequence[dict], comparison: Comparison, verdict: str) -> str:
    task, model, baseline, quantity = comparison
    what = {"test": "", "within": " ≤ 80", "rise": " rise past 80"}[quantity]
    left, right = values(seeds, task, model, quantity), values(seeds, task, baseline, quantity)
    if quantity == "rise":  # the claim: Tf+Nd's rise is the larger (model/baseline were swapped to say "lower")
        return (f"{TASK_LABELS[task]}{what}: {MODEL_LABELS[baseline]} {_mean_sd(right)} vs {MODEL_LABELS[model]} "
                f"{_mean_sd(left)} → {verdict}")
    return (f"{TASK_LABELS[task]}{what}: {MODEL_LABELS[model]} {_mean_sd(left)} vs {MODEL_LABELS[baseline]} "
            f"{_mean_sd(right)} → {verdict}")


def epochs_text(seeds: Sequence[dict], task: str, model: str) -> str:
    """The epochs a cell's trials trained, "12" or "7–10", with how many the time cap stopped ("—" for none)."""
    cells = [s["cells"][task][model] for s in seeds if model in s["cells"].get(task, {})]
    epochs = [c["epochs"] for c in cells if c.get("epochs") is not None]
    if not epochs:
        return "—"
    capped = sum(bool(c.get("stopped_by_budget")) for c in cells)
    span = f"{min(epochs)}" if min(epochs) == max(epochs) else f"{min(epochs)}–{max(epochs)}"
    return span + (f" ({capped} of {len(cells)} capped)" if capped else "")


def format_tables(seeds: Sequence[dict]) -> str:
    seed_list = ", ".join(str(s["seed"]) for s in seeds)
    lines = [f"Test cross-entropy difference (nats/symbol, lower is better), mean ± sd over the seeds that ran "
             f"the cell (seeds {seed_list}; n per cell in brackets); lengths ≤ 80 / > 80 from the per-length bins.",
             "", "| task | " + " | ".join(MODEL_LABELS[m] for m in MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    for task in TASKS:
        row = []
        for model in MODELS:
            test = values(seeds, task, model, "test")
            row.append(f"{_mean_sd(test, 4)} ({_mean_sd(values(seeds, task, model, 'within'))} / "
                       f"{_mean_sd(values(seeds, task, model, 'past'))}; n={len(test)})" if test else "—")
        lines.append(f"| {TASK_LABELS[task]} | " + " | ".join(row) + " |")
    lines += ["", "Epochs each cell's trials trained (the range over the seeds; \"capped\": trials the time cap "
              "stopped before the epoch limit):", "",
              "| task | " + " | ".join(MODEL_LABELS[m] for m in MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    for task in TASKS:
        lines.append(f"| {TASK_LABELS[task]} | " + " | ".join(epochs_text(seeds, task, m) for m in MODELS) + " |")
    lines += ["", "The paper's protocol at this scale: per cell, the trial with the lowest validation Δ, tested "
              "(the paper: the best of 10 trials), each model chosen from the same seeds (those where all three "
              "recorded a validation Δ). Test Δ (≤ 80 / > 80; its seed; trials it was chosen from):", "",
              "| task | " + " | ".join(MODEL_LABELS[m] for m in MODELS) + " |", "|---|" + "---|" * len(MODELS)]
    for task in TASKS:
        row = []
        for model in MODELS:
            best = best_by_validation(seeds, task, model)
            row.append("—" if best is None else f"{best[0]['test']:.4f} ({best[0]['within']:.3f} / "
                       f"{best[0]['past']:.3f}; seed {best[1]}; of {best[2]})")
        lines.append(f"| {TASK_LABELS[task]} | " + " | ".join(row) + " |")
    lines += ["", "Every claim of §6 and Fig. 2's caption about these models, each comparison judged over the seeds "
              "(`tgjax.reproduce.verdict.judge`: a difference of means larger than the larger sd, with at least 3 "
              "seeds a side, 5 where both sides train for under 5 minutes):", "",
              "| # | claim (where) | comparisons (mean ± sd) | verdict |", "|---|---|---|---|"]
    for number, (claim, where, comparisons) in enumerate(CLAIMS, 1):
        judged = [judge_comparison(seeds, c) for c in comparisons]
        parts = "; ".join(_comparison_text(seeds, c, v) for c, (v, _) in zip(comparisons, judged))
        lines.append(f"| {number} | {claim} ({where}) | {parts} | {claim_verdict([v for v, _ in judged])} |")
    lines.append(f"| {len(CLAIMS) + 1} | {NOT_MEASURED} | not measured: this grid trains no LSTMs | — |")
    counts = {m: {s["cells"]["hardest_cfl"][m].get("num_parameters") for s in seeds
                  if m in s["cells"].get("hardest_cfl", {})} - {None} for m in MODELS}
    if all(counts.values()):
        lines += ["", "Parameters on the Hardest CFL: " + ", ".join(
            f"{MODEL_LABELS[m]} {'/'.join(f'{c:,}' for c in sorted(counts[m]))}" for m in MODELS)
            + " (the paper's Table 5: Tf 43,304, Tf+Sup 41,224, Tf+Nd 36,861)."]
    return "\n".join(lines)


def plot_by_length(seeds: Sequence[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", flush=True)
        return False
    fig, axes = plt.subplots(1, len(TASKS), figsize=(4 * len(TASKS), 3.4))
    for ax, task in zip(axes, TASKS):
        for model in MODELS:
            curves = [s["cells"][task][model]["by_length"] for s in seeds
                      if model in s["cells"].get(task, {}) and s["cells"][task][model].get("by_length")]
            lengths = sorted({int(k) for c in curves for k in c})
            if not lengths:
                continue
            means, sds = [], []
            for length in lengths:
                at = [c[str(length)] for c in curves if str(length) in c]
                means.append(sum(at) / len(at))
                sds.append(spread(at).sd or 0.0)
            seeds_text = f"{len(curves)} seed" + ("s" if len(curves) > 1 else "")
            line, = ax.plot(lengths, means, label=f"{MODEL_LABELS[model]} ({seeds_text})")
            ax.fill_between(lengths, [m - s for m, s in zip(means, sds)], [m + s for m, s in zip(means, sds)],
                            color=line.get_color(), alpha=0.2, linewidth=0)
        ax.axvline(MAX_TRAIN_LENGTH, linestyle="--", color="gray", linewidth=0.8)
        ax.set_title(TASK_LABELS[task])
        ax.set_xlabel("length")
        ax.set_ylim(bottom=0)
        ax.set_xlim(40, 100)
        if ax.get_lines()[1:]:  # the models' lines beside the dashed one
            ax.legend(fontsize=7)
    axes[0].set_ylabel("test cross-entropy diff. (nats), mean ± sd")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", action="append", default=[], type=Path,
                    help="a cfl_grid.py --out directory (or its cfl_grid.json); repeat for each seed")
    ap.add_argument("--cells", action="append", default=[], type=Path,
                    help="a compact record (this script's cfl_seeds_cells.json); repeat as needed")
    ap.add_argument("--rerun", action="append", default=[], type=Path,
                    help="a cfl_grid.py --out directory whose cells replace the same seed's (the old ones kept)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    if not args.grid and not args.cells:
        ap.error("give at least one --grid or --cells")
    seeds = apply_reruns(read_seeds(args.grid, args.cells), args.rerun)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cfl_seeds_cells.json").write_text(json.dumps({"seeds": seeds}, indent=1, ensure_ascii=False) + "\n")
    text = format_tables(seeds)
    (args.out / "cfl_seeds_table.md").write_text(text + "\n")
    plotted = plot_by_length(seeds, args.out / "cfl_seeds_by_length.png")
    print(text)
    print(f"\nwrote {args.out / 'cfl_seeds_cells.json'}, cfl_seeds_table.md"
          + (", cfl_seeds_by_length.png" if plotted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
