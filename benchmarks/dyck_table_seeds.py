"""Pushdown Layers' Table 1 at CPU scale over seeds: the Pushdown-LM against its Base-LM, each set judged.

Per seed, `configs/pushdown_dyck.py:cpu` (the Pushdown-LM with the release's head: 4 layers of d = 64, rows of
64, 400 steps; the module docstring of the config) and `:base-cpu` (the same with no pushdown layer, the
attachment head still trained) are trained, then scored by `tgjax eval dyck` at their best validation
checkpoint on Table 1's five sets (long-range dyck50..dyck300 at the training depth, depth 15-50): the
Pushdown-LM on its own tape (the top of a beam over the prefix, `--beam-size`, 50 as the release: the paper's
protocol) and, as a diagnostic no paper reports, on the gold tape; the Base-LM reads no tape. `--models` adds
`paper_head` (`:cpu-paper-head`, the paper's attachment head), scored on its own tape and shown beside, with the
two heads compared by the same rule (the paper's head as the model, the release's as the baseline).

Each set's accuracy is the mean ± sample standard deviation over the seeds, and the Pushdown-LM's own tape is
judged against the Base-LM by `tgjax.reproduce.verdict.judge` (the ledger's rule: a direction only where the
difference exceeds the spread over at least 3 seeds). Every run and score is kept in the work folder: running
the same command again reuses what is there and does only what is missing.

    python benchmarks/dyck_table_seeds.py [--seeds 42,43,44] [--models pushdown,base] [--beam-size 50]
        [--workdir runs/dyck_table_seeds] [--out benchmarks/records/dyck_table_cpu.json] [--limit N] [--steps N]

`--limit N` (first N prefixes of each set) and `--steps N` make a quick look; the record says they were used.
`--report RECORD` prints the table and verdicts of a record written by `--out`, without the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tgjax.eval.dyck import PAPER_SETS, PAPER_TABLE, main_dyck  # noqa: E402
from tgjax.reproduce import results  # noqa: E402
from tgjax.reproduce.recipes.common import run_eval_command  # noqa: E402
from tgjax.reproduce.verdict import judge, spread  # noqa: E402

CONFIGS = {"pushdown": "configs/pushdown_dyck.py:cpu", "base": "configs/pushdown_dyck.py:base-cpu",
           "paper_head": "configs/pushdown_dyck.py:cpu-paper-head"}
TITLES = {"pushdown": "Pushdown-LM", "base": "Base-LM", "paper_head": "Pushdown-LM, paper head"}
# The tapes each model is scored on: its own (the protocol), and the gold one for the Pushdown-LM (a diagnostic).
TAPES = {"pushdown": ("model", "gold"), "base": ("model",), "paper_head": ("model",)}
TOLERANCE = 2.0  # one prefix is 1-2 points of a set
# The heads' comparison in words (judge's verdicts, the paper's head as the model).
HEADS_VERDICTS = {"in direction": "the paper's head ahead", "contradicted": "the release's head ahead",
                  "not yet": "no difference beyond the spread"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="42,43,44", help="comma-separated training seeds (42: the release's)")
    parser.add_argument("--models", default="pushdown,base", help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--beam-size", type=int, default=50, help="the own-tape beam over the prefix (release: 50)")
    parser.add_argument("--workdir", default="runs/dyck_table_seeds", help="runs and scores (reused when there)")
    parser.add_argument("--out", default=None, help="write the record (every run's scores and the table) here")
    parser.add_argument("--limit", type=int, default=None, help="first N prefixes of each set only (a quick look)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: the config's, 400)")
    parser.add_argument("--report", default=None, help="print the table of this --out record and stop")
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in CONFIGS]
    if unknown or "pushdown" not in args.models or "base" not in args.models:
        parser.error(f"--models: expected pushdown, base and optionally paper_head, got {args.models}")
    if len(args.seeds) < 1 or args.beam_size < 1:
        parser.error("--seeds needs at least one seed and --beam-size at least 1")
    return args


def train_run(model: str, seed: int, workdir: Path, steps: int | None) -> float:
    """Trains (or finishes) one run; its training seconds, kept beside it so that a reused run keeps its time."""
    from tgjax.train.config import load_config
    from tgjax.train.loop import train

    timing = workdir / "train_seconds.json"
    if timing.exists():
        return json.loads(timing.read_text())["seconds"]
    overrides = [f"training.seed={seed}", "logging.tensorboard=false"]
    if steps is not None:  # a quick look: the schedule shrunk with it
        warmup, interval = max(1, steps // 10), max(1, steps // 4)
        overrides += [f"training.num_steps={steps}", f"training.lr_schedule.kwargs.warmup_steps={warmup}",
                      f"training.lr_schedule.kwargs.cosine_cycle_length={max(1, steps - warmup)}",
                      f"evaluation.interval_steps={interval}", f"checkpointing.interval_steps={interval}"]
    config = load_config(CONFIGS[model], overrides)
    began = time.monotonic()
    result = train(config, workdir, quiet=True)
    seconds = time.monotonic() - began
    if result.final_step != config.training.num_steps:
        raise RuntimeError(f"{workdir}: stopped at step {result.final_step} of {config.training.num_steps}")
    timing.write_text(json.dumps({"seconds": seconds}) + "\n")
    return seconds


def score_run(workdir: Path, tape: str, beam_size: int, limit: int | None) -> dict:
    """`tgjax eval dyck` of the run's best checkpoint on Table 1's sets with `tape`; the JSON it wrote (reused)."""
    output = workdir / f"dyck_{tape}_beam{beam_size}{f'_limit{limit}' if limit else ''}.json"
    if output.exists():
        return json.loads(output.read_text())
    argv = ["--workdir", str(workdir), "--step", "best", "--sets", ",".join(PAPER_SETS), "--tape", tape,
            "--beam-size", str(beam_size), "--quiet", *(["--limit", str(limit)] if limit else [])]
    return run_eval_command(main_dyck, argv, output)


def table(record: dict) -> str:
    """Per set: the paper's Base / Pushdown numbers, ours (mean ± sd), and the verdict on the own tape."""
    summary = record["summary"]
    models = record["models"]
    header = ["set", "Base paper", "Base ours", "Pushdown paper", "Pushdown own tape", "Pushdown gold tape"]
    if "paper_head" in models:
        header.append("paper head, own tape")
    header.append("verdict (own tape vs Base)")
    rows = [header]
    for name in PAPER_SETS:
        s = summary[name]
        row = [name, f"{PAPER_TABLE['base'][name]:.1f}", s["base/model"]["text"],
               f"{PAPER_TABLE['pushdown'][name]:.1f}", s["pushdown/model"]["text"], s["pushdown/gold"]["text"]]
        if "paper_head" in models:
            row.append(s["paper_head/model"]["text"])
        row.append(s["verdict"])
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows)


