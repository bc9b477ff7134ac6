"""Does the imitation task set leave the options a reason to specialise? A diagnostic of OCN's collapse.

Hypothesis (named in docs/ocn-craft.md): an option sees only the observation and its own state, never the task,
so it cannot know which subtask to do unless the inventory tells it. In S1's set {AC, CD, DA} it does after the
first subtask: wood is always followed by iron, iron by grass, grass by wood. One option can then run a whole
task, reading the second subtask off the inventory, and only the first subtask is ambiguous, so the likelihood
gains little from a done signal and a second option. A set of all ordered pairs of the three subtasks breaks
that: after wood comes iron in AC but grass in AD, which only the controller (through the task's h^c_0) knows.
If the hypothesis holds, OCN trained on all six pairs (the same `:mid` recipe, steps and batch) has options that
follow the subtasks (NMI) beyond the spread of the same seeds on {AC, CD, DA}.

    python benchmarks/craft_task_set.py --seeds 1 2 3 --steps 3000 \
        --runs runs/craft_task_set --control runs/craft_ppo_seeds --ppo-iters 300 --eval

Each seed trains `configs/ocn_craft.py:mid` with `data.tasks` set to `--tasks` (one `tgjax train` per seed,
`--parallel` at a time; the demonstrations are generated once, before, into RUNS/demos). The control is the
`ocn_bc_seedN` runs of `benchmarks/craft_ppo_seeds.sh` (the same recipe on AC,CD,DA; `--control ''` trains
them here instead, under RUNS/control). Each run is read at its best validation step (lowest NLL, 600 held-out
episodes as many from each task): NLL, NMI between argmax option and subtask, boundary F1 (tolerance 1), and
the NLL over each subtask of an episode. With `--ppo-iters N`, each seed's options then go to PPO on ACD with sparse
reward (N iterations, a fresh controller, as `benchmarks/craft_ppo_seeds.sh`), judged on the held-out return at the
last iteration against the control's `ocn_ppo_seedN`. With `--eval`, each cloning run is also read by `tgjax eval
craft` (RUNS/eval/): the option x subtask table (Table 5.2's), the best option of each subtask and how many distinct
options those are (3: one per subtask), and ACD under a controller told the subtask. The table goes to
RUNS/table.txt; a run already finished is not retrained.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tgjax.reproduce.recipes.common import metrics_records
from tgjax.reproduce.verdict import judge, spread

S1_TASKS = "AC,CD,DA"


def successors(tasks: str) -> dict[str, set[str]]:
    """subtask -> the subtasks that follow it in some task of the comma-separated set (the ambiguity an option
    without the task faces once it has finished that subtask)."""
    after: dict[str, set[str]] = {}
    for task in tasks.split(","):
        for first, second in zip(task, task[1:]):
            after.setdefault(first, set()).add(second)
    return after


def validations(workdir: Path) -> list[dict]:
    """The run's validation records (`metrics.jsonl`, as the recipes read it); [] before any."""
    return [r for r in metrics_records(workdir) if r.get("split") == "valid"]


def best_record(workdir: Path) -> dict:
    """The validation record of the run's best step (the lowest NLL)."""
    valid = validations(workdir)
    if not valid:
        raise SystemExit(f"{workdir / 'metrics.jsonl'}: no validation record; did the run train? (see {workdir}.log)")
    return min(valid, key=lambda r: r["nll"])


def last_record(workdir: Path, steps: int) -> dict:
    """The validation record at step `steps` (a PPO run's last evaluation)."""
    found = [r for r in validations(workdir) if r.get("step") == steps]
    if not found:
        raise SystemExit(f"{workdir / 'metrics.jsonl'}: no validation at step {steps}; not comparable")
    return found[-1]


def finished(workdir: Path, steps: int) -> bool:
    return any(r.get("step") == steps for r in validations(workdir))


def cloning_command(tasks: str, seed: int, workdir: Path, demo_dir: Path, steps: int) -> list[str]:
    return ["train", "--config", "configs/ocn_craft.py:mid", f"--config.data.tasks={tasks}",
            f"--config.data.demo_dir={demo_dir}", f"--config.training.seed={seed}",
            f"--config.training.num_steps={steps}", "--workdir", str(workdir), "--quiet"]


