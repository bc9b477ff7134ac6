"""`tgjax eval craft --workdir W`: a Craft behaviour-cloning run's metrics (thesis ch. 5; released-code.md §5.5).

For the policy of W's best checkpoint (lowest validation NLL; `--step`):

* on the held-out demonstrations of every training task (the split the run
  used): NLL per step (also by position in the task: over the steps of
  the 1st, 2nd, ... subtask and the final DONE), action accuracy and, for
  OCN, boundary F1 with
  tolerance 0 and 1, task alignment accuracy and NMI between the option in
  use and the subtask (`tgjax.data.craft_metrics`); NMI for MoE; F1 and
  task alignment for OMPN (boundaries from its expected expansion position);
  for OCN / MoE the share of each subtask's steps spent in each option
  (the table behind the NMI: one column-dominating option is a collapse);
* in the environment: success rate, return and episode length of
  `--episodes` sampled episodes per training task;
* for OCN / MoE: the option x subtask success table (thesis Table 5.2:
  each option run alone on each one-subtask task, `tgjax.infer.craft`),
  twice: chosen again whenever its done fires (the table beside the
  thesis'), and stopped at its first done (how often an option reports done
  before its subtask is); then each of `--controller-tasks` (default
  ACD, the RL task) run by the frozen options under a controller told the
  current subtask, which picks that subtask's best option in the table:
  the most a controller trained over these options (PPO's) can expect.

`--workdir W1,W2` (setting S2: several runs, their options pooled in that
order, `tgjax.infer.craft.pooled_options`) gives the pooled options' two tables
and the scripted controller over all of them, which is the ceiling of the
S2 RL runs (`rl.options_workdir=W1,W2`).

Prints a report and writes it as JSON (`--output`, default
W/craft_eval.json, or W1/craft_pool_eval.json for a pool).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tgjax.envs import craft_rules as rules
from tgjax.outputs import check_output, dumps_json, save_figure, write_json
from tgjax.workdir import is_url, split_workdirs, workdir_path


def add_craft_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax eval craft`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = ("A Craft behaviour-cloning (craft_bc) run's policy at its best checkpoint (lowest "
                          "validation NLL; --step): on held-out demonstrations NLL, action accuracy and the "
                          "segmentation scores its kind has (boundary F1 tol 0/1, task alignment, NMI); success "
                          "rate and return in the environment; for OCN / MoE the option x subtask table (thesis "
                          "Table 5.2) and a scripted controller. "
                          "--plot / --curves-only draw the validation curves of any Craft run (craft_bc, "
                          "ppo_options, ppo_actions).")
    parser.add_argument("--workdir", required=True,
                        help="the --workdir of `tgjax train --config configs/ocn_craft.py`; several, comma-separated: "
                             "their options pooled (setting S2), tables and scripted controller only")
    parser.add_argument("--step", default="best", help="'best' (default), 'latest' or a step number")
    parser.add_argument("--episodes", type=int, default=200, help="environment episodes per task and per table cell")
    parser.add_argument("--valid-episodes", type=int, default=0,
                        help="held-out demonstrations scored, as many from each task (0 = all)")
    parser.add_argument("--subtasks", default="ACD", help="the table's one-subtask tasks (default ACD, Table 5.2)")
    parser.add_argument("--controller-tasks", default="ACD",
                        help="comma-separated longer tasks run by the options under a controller told the current "
                             "subtask (each subtask's best option in the table); '' skips (default ACD)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="the JSON report (default WORKDIR/craft_eval.json)")
    parser.add_argument("--plot", default=None,
                        help="also draw the run's validation curves (metrics.jsonl) to this PNG; several workdirs, "
                             "comma-separated: one line per run")
    parser.add_argument("--curves-only", action="store_true",
                        help="only --plot (any craft_bc, ppo_options or ppo_actions workdir; no checkpoint is read)")
    parser.set_defaults(run=run_craft)


#: validation numbers drawn by --plot, when the run has them (craft_bc's, then the PPO trainers')
CURVES = ("nll", "action_accuracy", "f1_tol1", "align_acc", "nmi", "return", "success_rate")


def plot_curves(workdirs: str | Path | list, output: str | Path) -> dict[str, dict[str, list]]:
    """One panel per validation number of CURVES found in the runs' metrics.jsonl, one line per run (several
    workdirs: a list, or comma-separated); returns what was drawn, {name: {workdir: [(step, value), ...]}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(workdirs, (str, Path)):
        workdirs = split_workdirs(workdirs)
    from tgjax.train.metrics import read_metrics

    valid = {}
    for workdir in workdirs:
        records, _ = read_metrics(workdir)  # skips a last line cut short by a killed run, as `tgjax viz curves`
        valid[str(workdir)] = [r for r in records if r.get("split") == "valid"]
    drawn = {name: {w: [(r["step"], r[name]) for r in rows if name in r] for w, rows in valid.items()}
             for name in CURVES}
    drawn = {name: {w: points for w, points in runs.items() if points} for name, runs in drawn.items()}
    drawn = {name: runs for name, runs in drawn.items() if runs}
    if not drawn:
        raise ValueError(f"{', '.join(valid)}: no validation records with any of {', '.join(CURVES)}")
    figure, axes = plt.subplots(1, len(drawn), figsize=(3.2 * len(drawn), 2.8 + 0.25 * len(valid)),
                                squeeze=False)
    for axis, (name, runs) in zip(axes[0], drawn.items()):
        for workdir, points in runs.items():
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=2.5,
                      color=f"C{list(valid).index(workdir)}", label=Path(workdir).name)
        axis.set_title(name)
        axis.set_xlabel("step")
    if len(valid) > 1:
        handles, labels = axes[0][0].get_legend_handles_labels()
        figure.legend(handles, labels, loc="lower center", ncol=min(len(valid), 6), fontsize=8, frameon=False)
    else:
        figure.suptitle(str(workdirs[0]))
    figure.tight_layout(rect=(0, 0.1 if len(valid) > 1 else 0, 1, 1))
    save_figure(figure, output, dpi=90)
    plt.close(figure)
    return drawn


