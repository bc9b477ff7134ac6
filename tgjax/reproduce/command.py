"""`tgjax reproduce`: move one claim forward within a time budget, or write the ledger.

    tgjax reproduce CLAIM --budget-s S --output DIR [--resume-from DIR0] [--scale cpu|paper] [--tiny]
    tgjax reproduce --ledger [-o docs/reproduction.md]

A run trains every model the claim compares (its recipe, `tgjax.reproduce.recipes`) until the budget is
nearly spent, scores what it reached, prints the claim's row, appends a record to reproduction/runs.jsonl and
packs the work folder (checkpoints with optimiser and data state) into DIR. `--resume-from` unpacks such a
folder and continues exactly where it stopped. `--scale paper` runs a claim's paper-scale recipe (the paper's own
model size, data and steps: an accelerator's work, over as many budgeted calls as it takes) where it has one.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tgjax.reproduce.claims import CLAIMS_FILE, ClaimsError, in_checkout, load_claims
from tgjax.reproduce.ledger import LEDGER_FILE
from tgjax.reproduce.recipes import SCALES
from tgjax.reproduce.results import RESULTS_FILE
from tgjax.reproduce.verdict import record_text

PROG = "tgjax reproduce"


def _claims_listing(claims_path: Path) -> str:
    from tgjax.reproduce.recipes import scales_of

    try:
        claims = load_claims(claims_path).claims
    except ClaimsError as error:
        return f"(the claims file could not be read: {error})"
    width = max(len(c.id) for c in claims)
    lines = ["claims (id, what `tgjax reproduce` does with it, its scales (the first is the default), curated "
             "verdict):"]
    for c in claims:
        scales = ",".join(scales_of(c.id)) if c.recipe == "runnable" else "-"
        lines.append(f"  {c.id:<{width}}  {c.recipe:<18} {scales:<10} {c.verdict}")
    return "\n".join(lines)


def add_reproduce_arguments(parser: argparse.ArgumentParser, claims_path: Path = CLAIMS_FILE) -> None:
    """`tgjax reproduce`'s description, arguments and claims listing, on the parser `tgjax.cli` made for it."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("Train and score what a paper's claim compares, within a time budget, resumable; or write "
                          "the reproduction ledger (docs/reproduction.md).")
    parser.epilog = _claims_listing(claims_path)
    parser.add_argument("claim", nargs="?", help="a claim id (listed below)")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds of wall time for this call")
    parser.add_argument("--output", default=None, help="folder for the packed state (parts <= 16 MiB, 64 MiB in all)")
    parser.add_argument("--resume-from", default=None, help="an earlier call's --output folder: continue from it")
    parser.add_argument("--workdir", default=None,
                        help="where the runs train (default: a temporary folder, removed once packed)")
    parser.add_argument("--scale", choices=SCALES, default=None,
                        help="the recipe's scale: cpu (same-budget runs for a few CPU hours) or paper (the paper's "
                             "own recipe, an accelerator's); default: the claim's first scale listed below")
    parser.add_argument("--tiny", action="store_true", help="the smallest runs of the recipe (checks the path)")
    parser.add_argument("--results", default=None,
                        help="the runs' records: a claim run appends to it (default: reproduction/runs.jsonl of a "
                             "checkout, else runs.jsonl in --output), --ledger reads it (default: the project's)")
    parser.add_argument("--no-compilation-cache", action="store_true",
                        help="compile every chunk afresh (default: compiled programs are kept in the work folder "
                             "and reused by later chunks and seeds; not packed)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--ledger", action="store_true", help="write the ledger page instead of running a claim")
    parser.add_argument("-o", dest="ledger_output", default=None,
                        help="the ledger page (--ledger; default: docs/reproduction.md of a checkout)")
    parser.add_argument("--claims", default=str(claims_path), help=argparse.SUPPRESS)
    parser.set_defaults(run=run_reproduce)


