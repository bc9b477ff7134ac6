"""How much likelihood does knowing the subtask buy? A diagnostic of OCN's collapse, measured on the bot itself.

An option never sees the task. A specialised option knows its subtask because the controller chose it; a
collapsed, generalist option must infer the subtask from what it has seen. The imitation likelihood rewards
specialisation by exactly what that inference costs. This script measures the cost for the best possible
generalist: one that knows the bot's belief map (everything the bot has seen) and keeps the exact posterior over
the tasks of the set, updated by the bot's own moves. No model is trained.

At each step of a demonstration the bot is asked what it would do under each candidate target (the kinds the task
set asks for): a breadth-first route when the target is known (deterministic), otherwise exploration, which does
not depend on the target (its move distribution is estimated from `--samples` draws, add-one smoothed). With a
uniform prior over the set's tasks, the generalist predicts the mixture sum_tau pi_t(tau) P(a_t | tau's current
subtask) and the specialist P(a_t | true subtask); the regret is the log-ratio, summed over the episode. Since the
mixture holds each task with weight at least pi_0 = 1 / |tasks| times its own likelihood, the regret of an episode
is at most log |tasks| nats, however long the episode: a bound the table checks.

    python benchmarks/craft_subtask_value.py --task-sets AC,CD,DA AC,AD,CA,CD,DA,DC --episodes 300 \
        --control runs/craft_ppo_seeds

Printed per task set: steps per episode (the final DONE, not imitated, left out) by subtask; the regret per
episode (mean +- sd) against the bound, and per step, by subtask; by subtask, how many of its steps pass before the
generalist is 99 % sure of the subtask (0: from the start) and in what share of episodes it gets there before the
subtask's last action; and the share of steps at which the bot's own target is not yet known (it explores).

With `--control DIR` (the cloning runs of benchmarks/craft_ppo_seeds.sh, `ocn_bc_seedN` and `lstm_bc_seedN`, on
S1), each seed's OCN is set against the LSTM of the same seed, which is told the task (its initial state is
learned per task): the NLL per step over each subtask at each run's best validation step, OCN minus LSTM, mean +-
sd over the seeds, beside what not knowing the task costs the ideal generalist on the first task set. With
`--hidden-task-runs DIR` as well, the same LSTM recipe is trained there with the task hidden
(`--config.model.task_input=False`: every task starts from one learned state; the control's demonstrations,
`--steps`, `--parallel` at a time; a finished run is not retrained), and read the same way: what hiding the task
costs an LSTM, per subtask, against the ideal generalist's cost, and the OCN against the LSTM not told the task.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from craft_task_set import best_record, finished, run_all  # noqa: E402

from tgjax.envs import craft_rules as rules  # noqa: E402
from tgjax.envs.craft_bot import DemoBot, generate_demos  # noqa: E402
from tgjax.reproduce.verdict import spread  # noqa: E402

MOVE_ACTIONS = 4  # exploration only moves (down, up, left, right)


class SubtaskProbe(DemoBot):
    """A DemoBot that records, at every step before the final DONE, P(its action | each candidate target).

    probes: one (stage, {kind: probability}, explored) per step; stage = subtasks completed before the step,
    explored = the bot's own target was not yet known. finished: `act` was called after the last subtask, which
    `generate_demos` does only for the episodes it keeps.
    """

    def __init__(self, subtasks, rng, candidates: tuple[int, ...], samples: int, probe_rng: np.random.Generator):
        super().__init__(subtasks, rng)
        self.candidates = candidates
        self.samples = samples
        self.probe_rng = probe_rng
        self.probes: list[tuple[int, dict[int, float], bool]] = []
        self.finished = False

    def act(self, obs, pos, direction) -> int:
        action = super().act(obs, pos, direction)   # updates the belief and pops finished subgoals first
        if not self.subgoals:
            self.finished = True
            return action
        pos, direction = (int(pos[0]), int(pos[1])), int(direction)
        routes = {kind: self._go_to(kind, pos, direction) for kind in self.candidates}
        if routes[self.subgoals[0]] not in (None, action):
            raise AssertionError("the probe's route disagrees with the bot's own action")
        explore = self._explore_distribution(pos) if None in routes.values() else None
        likelihood = {kind: (explore[action] if route is None else float(route == action))
                      for kind, route in routes.items()}
        self.probes.append((len(self.completed_at), likelihood, routes[self.subgoals[0]] is None))
        return action

    def _explore_distribution(self, pos) -> np.ndarray:
        """[NUM_ACTIONS] exploration's move distribution at `pos`, from `samples` draws, add-one smoothed."""
        own_rng, self.rng = self.rng, self.probe_rng   # the demonstrations' own random stream stays untouched
        try:
            counts = np.bincount([self._explore(pos) for _ in range(self.samples)], minlength=rules.NUM_ACTIONS)
        finally:
            self.rng = own_rng
        probabilities = np.zeros(rules.NUM_ACTIONS)
        probabilities[:MOVE_ACTIONS] = (counts[:MOVE_ACTIONS] + 1) / (self.samples + MOVE_ACTIONS)
        return probabilities


