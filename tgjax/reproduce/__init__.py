"""Reproduction ledger: the papers' headline claims, what this code has shown for each, and one command that
moves a claim forward within a time budget.

    tgjax reproduce --help                                   the claims and which of them run here
    tgjax reproduce om-listops --budget-s 1800 --output OUT  train the claim's models, evaluate, pack the state
    tgjax reproduce om-listops --budget-s 1800 --resume-from OUT --output OUT2   continue where it stopped
    tgjax reproduce --ledger                                 write docs/reproduction.md

Modules, one job each: `claims` (the curated file reproduction/claims.json), `verdict` (means, spreads and the
verdict rule), `recipes` (what a runnable claim trains and how it is scored), `runner` (training within a
budget, in resumable chunks), `packing` (a work folder as a few size-capped files), `results` (the appended
record of automated runs, reproduction/runs.jsonl), `ledger` (the generated page), `command` (the CLI).
"""