def ppo_command(seed: int, options: Path, workdir: Path, iterations: int) -> list[str]:
    """PPO on ACD, sparse reward, a fresh controller over `options`' frozen options (as craft_ppo_seeds.sh)."""
    return ["train", "--config", "configs/ocn_craft_rl.py:ACD", f"--config.training.seed={seed}",
            f"--config.training.num_steps={iterations}", f"--config.rl.options_workdir={options}",
            "--workdir", str(workdir), "--quiet"]


def run(arguments: list[str], log: Path) -> None:
    """One `tgjax` command, its output in `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-m", "tgjax.cli", *arguments], stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    print(f"{log}: done", flush=True)


def run_all(jobs: list[tuple[list[str], Path]], parallel: int) -> None:
    """`run` each (arguments, workdir), `parallel` at a time, each logged to WORKDIR.log."""
    with ThreadPoolExecutor(parallel) as pool:
        for done in [pool.submit(run, arguments, Path(f"{workdir}.log")) for arguments, workdir in jobs]:
            done.result()


def evaluate(workdir: Path, output: Path) -> dict:
    """`tgjax eval craft` of a cloning run's best step (kept in `output`; read again when it is there): the option
    x subtask table (each option alone, chosen again at done) and the options under a controller told the subtask
    on ACD, 100 episodes each; 600 held-out demonstrations."""
    if not output.is_file():
        run(["eval", "craft", "--workdir", str(workdir), "--episodes", "100", "--valid-episodes", "600",
             "--output", str(output)], Path(f"{output}.log"))
    return json.loads(output.read_text())


def option_table_line(name: str, report: dict) -> str:
    """One run's option x subtask success, its best option per subtask and the scripted controller on ACD."""
    table = report["option_subtask_success"]
    subtasks, rows = table["subtasks"], table["rows"]
    best = [max(range(len(rows)), key=lambda option: rows[option][column]) for column in range(len(subtasks))]
    cells = " · ".join(" ".join(f"{value:.2f}" for value in row) for row in rows)
    return (f"{name:20} {cells}   best option per subtask {'/'.join(str(b + 1) for b in best)} "
            f"({len(set(best))} distinct)   ACD scripted {report['scripted_controller']['ACD']['success_rate']:.3f}")


def make_demos(tasks: str, demo_dir: Path) -> None:
    """The demonstrations of every task, generated once (the runs would race to write them)."""
    from tgjax.train.config import load_config
    from tgjax.train.tasks.craft_bc import load_task_demos

    config = load_config("configs/ocn_craft.py:mid", [f"data.tasks={tasks}", f"data.demo_dir={demo_dir}"])
    load_task_demos(config, demo_dir.parent)


def sides(runs: Path, control: Path, seed: int) -> tuple[tuple[str, Path, Path], ...]:
    """("test" or "control", the seed's cloning workdir, its PPO workdir) for each side: the control's are
    `craft_ppo_seeds.sh`'s names."""
    return (("test", runs / f"ocn_seed{seed}", runs / f"ppo_seed{seed}"),
            ("control", control / f"ocn_bc_seed{seed}", control / f"ocn_ppo_seed{seed}"))


def summarise(lines: list[str], what: str, found: dict[str, list[float]], claim: str = "") -> None:
    """Appends each side's mean ± sd of `what` and, with `claim`, the ledger rule's verdict on the test side
    beating the control."""
    for side, values in found.items():
        lines.append(f"{side}: {what} {spread(values).text(3)}")
    if claim:
        verdict, why = judge(found["test"], found["control"])
        lines.append(f"{claim}: {verdict} ({why})")