def episode_regrets(probes, tasks: list[tuple[int, ...]], true_task: int) -> tuple[list[float], list[float]]:
    """Per-step regret (nats) of the Bayes generalist over `tasks` (uniform prior) against the specialist, and its
    posterior on the current subtask (the true task's at that stage) before each step's action.

    probes: [(stage, {kind: P(a_t | kind)}, explored)]; tasks: each task's subtask kinds; true_task: its index.
    Step t's regret is log P(a_t | true subtask) - log sum_tau pi_t(tau) P(a_t | tau's subtask at the stage).
    """
    log_posterior = np.full(len(tasks), -math.log(len(tasks)))
    regrets, posteriors = [], []
    for stage, likelihood, _ in probes:
        step = np.array([likelihood[task[stage]] if stage < len(task) else 0.0 for task in tasks])
        with np.errstate(divide="ignore"):
            log_step = np.log(step)
        current = [stage < len(task) and task[stage] == tasks[true_task][stage] for task in tasks]
        posteriors.append(float(np.exp(log_posterior[current]).sum()))
        joint = log_posterior + log_step
        log_mixture = np.logaddexp.reduce(joint)
        regrets.append(float(log_step[true_task] - log_mixture))
        log_posterior = joint - log_mixture
    return regrets, posteriors


def steps_to_certainty(stages: list[int], posteriors: list[float], stage: int, level: float = 0.99) -> int | None:
    """How many of `stage`'s steps pass before the posterior on its subtask reaches `level` (0: sure from the
    subtask's start; None: not before the subtask's last action)."""
    within = [p for s, p in zip(stages, posteriors) if s == stage]
    return next((i for i, p in enumerate(within) if p >= level), None)


def probe_task_set(task_set: str, episodes: int, samples: int, seed: int) -> dict:
    """Demonstrations of every task of the comma-separated set, `episodes` each, and their regrets."""
    names = task_set.split(",")
    tasks = [rules.parse_task(name) for name in names]
    candidates = tuple(sorted({kind for task in tasks for kind in task}))
    probe_rng = np.random.default_rng(seed + 10_000)
    rows = []
    for index, name in enumerate(names):
        bots: list[SubtaskProbe] = []

        def factory(subtasks, rng):
            bots.append(SubtaskProbe(subtasks, rng, candidates, samples, probe_rng))
            return bots[-1]

        generate_demos(name, episodes, seed=seed + index, batch_size=min(episodes, 64), bot_factory=factory)
        kept = [bot for bot in bots if bot.finished][:episodes]
        for bot in kept:
            regrets, posteriors = episode_regrets(bot.probes, tasks, index)
            rows.append({"task": name, "regrets": regrets, "posteriors": posteriors,
                         "stages": [stage for stage, _, _ in bot.probes],
                         "explored": [explored for _, _, explored in bot.probes]})
    return {"task_set": task_set, "num_tasks": len(tasks), "episodes": rows}


def summarise(result: dict) -> dict:
    """Per-episode and per-step figures of one task set's probes, by stage (0 = the first subtask)."""
    rows = result["episodes"]
    stages = sorted({s for row in rows for s in row["stages"]})
    per_episode = [sum(row["regrets"]) for row in rows]
    steps = sum(len(row["regrets"]) for row in rows)
    summary = {"task_set": result["task_set"], "episodes": len(rows), "bound": math.log(result["num_tasks"]),
               "regret_mean": statistics.mean(per_episode), "regret_sd": statistics.stdev(per_episode),
               "regret_max": max(per_episode), "steps_per_episode": steps / len(rows),
               "regret_per_step": sum(per_episode) / steps,
               "explored": sum(sum(row["explored"]) for row in rows) / steps, "stages": []}
    for stage in stages:
        regret = [r for row in rows for s, r in zip(row["stages"], row["regrets"]) if s == stage]
        certain = [steps_to_certainty(row["stages"], row["posteriors"], stage) for row in rows]
        reached = [k for k in certain if k is not None]
        summary["stages"].append({"stage": stage, "steps_per_episode": len(regret) / len(rows),
                                  "regret_per_step": sum(regret) / len(regret),
                                  "certain_by": statistics.mean(reached) if reached else float("nan"),
                                  "certain_share": len(reached) / len(rows)})
    return summary


def format_table(summaries: list[dict]) -> str:
    """One line per task set; a figure per subtask reads "first / second"."""
    lines = ["task set | episodes | steps per episode, by subtask | regret per episode, nats: mean +- sd, max "
             "(bound log |tasks|) | regret per step, nats: all (by subtask) | steps until the generalist is 99 % "
             "sure of the subtask, by subtask (episodes where it gets there) | steps exploring (own target unseen)"]
    for s in summaries:
        stages = s["stages"]
        steps = " / ".join(f"{g['steps_per_episode']:.1f}" for g in stages)
        per_step = " / ".join(f"{g['regret_per_step']:.4f}" for g in stages)
        certain = " / ".join(f"{g['certain_by']:.1f} ({100 * g['certain_share']:.0f} %)" for g in stages)
        lines.append(
            f"{s['task_set']} | {s['episodes']} | {s['steps_per_episode']:.1f} ({steps}) | "
            f"{s['regret_mean']:.3f} +- {s['regret_sd']:.3f}, {s['regret_max']:.3f} ({s['bound']:.3f}) | "
            f"{s['regret_per_step']:.4f} ({per_step}) | {certain} | {100 * s['explored']:.1f} %")
    return "\n".join(lines)


