"""Does the likelihood keep specialised options once it has them? A diagnostic of OCN's collapse.

The collapsed OCN imitates like an LSTM that is not told the task (benchmarks/craft_subtask_value.py), so the
collapse forgoes a large likelihood reward. Hypothesis: the collapse is a failure to break the options' symmetry
from their start, not a property of the objective: options that start specialised stay so under the likelihood
alone, with a lower NLL than the collapsed runs. The test: each seed of `configs/ocn_craft.py:mid` trains its first
`--hint-steps` with `training.subtask_hint_weight=--hint-weight` (the option mixture is also trained toward one
fixed option per subtask kind), then resumes in the same workdir with the weight 0 (the likelihood alone) up to
`--steps`; the control's demonstrations, seeds and steps (`benchmarks/craft_ppo_seeds.sh`'s cloning runs).

    python benchmarks/craft_hint_start.py --seeds 1 2 3 --steps 3000 --hint-steps 500 \
        --runs runs/craft_hint_start --control runs/craft_ppo_seeds

Each run is read at the end of the hint (its validation at `--hint-steps`) and at its best validation step after
it (lowest NLL, 600 held-out episodes); the control's OCN and LSTM at their best steps. Judged with the ledger's
rule over the seeds: NMI above the control's OCN (the options stay specialised) and NLL below it (the likelihood
prefers them). The table goes to RUNS/table.txt; a finished phase is not retrained.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from craft_task_set import best_record, finished, last_record, run_all, validations  # noqa: E402

from tgjax.reproduce.verdict import judge, spread  # noqa: E402


def phase_command(seed: int, workdir: Path, demo_dir: Path, steps: int, hint_weight: float) -> list[str]:
    """One phase of a hinted run: `:mid` up to `steps` with the hint at `hint_weight` (0: the likelihood alone)."""
    return ["train", "--config", "configs/ocn_craft.py:mid", f"--config.training.subtask_hint_weight={hint_weight}",
            f"--config.data.demo_dir={demo_dir}", f"--config.training.seed={seed}",
            f"--config.training.num_steps={steps}", "--workdir", str(workdir), "--quiet"]


def best_after(workdir: Path, step: int) -> dict:
    """The validation record of the lowest NLL after `step` (the likelihood-only phase)."""
    after = [r for r in validations(workdir) if r.get("step", 0) > step]
    if not after:
        raise SystemExit(f"{workdir / 'metrics.jsonl'}: no validation after step {step}; did the second phase run?")
    return min(after, key=lambda r: r["nll"])


def row(name: str, record: dict) -> str:
    nmi = f"{record['nmi']:.3f}" if "nmi" in record else "  -  "
    by_subtask = " / ".join(f"{v:.3f}" for v in record["nll_by_subtask"])
    return f"{name:32} {record['step']:>5}  {record['nll']:.3f}  {nmi}  {by_subtask}"


def table(runs: Path, control: Path, seeds: list[int], hint_steps: int) -> list[str]:
    lines = [f"{'run':32} {'step':>5}  {'NLL':5}  {'NMI':5}  NLL over subtask 1 / 2"]
    found: dict[str, dict[str, list[float]]] = {"nmi": {}, "nll": {}}
    for seed in seeds:
        hinted = runs / f"ocn_hint_seed{seed}"
        sides = {"hinted, end of the hint": last_record(hinted, hint_steps),
                 "hinted, best after it": best_after(hinted, hint_steps),
                 "control OCN": best_record(control / f"ocn_bc_seed{seed}"),
                 "control LSTM (told the task)": best_record(control / f"lstm_bc_seed{seed}")}
        for name, record in sides.items():
            lines.append(row(f"seed {seed} {name}", record))
            for measure in found:
                if measure in record:
                    found[measure].setdefault(name, []).append(record[measure])
    for measure, by_side in found.items():
        for name, values in by_side.items():
            lines.append(f"{measure.upper()} {name}: {spread(values).text(3)}")
    nmi_verdict, nmi_why = judge(found["nmi"]["hinted, best after it"], found["nmi"]["control OCN"])
    lines.append(f"the options stay specialised (NMI above the control OCN's): {nmi_verdict} ({nmi_why})")
    nll_verdict, nll_why = judge(found["nll"]["hinted, best after it"], found["nll"]["control OCN"],
                                 higher_is_better=False)
    lines.append(f"the likelihood prefers them (NLL below the control OCN's): {nll_verdict} ({nll_why})")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=3000, help="steps of each run in all (the control's)")
    parser.add_argument("--hint-steps", type=int, default=500, help="the first steps, trained with the hint")
    parser.add_argument("--hint-weight", type=float, default=1.0)
    parser.add_argument("--runs", type=Path, default=Path("runs/craft_hint_start"))
    parser.add_argument("--control", type=Path, default=Path("runs/craft_ppo_seeds"),
                        help="craft_ppo_seeds.sh's runs: ocn_bc_seedN and lstm_bc_seedN on AC,CD,DA at --steps")
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args(argv)
    if not 0 < args.hint_steps < args.steps or args.hint_weight <= 0:
        parser.error("expected 0 < --hint-steps < --steps and --hint-weight > 0")
    for seed in args.seeds:   # the control is read before anything trains
        best_record(args.control / f"ocn_bc_seed{seed}")
        best_record(args.control / f"lstm_bc_seed{seed}")

    demo_dir = args.control / f"ocn_bc_seed{args.seeds[0]}" / "demos"
    for steps, weight in ((args.hint_steps, args.hint_weight), (args.steps, 0.0)):
        run_all([(phase_command(seed, args.runs / f"ocn_hint_seed{seed}", demo_dir, steps, weight),
                  args.runs / f"ocn_hint_seed{seed}") for seed in args.seeds
                 if not finished(args.runs / f"ocn_hint_seed{seed}", steps)], args.parallel)
    lines = table(args.runs, args.control, args.seeds, args.hint_steps)
    (args.runs / "table.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
