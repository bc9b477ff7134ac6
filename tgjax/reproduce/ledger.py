"""docs/reproduction.md from reproduction/claims.json and reproduction/runs.jsonl.

    python -m tgjax.reproduce.ledger [--claims FILE] [--results FILE] [-o docs/reproduction.md]
    tgjax reproduce --ledger                     the same

One table row per claim, four column groups (the paper; ours at CPU scale; ours on an accelerator; the
verdict and what is known), then the latest automated run of each runnable claim.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tgjax.reproduce.claims import CLAIMS_FILE, REPO_ROOT, Claim, ClaimsError, ClaimsFile, load_claims
from tgjax.reproduce.results import RESULTS_FILE, read_records
from tgjax.reproduce.verdict import MIN_SEEDS, MIN_SEEDS_SHORT, SHORT_RUN_SECONDS, record_text

LEDGER_FILE = REPO_ROOT / "docs" / "reproduction.md"
COLUMNS = ("claim", "paper: number; protocol", "ours, CPU scale: number; seeds; wall time; command",
           "ours, accelerator: hardware; steps; date; commit", "verdict", "what is known")


def _cell(text: str) -> str:
    """Table-safe: no pipes or line breaks inside a cell."""
    return " ".join(str(text).replace("|", "\\|").split())


def _paper(claim: Claim, papers: dict[str, str]) -> str:
    p = claim.paper_result
    return f"**{p['number']}** ({p['where']}, {papers[claim.paper]}); {p['protocol']}"


def _cpu(claim: Claim) -> str:
    o = claim.ours_cpu
    if o is None:
        return "not run"
    return f"**{o['number']}**; {o['spread']}; {o['wall']}; `{o['command']}`"


def _accelerator(claim: Claim) -> str:
    o = claim.ours_accelerator
    if o is None:
        return "no accelerator run"
    return f"{o['hardware']}: **{o['number']}**; {o['steps']}; {o['date']}; commit {o['commit']}"


def claim_row(claim: Claim, papers: dict[str, str]) -> str:
    cells = [f"`{claim.id}`: {claim.claim}", _paper(claim, papers), _cpu(claim), _accelerator(claim),
             f"**{claim.verdict}**", claim.why]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _side(summary: dict, name: str) -> str:
    return record_text(summary.get(name))


def _baseline_cell(summary: dict) -> str:
    """The judged baseline; with several, the best one named and the others beside; a reference after them."""
    baseline = _side(summary, "baseline")
    if summary.get("baselines"):
        best = summary.get("baseline_name")
        others = [f"{g} {record_text(s)}" for g, s in summary["baselines"].items() if g != best]
        baseline = (f"best, {best}: {baseline}" if best else baseline) + "".join(f"; {o}" for o in others)
    for group, found in (summary.get("beside") or {}).items():
        baseline += f"; beside, not judged: {group} {record_text(found)}"
    if "reference" in summary:
        baseline += f"; {summary.get('reference_label', 'reference')}: {record_text(summary['reference'])}"
    return baseline


def _record_scale(record: dict) -> str:
    """A record's scale; one written before recipes had scales is at its claim's default (then its only one)."""
    from tgjax.reproduce.runner import packed_scale

    return packed_scale(record, fallback="cpu")


def _automated(claims: ClaimsFile, records: list[dict]) -> list[str]:
    """One row per claim and scale: each scale a claim has a recipe at, or records of (none: one row)."""
    from tgjax.reproduce.recipes import recipe_for, scales_of

    latest: dict[tuple[str, str], dict] = {}
    counts: dict[tuple[str, str], int] = {}
    for record in records:
        key = (record["claim"], _record_scale(record))
        latest[key] = record
        counts[key] = counts.get(key, 0) + 1
    lines = ["| claim | scale | `tgjax reproduce` | latest record | model | baseline | verdict of that record |",
             "|---|---|---|---|---|---|---|"]
    for claim in claims.claims:
        own = scales_of(claim.id)  # the recipes' scales, the default first
        scales = list(dict.fromkeys([*own, *(s for c, s in latest if c == claim.id)]))
        for scale in scales or [""]:
            if scale in own[1:]:  # a second recipe: its own description
                recipe = f"runnable, --scale {scale}: {recipe_for(claim.id, scale).description}"
            else:
                recipe = claim.recipe + (f": {claim.recipe_note}" if claim.recipe_note else "")
            record = latest.get((claim.id, scale))
            if record is None:
                lines.append("| " + " | ".join(_cell(c) for c in (f"`{claim.id}`", scale or "-", recipe, "none yet",
                                                                   "", "", "")) + " |")
                continue
            lines.append(_record_row(claim.id, scale, recipe, record, counts[(claim.id, scale)]))
    return lines


def _record_row(claim_id: str, scale: str, recipe: str, record: dict, count: int) -> str:
    steps = ", ".join(f"{r['name']} {r['step']}/{r['num_steps']}" for r in record["runs"])
    when = (f"{record['date']}, {record['hardware']}, commit {record['commit']}, {record['wall_s']:.0f} s of a "
            f"{record['budget_s']:.0f}-s budget{' (tiny)' if record['tiny'] else ''}; {steps} "
            f"({count} record(s))")
    summary = record["summary"]
    if "parts" in summary:  # each part judged on its own runs: its numbers in the same cells, part by part
        model = "; ".join(f"{s['label']}: {_side(s, 'model')}" for s in summary["parts"].values())
        baseline = "; ".join(f"{part}: {_baseline_cell(s)}" for part, s in summary["parts"].items())
    else:
        model, baseline = f"{summary['label']}: {_side(summary, 'model')}", _baseline_cell(summary)
    cells = (f"`{claim_id}`", scale, recipe, when, model, baseline, f"**{summary['verdict']}**: {summary['why']}")
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render(claims: ClaimsFile, records: list[dict]) -> str:
    lines = [
        "# Reproduction ledger",
        "",
        "<!-- Generated by `tgjax reproduce --ledger` (tgjax/reproduce/ledger.py) from reproduction/claims.json and "
        "reproduction/runs.jsonl: edit those, then regenerate. -->",
        "",
        "One row per headline claim of each paper: the paper's number and protocol, what this code has shown at "
        "CPU scale and on an accelerator (the recorded runs of the family pages, reproduction/claims.json, and "
        "the runs `tgjax reproduce` appended, reproduction/runs.jsonl), and a verdict. The verdict rule "
        f"(`tgjax.reproduce.verdict`): **reproduced** or **in direction** only when the difference exceeds the "
        f"spread (sample standard deviation) over at least {MIN_SEEDS} seeds of each side ({MIN_SEEDS_SHORT} where a "
        f"run trains for under {SHORT_RUN_SECONDS / 60:.0f} minutes; reproduced: also "
        "within tolerance of the paper's number); **contradicted** when it exceeds it the other way; otherwise "
        "**not yet**. A single run, however clear, is *not yet*.",
        "",
        "`tgjax reproduce CLAIM --budget-s S --output DIR` trains what a runnable claim compares, scores it, "
        "appends a record to reproduction/runs.jsonl (from an installed package, to DIR/runs.jsonl) and packs "
        "its state into DIR (parts of at most 16 MiB, "
        "64 MiB in all); `--resume-from DIR` continues exactly where it stopped. `tgjax reproduce --help` lists "
        "the claims. The programs XLA compiles are kept in the work folder (`--workdir`, not packed), so the "
        "chunks and seeds of a call, and later calls over the same `--workdir`, do not compile them again "
        "(`--no-compilation-cache` turns it off; benchmarks/compile_cache.py measures it). A finished run is "
        "scored once: its scores are kept in the state and its checkpoints left out of the pack. A recipe at "
        "the paper's scale (`--scale paper`: the paper's own model size, data and steps, an accelerator's work; "
        "pushdown-dyck-table1's only scale) trains its runs one after another and scores each as it finishes, so "
        "that its pack holds one unfinished run and every call moves the claim on. A SIGTERM (a "
        "preemption) stops a call at the next safe point, within seconds: the training run in progress saves, "
        "nothing more trains or is scored, the state is packed into DIR, no record is appended, and the exit "
        "status is 143.",
        "",
        "```bash",
        "tgjax reproduce --help                                                  # the claims, which ones run here",
        "tgjax reproduce onlstm-parse-f1 --budget-s 600 --output OUT             # ON-LSTM and LSTM, 5 seeds, ~3 min",
        "tgjax reproduce om-listops --budget-s 3600 --output OUT1                # stops, scores, packs at the budget",
        "tgjax reproduce om-listops --budget-s 3600 --resume-from OUT1 --output OUT2   # continues where OUT1 stopped",
        "tgjax reproduce om-listops --scale paper --budget-s 540 --output OUT     # the thesis' recipe (accelerator)",
        "tgjax reproduce --ledger                                                # rewrites this page",
        "```",
        "",
        "### On an accelerator",
        "",
        "A paper-scale recipe (the paper's model size, data and steps) is done over as many short accelerator "
        "calls as it takes, each continuing the last from the claim's kept pack, reproduction/packs/CLAIM-paper/ "
        "(committed; at most one claim's pack or two at a time, as they travel with the checkout). "
        "`benchmarks/ledger_slot.sh` is the prepared script of one call: `prepare` (here) downloads the wheels "
        "the accelerator's Python lacks and packs the Ordered Memory data into .carry/ (git-ignored); `run CLAIM "
        "...` (there, carrying .carry) installs them and moves each claim on from its kept pack, the claims side "
        "by side on the one device, writing their new packs, records and log to the device's output folder (a "
        "guard stops a call with SIGTERM 60 s past its budget, so that it still packs); `keep` (here) puts the "
        "new packs in place of the old and appends the records to reproduction/runs.jsonl. Then regenerate this "
        "page and commit.",
        "",
        "```bash",
        "bash benchmarks/ledger_slot.sh prepare                                  # here: .carry/ (about 8 MiB)",
        "OUT=out/slot bash benchmarks/ledger_slot.sh run om-listops om-logic-length 480   # there (the tool sets OUT)",
        "bash benchmarks/ledger_slot.sh keep out/slot                            # here: the packs and records kept",
        "```",
        "",
        "The order of the accelerator's work, unless a row below says it is done: Ordered Memory at the thesis' "
        "recipe (om-listops and om-logic-length side by side, `ledger_slot.sh run`); Pushdown's Table 1, 3 seeds "
        "of both models (pushdown-dyck-table1, `ledger_slot.sh run`); Ordered Memory's systematicity splits at "
        "the thesis' recipe (om-systematicity, 27 runs, `ledger_slot.sh run`); UDGN on CRAFT to a converged MLM "
        "and the stack-attention grid's deterministic CFLs (`benchmarks/cfl_grid.py`), which have no paper-scale "
        "recipe yet (UDGN at the release's size has 47.3M parameters: a checkpoint with Adam's moments, about "
        "570 MB, cannot travel in a 64-MiB pack, so its runs must each fit one call or keep their state on the "
        "accelerator's side). OCN's two rows already have 3 seeds at the thesis' scale on an H200 "
        "(`benchmarks/craft_table.sh`, one call): what is left there is diagnosis, not more of the same runs.",
        "",
        "## Claims",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += [claim_row(c, claims.papers) for c in claims.claims]
    lines += ["", "## Automated runs", "",
              "The latest `tgjax reproduce` record of each claim at each scale (reproduction/runs.jsonl; a "
              "`--tiny` record checks the path, not the claim).", ""]
    lines += _automated(claims, records)
    lines += ["", "## Papers", ""]
    lines += [f"- `{key}`: {title}" for key, title in claims.papers.items()]
    return "\n".join(lines) + "\n"


def write_ledger(output: str | Path = LEDGER_FILE, *, claims_path: str | Path = CLAIMS_FILE,
                 results_path: str | Path = RESULTS_FILE) -> Path:
    from tgjax.reproduce.recipes import recipes

    claims = load_claims(claims_path, runnable_ids=set(recipes()))
    text = render(claims, read_records(results_path))
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_name(f".{output.name}.partial")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(output)
    return output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgjax.reproduce.ledger", description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", default=str(CLAIMS_FILE), help="the curated claims file")
    parser.add_argument("--results", default=str(RESULTS_FILE), help="the automated runs' records")
    parser.add_argument("-o", "--output", default=str(LEDGER_FILE), help="the page to write")
    args = parser.parse_args(argv)
    from tgjax.outputs import OutputError, check_output

    try:
        check_output(args.output, option="-o", inputs=[args.claims, args.results])
        path = write_ledger(args.output, claims_path=args.claims, results_path=args.results)
    except (ClaimsError, OutputError, OSError) as error:
        print(f"tgjax reproduce: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