def hidden_task_command(seed: int, workdir: Path, demo_dir: Path, steps: int) -> list[str]:
    """The control's LSTM cloning run (craft_ppo_seeds.sh's `:mid,lstm`) with the task hidden from the policy."""
    return ["train", "--config", "configs/ocn_craft.py:mid,lstm", "--config.model.task_input=False",
            f"--config.data.demo_dir={demo_dir}", f"--config.training.seed={seed}",
            f"--config.training.num_steps={steps}", "--workdir", str(workdir), "--quiet"]


def train_hidden_task(runs: Path, control: Path, seeds: list[int], steps: int, parallel: int) -> None:
    demo_dir = control / f"lstm_bc_seed{seeds[0]}" / "demos"
    jobs = [(hidden_task_command(seed, runs / f"lstm_hidden_seed{seed}", demo_dir, steps),
             runs / f"lstm_hidden_seed{seed}") for seed in seeds
            if not finished(runs / f"lstm_hidden_seed{seed}", steps)]
    run_all(jobs, parallel)


def differences(first: tuple[Path, str], second: tuple[Path, str], seeds: list[int]) -> list[list[float]]:
    """Per seed, run FIRST's NLL per step over each subtask minus run SECOND's, each (folder, run name prefix)
    read at its best validation step."""
    rows = []
    for seed in seeds:
        a = best_record(first[0] / f"{first[1]}_seed{seed}")["nll_by_subtask"]
        b = best_record(second[0] / f"{second[1]}_seed{seed}")["nll_by_subtask"]
        rows.append([x - y for x, y in zip(a, b)])
    return rows


def format_differences(title: str, rows: list[list[float]], seeds: list[int], ideal: dict) -> str:
    lines = [f"{title}, NLL per step, seeds {' / '.join(map(str, seeds))}, against the ideal generalist's cost of "
             f"not knowing the task on {ideal['task_set']}:"]
    for stage, per_seed in enumerate(zip(*rows)):
        values = list(per_seed)
        lines.append(f"  subtask {stage + 1}: {' / '.join(f'{v:.3f}' for v in values)} "
                     f"(mean {spread(values).text(3)}) against "
                     f"{ideal['stages'][stage]['regret_per_step']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task-sets", nargs="+", default=["AC,CD,DA", "AC,AD,CA,CD,DA,DC"],
                        help="comma-separated task sets, each probed on its own (default: S1 and all six pairs)")
    parser.add_argument("--episodes", type=int, default=300, help="kept demonstrations per task")
    parser.add_argument("--samples", type=int, default=16, help="draws estimating exploration's move distribution")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--control", type=Path, help="benchmarks/craft_ppo_seeds.sh's runs: the OCN and LSTM "
                        "cloning runs, set against each other per subtask")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="the control's seeds")
    parser.add_argument("--hidden-task-runs", type=Path, help="where the control's LSTM is trained with the task "
                        "hidden (model.task_input=False), one run per seed")
    parser.add_argument("--steps", type=int, default=3000, help="training steps of each hidden-task run")
    parser.add_argument("--parallel", type=int, default=2, help="hidden-task runs at a time")
    args = parser.parse_args(argv)
    if args.episodes < 2 or args.samples < 1:
        parser.error(f"--episodes must be >= 2 (a spread) and --samples >= 1, got {args.episodes} and {args.samples}")
    if args.hidden_task_runs and not args.control:
        parser.error("--hidden-task-runs needs --control (its demonstrations and the runs it is read against)")
    if args.control:   # the control's runs are read before anything is probed or trained
        differences((args.control, "ocn_bc"), (args.control, "lstm_bc"), args.seeds)
    if args.hidden_task_runs:
        train_hidden_task(args.hidden_task_runs, args.control, args.seeds, args.steps, args.parallel)
    summaries = []
    for task_set in args.task_sets:
        started = time.perf_counter()
        summaries.append(summarise(probe_task_set(task_set, args.episodes, args.samples, args.seed)))
        print(f"{task_set}: probed in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(format_table(summaries))
    if args.control:
        told = (args.control, "lstm_bc")
        print(format_differences("OCN minus LSTM (told the task)",
                                 differences((args.control, "ocn_bc"), told, args.seeds), args.seeds, summaries[0]))
    if args.hidden_task_runs:
        hidden = (args.hidden_task_runs, "lstm_hidden")
        print(format_differences("LSTM not told the task minus LSTM told it", differences(hidden, told, args.seeds),
                                 args.seeds, summaries[0]))
        print(format_differences("OCN minus LSTM not told the task",
                                 differences((args.control, "ocn_bc"), hidden, args.seeds), args.seeds, summaries[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