def summarise(scores: dict[str, dict], seeds: list[int], models: list[str], longest_s: float) -> dict:
    """Per set: each model and tape's accuracy over the seeds ("MODEL/TAPE": mean, sd, values, text) and the
    verdict of the Pushdown-LM's own tape against the Base-LM; with the paper head, "heads": (verdict, why) of the
    paper's head against the release's, both on their own tape ("in direction": the paper's head ahead beyond the
    spread; "contradicted": the release's). `scores`: "MODEL/TAPE/SEED" -> {set: accuracy %}; `longest_s`: the
    longest run's training time (runs under 5 minutes need 5 seeds)."""
    summary = {}
    for name in PAPER_SETS:
        cell = {f"{model}/{tape}": spread_text([scores[f"{model}/{tape}/{seed}"][name] for seed in seeds])
                for model in models for tape in TAPES[model]}
        verdict, why = judge(cell["pushdown/model"]["values"], cell["base/model"]["values"],
                             paper=PAPER_TABLE["pushdown"][name], tolerance=TOLERANCE, run_seconds=longest_s)
        summary[name] = {**cell, "verdict": verdict, "why": why}
        if "paper_head" in models:
            summary[name]["heads"] = judge(cell["paper_head/model"]["values"], cell["pushdown/model"]["values"],
                                           run_seconds=longest_s)
    return summary


def spread_text(values: list[float]) -> dict:
    found = spread(values)
    sd = "" if found.sd is None else f" ± {found.sd:.1f}"
    return {"mean": found.mean, "sd": found.sd, "n": found.n, "values": values, "text": f"{found.mean:.1f}{sd}"}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        report(json.loads(Path(args.report).read_text()))
        return 0
    work = Path(args.workdir)
    scores: dict[str, dict] = {}  # "model/tape/seed" -> {set: accuracy %}
    seconds: dict[str, float] = {}
    for seed in args.seeds:
        for model in args.models:
            run = work / f"{model}_seed{seed}"
            print(f"{model} seed {seed}: training {CONFIGS[model]} in {run}", file=sys.stderr, flush=True)
            seconds[f"{model}/{seed}"] = train_run(model, seed, run, args.steps)
            for tape in TAPES[model]:
                began = time.monotonic()
                found = score_run(run, tape, args.beam_size, args.limit)
                accuracy = {name: 100.0 * found["scores"][name]["accuracy"] for name in PAPER_SETS}
                scores[f"{model}/{tape}/{seed}"] = {**accuracy, "step": found["step"]}
                print(f"  {tape} tape, step {found['step']} ({time.monotonic() - began:.0f} s): "
                      + ", ".join(f"{name} {value:.1f}" for name, value in accuracy.items()), file=sys.stderr,
                      flush=True)
    longest = max(seconds.values())
    summary = summarise(scores, args.seeds, args.models, longest)
    given = argv if argv is not None else sys.argv[1:]
    record = {"date": results.now(), "commit": results.commit(), "hardware": results.hardware(),
              "command": "python benchmarks/dyck_table_seeds.py " + " ".join(given),
              "seeds": args.seeds, "models": args.models, "configs": {m: CONFIGS[m] for m in args.models},
              "beam_size": args.beam_size, "limit": args.limit, "steps": args.steps,
              "train_seconds": seconds, "scores": scores, "summary": summary}
    report(record)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


def report(record: dict) -> None:
    """The table, the runs' scale and each set's verdict with its reason."""
    print(table(record))
    seconds = record["train_seconds"].values()
    print(f"{len(record['seeds'])} seed(s) per model; training {math.fsum(seconds) / len(seconds):.0f} s a run on "
          f"average, the longest {max(seconds):.0f} s; {record['hardware']}, commit {record['commit']}")
    for name in PAPER_SETS:
        print(f"  {name}: {record['summary'][name]['verdict']} ({record['summary'][name]['why']})")
    if "paper_head" in record["models"]:
        print("the paper's head against the release's, own tape:")
        for name in PAPER_SETS:
            verdict, why = record["summary"][name]["heads"]
            print(f"  {name}: {HEADS_VERDICTS.get(verdict, verdict)} ({why})")


if __name__ == "__main__":
    sys.exit(main())