def evaluate_craft(workdir: str, *, step="best", episodes: int = 200, valid_episodes: int = 0, subtasks: str = "ACD",
                   controller_tasks: str = "ACD", seed: int = 0, say=print) -> dict:
    """The report of the module docstring, as a dict."""
    import jax

    from tgjax.data.craft_demos import read_craft_demos
    from tgjax.data.craft_episodes import make_episodes, score_episodes, split_indices
    from tgjax.envs.craft import Craft
    from tgjax.infer.api import load
    from tgjax.infer.craft import episode_runner, rollout

    scripted_tasks = _check_tasks(subtasks, controller_tasks)
    policy, checkpoint = load(workdir, step).policy(command="tgjax eval craft")
    config = checkpoint.meta["config"]
    data = config["data"]
    tasks = list(checkpoint.meta["tasks"])
    kind = checkpoint.model_config.kind
    say(f"{checkpoint.where}: policy {kind}, tasks {', '.join(tasks)}")
    report = {"workdir": str(checkpoint.workdir), "step": checkpoint.step, "policy": kind, "tasks": tasks}

    # held-out demonstrations, the run's own split
    demo_dir = workdir_path(data["demo_dir"]) if data["demo_dir"] else checkpoint.workdir / "demos"
    demos = {task: read_craft_demos(demo_dir / f"{task}.npz") for task in tasks}
    valid = {task: split_indices(d, data["num_demos"], data["valid_fraction"])[1] for task, d in demos.items()}
    live = (rules.live_observation_indices() if checkpoint.model_config.live_inputs
            else list(range(rules.OBS_SIZE)))
    episodes_valid = make_episodes(demos, valid, data["max_steps"] + 1, live,
                                   train_final_done=data.get("train_final_done", True))
    started = time.perf_counter()
    num_options = checkpoint.model_config.num_options
    scores = score_episodes(episode_runner(policy), episodes_valid, 64, kind, valid_episodes, num_options=num_options)
    usage = scores.pop("option_usage", None)
    report["demonstrations"] = scores
    by_position = {k: scores[k] for k in ("nll_by_subtask", "nll_after_subtasks")}
    say(f"held-out demonstrations ({scores['episodes']}): " + ", ".join(
        f"{k} {v:.4f}" for k, v in scores.items() if k != "episodes" and k not in by_position)
        + f" ({time.perf_counter() - started:.0f} s)")
    after = by_position["nll_after_subtasks"]
    say("NLL per step by position in the task: " + ", ".join(
        f"subtask {i + 1} {v:.4f}" for i, v in enumerate(by_position["nll_by_subtask"]))
        + (f"; after the last (the final DONE) {after:.4f}" if after is not None else ""))
    if usage:
        letter_of_kind = {rules.KIND[name]: letter for letter, name in rules.SUBTASK_LETTERS.items()}
        kinds = sorted(usage, key=lambda k: letter_of_kind[k])
        letters = [letter_of_kind[k] for k in kinds]
        report["option_usage"] = {"subtasks": letters, "rows": [
            [round(float(usage[k][i]), 4) for k in kinds] for i in range(num_options)]}
        say("option in use (argmax p_t) on the held-out demonstrations, share of each subtask's steps:")
        say("           " + "  ".join(f"{s:>5}" for s in letters))
        for i, row in enumerate(report["option_usage"]["rows"]):
            say(f"  option {i + 1}  " + "  ".join(f"{v:5.2f}" for v in row))

    # the environment
    env = Craft(tuple(tasks))
    key = jax.random.key(seed)
    report["rollouts"] = {}
    for task_id, task in enumerate(tasks):
        result = rollout(policy, env, task, task_id, jax.random.fold_in(key, task_id), episodes,
                         max_steps=data["max_steps"]).summary()
        report["rollouts"][task] = result
        say(f"task {task}: success rate {result['success_rate']:.3f}, return {result['return']:.3f}, "
            f"length {result['episode_length']:.1f} ({episodes} episodes)")

    if kind in ("ocn", "moe"):  # the LSTM and OMPN have no options
        report.update(option_tables(policy, subtasks, scripted_tasks, episodes, data["max_steps"], key, say))
    return report