def build_parser(claims_path: Path = CLAIMS_FILE) -> argparse.ArgumentParser:
    """`tgjax reproduce`'s arguments on a parser of its own."""
    parser = argparse.ArgumentParser(prog=PROG)
    add_reproduce_arguments(parser, claims_path)
    return parser


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """`tgjax reproduce ARGV`, parsed on a parser of its own."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = ["reproduce", *argv]
    return run_reproduce(args)


def run_reproduce(args: argparse.Namespace) -> int:
    """Runs a claim (or, with `--ledger`, writes the ledger); `args.argv`, the command line after `tgjax`, is
    recorded with the run."""
    if args.ledger:
        from tgjax.reproduce.ledger import main as ledger_main

        if args.ledger_output is None and not in_checkout():
            return _fail("an installed tgjax has no docs/ to write the ledger into; give -o PAGE.md")
        return ledger_main(["--claims", args.claims, "--results", args.results or str(RESULTS_FILE),
                            "-o", args.ledger_output or str(LEDGER_FILE)])
    if not args.claim:
        return _fail("name a claim (tgjax reproduce --help lists them), or --ledger")
    try:
        claim = load_claims(args.claims).by_id().get(args.claim)
    except ClaimsError as error:
        return _fail(str(error))
    if claim is None:
        return _fail(f"no claim {args.claim!r}; tgjax reproduce --help lists them")
    if claim.recipe != "runnable":
        return _fail(f"{claim.id} is {claim.recipe}: {claim.recipe_note or claim.why}")
    if args.budget_s is None or args.budget_s <= 0 or args.output is None:
        return _fail("a claim run needs --budget-s SECONDS (> 0) and --output DIR")
    from tgjax.reproduce.recipes import recipe_for

    try:
        recipe = recipe_for(claim.id, getattr(args, "scale", None))
    except KeyError as error:
        return _fail(error.args[0])
    return run_claim(recipe, args, getattr(args, "argv", ["reproduce"]))


def run_claim(recipe, args, argv: list[str]) -> int:
    """`argv`: the command line after `tgjax` (recorded)."""
    from tgjax.outputs import OutputError, check_output, make_output_folder
    from tgjax.reproduce import packing, results, runner
    from tgjax.train.loop import SigtermFlag

    started = time.monotonic()
    args.results = args.results or str(results.default_results_file(args.output))
    try:  # every output before any training: a folder that cannot be written would lose the budget's work
        make_output_folder(args.output, option="--output")
        if args.workdir is not None:
            make_output_folder(args.workdir, option="--workdir")
        check_output(args.results, option="--results")
    except OutputError as error:
        return _fail(str(error))
    temporary = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix=f"reproduce-{recipe.claim_id}-")) if temporary else Path(args.workdir)
    guard = contextlib.ExitStack()  # the compilation cache and the SIGTERM flag, for the rest of the call
    try:
        # A SIGTERM (a preemption) from here on stops the call at the next safe point (a training loop saves and
        # stops; no new chunk or scoring starts) and the state is still packed.
        sigterm = guard.enter_context(SigtermFlag().installed())
        stop = lambda: sigterm.signalled  # noqa: E731
        if args.resume_from:
            meta = packing.unpack(args.resume_from, work)
            packed = runner.describe(meta.get("claim"), runner.packed_scale(meta), bool(meta.get("tiny")))
            wanted = runner.describe(recipe.claim_id, recipe.scale, args.tiny)
            if packed != wanted:
                return _fail(f"{args.resume_from} holds {packed}, not {wanted}")
        if not args.no_compilation_cache:
            guard.enter_context(runner.compilation_cache(work))
        state = runner.train_within_budget(recipe, work, budget_s=args.budget_s, tiny=args.tiny,
                                           quiet=args.quiet, stop_requested=stop)
        scored = [] if state.interrupted else runner.evaluate_runs(recipe, work, state, tiny=args.tiny,
                                                                     stop_requested=stop)
        summary = None if state.interrupted else runner.summarise(recipe, scored)
        record = {
            "claim": recipe.claim_id, "scale": recipe.scale, "date": results.now(), "commit": results.commit(),
            "hardware": results.hardware(), "tiny": args.tiny, "budget_s": args.budget_s,
            "invocation": state.invocations, "complete": all(p.finished for p in state.runs.values()),
            "runs": [{"name": spec.name, "role": spec.role, **({"group": spec.group} if spec.group else {}),
                      "seed": spec.seed, "step": run.step,
                      "num_steps": run.num_steps, "finished": run.finished,
                      "train_seconds": round(run.train_seconds, 1), "chunks": run.chunks,
                      "command": spec.command(f"runs/{spec.name}"),
                      "scores": scores} for spec, run, scores in scored],
            "summary": summary,
            "command": "tgjax " + " ".join(shlex.quote(a) for a in argv),
        }
        meta = {"claim": recipe.claim_id, "scale": recipe.scale, "tiny": args.tiny, "invocation": state.invocations,
                "complete": record["complete"], "steps": {name: p.step for name, p in state.runs.items()},
                "commit": record["commit"], "date": record["date"], "interrupted": state.interrupted}
        try:
            parts = packing.pack(work, args.output, meta=meta, leave_out=runner.packed_out(state))
        except (packing.PackTooLarge, OSError) as error:  # too large, or the disk filled up while packing
            temporary = False  # keep the work: it is the only copy
            return _fail(f"{error}; the work folder is kept at {work}")
        if state.interrupted:  # preempted: the state is kept, nothing was scored, no record is appended
            print(f"{PROG}: stopped by SIGTERM; {recipe.claim_id}'s state is packed into {args.output} (nothing "
                  f"scored, no record appended); continue with --resume-from {args.output}", file=sys.stderr)
            return SIGTERM_EXIT
        record["wall_s"] = round(time.monotonic() - started, 1)
        results.append_record(record, args.results)
        _print_row(record, parts)
        return 0
    except (runner.StateMismatch, packing.PackError, ClaimsError, FileNotFoundError, ValueError) as error:
        return _fail(str(error))
    finally:
        guard.close()
        if temporary:
            shutil.rmtree(work, ignore_errors=True)


SIGTERM_EXIT = 143  # 128 + SIGTERM, as a shell reports a process the signal ended


def _print_comparison(s: dict, indent: str = "  ") -> None:
    """One comparison's lines: the model against the (best) baseline, the other baselines, the verdict."""
    best = f" ({s['baseline_name']}, the best)" if s.get("baseline_name") else ""
    print(f"{indent}{s['label']}: model {record_text(s.get('model'))}, baseline{best} {record_text(s.get('baseline'))}"
          + (f", paper {s['paper']}" if s["paper"] is not None else ""))
    for group, found in (s.get("baselines") or {}).items():
        print(f"{indent}  baseline {group}: {record_text(found)}")
    for group, found in (s.get("beside") or {}).items():
        print(f"{indent}  {group}, beside (not judged): {record_text(found)}")
    if "reference" in s:
        print(f"{indent}  {s.get('reference_label', 'reference')}: {record_text(s['reference'])}")
    print(f"{indent}verdict: {s['verdict']} ({s['why']})")


def _print_row(record: dict, parts: list[Path]) -> None:
    s = record["summary"]
    done = sum(r["finished"] for r in record["runs"])
    print(f"{record['claim']} ({record['scale']} scale): {done}/{len(record['runs'])} runs finished; "
          + "; ".join(f"{r['name']} step {r['step']}/{r['num_steps']}" for r in record["runs"]))
    if "parts" in s:  # a claim on several parts: each judged on its own runs, then combined
        for part_summary in s["parts"].values():
            _print_comparison(part_summary, indent="    ")
        print(f"  {s['label']}, every part: verdict {s['verdict']} ({s['why']})")
    else:
        _print_comparison(s)
    print(f"  {record['hardware']}, commit {record['commit']}, {record['wall_s']:.0f} s; record appended to "
          f"{'the results file'}; state packed into {len(parts) - 1} part(s) + manifest in {parts[-1].parent}"
          + ("" if record["complete"] else f"; continue with --resume-from {parts[-1].parent}"))
