"""Is the CPU-scale Base-LM's gap on Pushdown Table 1 only under-training? The Base-LM given more steps.

At CPU scale (benchmarks/dyck_table_seeds.py: 4 layers of d = 64, 400 steps) the Base-LM is far below the
Pushdown-LM on every Table 1 set, but it closes only about two thirds of in-distribution brackets: it has not
learnt the training language. The hypothesis tested here: given the steps to learn it, the Base-LM closes the
gap. Per seed and step count, `configs/pushdown_dyck.py:base-cpu` is trained with its schedule stretched to the
steps (dyck_table_seeds' `--steps` rule: warm-up a tenth, cosine over the rest, four evaluations) and scored at
its best validation checkpoint by `tgjax eval dyck` on `valid` (500 closers of training-distribution strings)
and on Table 1's five sets. The Pushdown-LM's 400-step own-tape row of `--table` (dyck_table_seeds' record) is
printed beside. Every run and score is kept in the work folder and reused.

    python benchmarks/dyck_base_steps.py [--seeds 42,43,44] [--steps 400,1600] [--workdir runs/dyck_base_steps]
        [--table benchmarks/records/dyck_table_cpu.json] [--out FILE.json] [--report FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dyck_table_seeds import score_run, spread_text, train_run  # noqa: E402
from tgjax.eval.dyck import PAPER_SETS, PAPER_TABLE, main_dyck  # noqa: E402
from tgjax.reproduce import results  # noqa: E402
from tgjax.reproduce.recipes.common import run_eval_command  # noqa: E402

SETS = ("valid", *PAPER_SETS)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="42,43,44", help="comma-separated training seeds")
    parser.add_argument("--steps", default="400,1600", help="comma-separated step counts (400: the config's)")
    parser.add_argument("--workdir", default="runs/dyck_base_steps", help="runs and scores (reused when there)")
    parser.add_argument("--table", default="benchmarks/records/dyck_table_cpu.json",
                        help="dyck_table_seeds' record: the Pushdown-LM's row printed beside (skipped if absent)")
    parser.add_argument("--out", default=None, help="write the record here")
    parser.add_argument("--report", default=None, help="print the table of this --out record and stop")
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.steps = [int(s) for s in args.steps.split(",") if s]
    if not args.seeds or not args.steps or min(args.steps) < 4:
        parser.error("--seeds needs a seed and --steps step counts of at least 4")
    return args


def score_valid(workdir: Path) -> float:
    """Accuracy (%) of the run's best checkpoint on 500 in-distribution closers (`--sets valid`; reused)."""
    output = workdir / "dyck_valid.json"
    if output.exists():
        found = json.loads(output.read_text())
    else:
        found = run_eval_command(main_dyck, ["--workdir", str(workdir), "--step", "best", "--sets", "valid", "--quiet"],
                                 output)
    return 100.0 * found["scores"]["valid"]["accuracy"]


def summarise(scores: dict[str, dict], seeds: list[int], steps: list[int]) -> dict:
    """Per step count and set: mean, sd and values over the seeds. `scores`: "STEPS/SEED" -> {set: accuracy %}."""
    return {str(count): {name: spread_text([scores[f"{count}/{seed}"][name] for seed in seeds]) for name in SETS}
            for count in steps}


def table(record: dict) -> str:
    """One row per step count of the Base-LM, then the Pushdown-LM's row from the table record and the paper's."""
    rows = [["model", "steps", *SETS]]
    for count, row in record["summary"].items():
        rows.append(["Base-LM", count, *(row[name]["text"] for name in SETS)])
    pushdown = record.get("pushdown")
    if pushdown:
        rows.append(["Pushdown-LM, own tape", "400", "", *(pushdown[name] for name in PAPER_SETS)])
    rows.append(["Base-LM, paper", "10000", "", *(f"{PAPER_TABLE['base'][name]:.1f}" for name in PAPER_SETS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) for r in rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        record = json.loads(Path(args.report).read_text())
        print(table(record))
        return 0
    work = Path(args.workdir)
    scores: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    for count in args.steps:
        for seed in args.seeds:
            run = work / f"base_{count}_seed{seed}"
            print(f"Base-LM seed {seed}, {count} steps: {run}", file=sys.stderr, flush=True)
            seconds[f"{count}/{seed}"] = train_run("base", seed, run, count)
            found = score_run(run, "model", 50, None)  # the Base-LM reads no tape: the beam is unused
            scores[f"{count}/{seed}"] = {"valid": score_valid(run), "step": found["step"],
                                         **{name: 100.0 * found["scores"][name]["accuracy"] for name in PAPER_SETS}}
            print("  " + ", ".join(f"{name} {scores[f'{count}/{seed}'][name]:.1f}" for name in SETS)
                  + f" (best step {found['step']})", file=sys.stderr, flush=True)
    record = {"date": results.now(), "commit": results.commit(), "hardware": results.hardware(),
              "command": "python benchmarks/dyck_base_steps.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "seeds": args.seeds, "steps": args.steps, "train_seconds": seconds, "scores": scores,
              "summary": summarise(scores, args.seeds, args.steps)}
    if Path(args.table).exists():
        pushdown = json.loads(Path(args.table).read_text())["summary"]
        record["pushdown"] = {name: pushdown[name]["pushdown/model"]["text"] for name in PAPER_SETS}
    print(table(record))
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