def option_tables(policy, subtasks: str, scripted_tasks: list[str], episodes: int, max_steps: int, key,
                  say=print) -> dict:
    """The option x subtask tables (chosen again at done; until done) and the scripted controller's runs of
    `scripted_tasks`, as report fields; printed as they come."""
    import jax

    from tgjax.envs.craft import Craft
    from tgjax.infer.craft import option_subtask_success, scripted_controller_rollout

    report: dict = {}
    legend = ", ".join(f"{s}={rules.SUBTASK_LETTERS[s]}" for s in subtasks)
    tables = {}
    for on_done, field, how in (
            ("reselect", "option_subtask_success", "each option alone, chosen again when its done fires"),
            ("stop", "option_subtask_success_until_done", "each option alone until its done fires")):
        tables[on_done] = table = option_subtask_success(policy, jax.random.fold_in(key, 10_000), episodes,
                                                         subtasks, max_steps=max_steps, on_done=on_done)
        report[field] = {"subtasks": list(subtasks), "on_done": on_done, "rows": table.round(4).tolist()}
        say(f"option x subtask success ({how}; {legend}):")
        say("           " + "  ".join(f"{s:>5}" for s in subtasks))
        for i, row in enumerate(table):
            say(f"  option {i + 1}  " + "  ".join(f"{v:5.2f}" for v in row))
    # each subtask's option for the scripted controller: the one that solves it best, chosen again at done
    best_option = {s: int(tables["reselect"][:, j].argmax()) for j, s in enumerate(subtasks)}
    report["scripted_controller"] = {}
    for task in scripted_tasks:
        result = scripted_controller_rollout(policy, Craft((task,)), task, best_option,
                                             jax.random.fold_in(key, 20_000), episodes,
                                             max_steps=max_steps).summary()
        report["scripted_controller"][task] = {**result, "option_of_subtask": best_option}
        say(f"task {task} by the options under a controller told the subtask ("
            + ", ".join(f"{s}: option {i + 1}" for s, i in best_option.items()) + f"): success rate "
            f"{result['success_rate']:.3f}, subtasks done {result['return']:.2f} of {len(task)} "
            f"({episodes} episodes)")
    return report


