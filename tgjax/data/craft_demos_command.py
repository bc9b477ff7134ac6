"""`tgjax data craft-demos --task NAME --num N -o FILE`: bot demonstrations of one Craft task."""

from __future__ import annotations

import argparse
import sys

from tgjax.envs import craft_rules as rules
from tgjax.outputs import OutputError, check_output


def add_craft_demos_arguments(parser: argparse.ArgumentParser) -> None:
    """`tgjax data craft-demos`'s description and arguments, on the parser `tgjax.cli` made for it."""
    parser.description = (
        "Successful demonstrations of one Craft task by the rule-based bot (tgjax.envs.craft_bot), "
        "with each subtask's boundary, written as a compressed .npz that records the environment "
        f"version ({rules.ENV_VERSION}).")
    parser.add_argument("--task", required=True,
                        help="subtask letters in order, A=wood B=gold C=iron D=grass (e.g. ACD)")
    parser.add_argument("--num", type=int, default=6000, help="successful demonstrations to keep (default 6000)")
    parser.add_argument("-o", "--output", required=True, help="the .npz file to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=64, help="the episode time limit (default 64)")
    parser.add_argument("--sparse", action="store_true", help="record the sparse-reward setting (default dense)")
    parser.add_argument("--full-view", action="store_true", help="fill the observation's coarse 25x25 view")
    parser.add_argument("--batch-size", type=int, default=256, help="episodes stepped together")
    parser.set_defaults(run=run_craft_demos)


def main_craft_demos(argv: list[str]) -> int:
    """`tgjax data craft-demos ARGV`, parsed on a parser of its own."""
    parser = argparse.ArgumentParser(prog="tgjax data craft-demos")
    add_craft_demos_arguments(parser)
    return run_craft_demos(parser.parse_args(argv))


def run_craft_demos(args: argparse.Namespace) -> int:
    from tgjax.data.craft_demos import write_craft_demos
    from tgjax.envs.craft_bot import generate_demos
    from tgjax.progress import Progress

    if args.num < 1 or args.max_steps < 1 or args.batch_size < 1:
        print("tgjax data craft-demos: error: --num, --max-steps and --batch-size must be >= 1", file=sys.stderr)
        return 2
    try:
        check_output(args.output)  # fail before the generation, not after
    except OutputError as error:
        print(f"tgjax data craft-demos: error: {error}", file=sys.stderr)
        return 2
    progress = Progress(args.num, label="kept", noun="demonstration")
    try:
        demos, summary = generate_demos(
            args.task, args.num, seed=args.seed, dense_reward=not args.sparse, max_steps=args.max_steps,
            full_view=args.full_view, batch_size=args.batch_size,
            progress=lambda kept, tried: progress.update(kept, totals={"episodes": tried}))
    except rules.CraftTaskError as error:
        progress.close()
        print(f"tgjax data craft-demos: error: {error}", file=sys.stderr)
        return 2
    progress.close()
    write_craft_demos(args.output, demos)
    lengths = demos.offsets[1:] - demos.offsets[:-1]
    print(f"{args.output}: {len(demos)} demonstrations of task {args.task} "
          f"(bot success rate {summary['success_rate']:.4f} over {summary['episodes_tried']} episodes; "
          f"{lengths.mean():.1f} steps on average incl. DONE; {summary['seconds']:.1f} s)")
    return 0