def row(name: str, record: dict) -> str:
    by_subtask = " / ".join(f"{v:.3f}" for v in record["nll_by_subtask"])
    return (f"{name:28} {record['step']:>5}  {record['nll']:.3f}  {record['nmi']:.3f}  {record['f1_tol1']:.3f}  "
            f"{by_subtask}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="AC,AD,CA,CD,DA,DC", help="the imitation task set under test")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--runs", type=Path, default=Path("runs/craft_task_set"))
    parser.add_argument("--control", default="runs/craft_ppo_seeds",
                        help="a folder of ocn_bc_seedN runs on AC,CD,DA at --steps; '' trains them under RUNS/control")
    parser.add_argument("--ppo-iters", type=int, default=0,
                        help="then PPO on sparse ACD over each run's options (the control's: ocn_ppo_seedN); 0 skips")
    parser.add_argument("--eval", action="store_true",
                        help="also `tgjax eval craft` each cloning run: option x subtask table, scripted ACD")
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args(argv)

    args.runs.mkdir(parents=True, exist_ok=True)
    control_dir = Path(args.control) if args.control else args.runs / "control"
    by_seed = {seed: sides(args.runs, control_dir, seed) for seed in args.seeds}
    trained_here = ("test",) if args.control else ("test", "control")
    cloning = [(args.tasks if side == "test" else S1_TASKS, seed, bc, bc.parent / "demos")
               for seed in args.seeds for side, bc, _ in by_seed[seed] if side in trained_here]
    cloning = [job for job in cloning if not finished(job[2], args.steps)]
    for tasks, demos in sorted({(job[0], job[3]) for job in cloning}):
        make_demos(tasks, demos)
    run_all([(cloning_command(*job, args.steps), job[2]) for job in cloning], args.parallel)
    if args.ppo_iters:
        run_all([(ppo_command(seed, bc, ppo, args.ppo_iters), ppo) for seed in args.seeds
                 for side, bc, ppo in by_seed[seed] if side in trained_here and not finished(ppo, args.ppo_iters)],
                args.parallel)

    lines = []
    for name, tasks in (("task set under test", args.tasks), ("control (S1)", S1_TASKS)):
        follows = ", ".join(f"{a} -> {'/'.join(sorted(b))}" for a, b in sorted(successors(tasks).items()))
        lines.append(f"{name}: {tasks}; after a subtask comes: {follows}")
    lines.append(f"{'run':28} {'best':>5}  {'NLL':5}  {'NMI':5}  {'F1t1':5}  NLL over subtask 1 / 2")
    nmi: dict[str, list[float]] = {"test": [], "control": []}
    for seed in args.seeds:
        for side, bc, _ in by_seed[seed]:
            record = best_record(bc)
            if not finished(bc, args.steps):
                raise SystemExit(f"{bc}: has not reached step {args.steps}; not comparable")
            nmi[side].append(record["nmi"])
            lines.append(row(f"{side} seed {seed}", record))
    summarise(lines, "NMI", nmi, "options follow the subtasks more on the set under test")
    if args.eval:
        lines.append("option x subtask success (rows options, columns " + "/".join(sorted(successors(S1_TASKS)))
                     + "; each option alone, chosen again at done), 100 episodes a cell")
        scripted: dict[str, list[float]] = {"test": [], "control": []}
        for seed in args.seeds:
            for side, bc, _ in by_seed[seed]:
                report = evaluate(bc, args.runs / "eval" / f"{side}_seed{seed}.json")
                scripted[side].append(report["scripted_controller"]["ACD"]["success_rate"])
                lines.append(option_table_line(f"{side} seed {seed}", report))
        summarise(lines, "ACD under the scripted controller, success", scripted)
    if args.ppo_iters:
        lines.append(f"PPO on ACD, sparse reward, {args.ppo_iters} iterations over each run's options: held-out return "
                     "(selection episodes) at the last iteration")
        returns: dict[str, list[float]] = {"test": [], "control": []}
        for seed in args.seeds:
            for side, _, ppo in by_seed[seed]:
                last = last_record(ppo, args.ppo_iters)
                returns[side].append(last["heldout_return"])
                lines.append(f"{side} seed {seed}: {last['heldout_return']:.3f} ({last['return']:.3f})")
        summarise(lines, "held-out return", returns, "PPO returns more over the options of the set under test")
    text = "\n".join(lines)
    print(text)
    (args.runs / "table.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