def evaluate_pooled_options(workdirs: str, *, step="best", episodes: int = 200, subtasks: str = "ACD",
                            controller_tasks: str = "ACD", seed: int = 0, say=print) -> dict:
    """Setting S2's option pool (several craft_bc runs, comma-separated, their options in that order): the
    option x subtask tables and the scripted controller over all the pooled options (`option_tables`)."""
    import jax

    from tgjax.infer.api import load
    from tgjax.infer.craft import pooled_options

    scripted_tasks = _check_tasks(subtasks, controller_tasks)
    models = [load(workdir, step) for workdir in split_workdirs(workdirs)]
    for model in models:
        model.require("policy", command="tgjax eval craft")
    policy, checkpoints = pooled_options(models)
    sizes = [c.model_config.num_options for c in checkpoints]
    first = 1
    for checkpoint, size in zip(checkpoints, sizes):
        say(f"{checkpoint.where} (tasks {', '.join(checkpoint.meta['tasks'])}): options {first}-{first + size - 1}")
        first += size
    max_steps = int(checkpoints[0].meta["config"]["data"]["max_steps"])
    report = {"workdirs": [str(c.workdir) for c in checkpoints], "steps": [c.step for c in checkpoints],
              "policy": policy.config.kind, "options_per_run": sizes}
    report.update(option_tables(policy, subtasks, scripted_tasks, episodes, max_steps, jax.random.key(seed), say))
    return report


def _check_tasks(subtasks: str, controller_tasks: str) -> list[str]:
    """--subtasks and --controller-tasks checked (CraftTaskError / ValueError naming the bad one)."""
    for letter in subtasks:
        rules.parse_task(letter)  # CraftTaskError naming an unknown subtask
    scripted_tasks = [t.strip() for t in controller_tasks.split(",") if t.strip()]
    for task in scripted_tasks:
        rules.parse_task(task)
        if set(task) - set(subtasks):
            raise ValueError(f"--controller-tasks {task!r}: its subtasks must be among the table's "
                             f"--subtasks {subtasks!r}, which pick each subtask's option")
    return scripted_tasks


def main_craft(argv=None) -> int:
    """`tgjax eval craft ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax eval craft")
    add_craft_arguments(parser)
    return run_craft(parser.parse_args(argv))


def run_craft(args: argparse.Namespace) -> int:
    if args.episodes < 1 or args.valid_episodes < 0:
        print("tgjax eval craft: error: --episodes must be >= 1 and --valid-episodes >= 0", file=sys.stderr)
        return 2
    from tgjax.data.craft_demos import CraftDemoError
    from tgjax.infer.loading import CheckpointError

    try:
        _check_outputs(args)
    except ValueError as error:
        print(f"tgjax eval craft: error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            drawn = plot_curves(args.workdir, args.plot)
        except (FileNotFoundError, ValueError) as error:
            print(f"tgjax eval craft: error: {error}", file=sys.stderr)
            return 2
        print(f"{args.plot}: validation curves of {', '.join(drawn)}")
    if args.curves_only:
        return 0
    pooled = "," in args.workdir
    try:
        if pooled:
            report = evaluate_pooled_options(args.workdir, step=args.step, episodes=args.episodes,
                                             subtasks=args.subtasks, controller_tasks=args.controller_tasks,
                                             seed=args.seed)
        else:
            report = evaluate_craft(args.workdir, step=args.step, episodes=args.episodes,
                                    valid_episodes=args.valid_episodes, subtasks=args.subtasks,
                                    controller_tasks=args.controller_tasks, seed=args.seed)
    except (FileNotFoundError, CheckpointError, CraftDemoError, rules.CraftTaskError, ValueError) as error:
        print(f"tgjax eval craft: error: {error}", file=sys.stderr)
        return 2
    if args.output:
        output = Path(args.output)
    elif pooled:
        output = workdir_path(report["workdirs"][0]) / "craft_pool_eval.json"
    else:
        output = workdir_path(report["workdir"]) / "craft_eval.json"
    try:
        if is_url(output):  # into a bucket workdir: one object, written whole
            output.write_text(dumps_json(report, where=str(output), indent=2) + "\n")
        else:
            write_json(output, report)
    except (OSError, ValueError) as error:
        print(f"tgjax eval craft: error: {error}", file=sys.stderr)
        return 2
    print(f"written to {output}")
    return 0


def _check_outputs(args) -> None:
    """--plot and --output, checked before any curve is read or episode run."""
    metrics = [Path(w) / "metrics.jsonl" for w in split_workdirs(args.workdir) if not is_url(w)]
    if args.plot:
        check_output(args.plot, option="--plot", inputs=metrics, figure=True)
    if args.output and not args.curves_only:
        check_output(args.output, option="--output", inputs=metrics + ([args.plot] if args.plot else []))
