"""Small pieces the recipes share: the records of a workdir's metrics.jsonl, quiet evaluation commands."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path


def seeded_runs(prefix: str, config: str, seeds: Sequence[int], common: Sequence[str], tiny_overrides: Sequence[str],
                tiny: bool, *, role: str = "model", group: str = "") -> list:
    """One `role` run of `config` per seed (`tiny`: the first seed only, with `tiny_overrides`), named
    PREFIX-seedN; `group`: the baseline these runs are seeds of, when a claim has several."""
    from tgjax.reproduce.recipes import RunSpec  # the package imports this module

    extra = tuple(tiny_overrides) if tiny else ()
    return [RunSpec(f"{prefix}-seed{seed}", role, config, (*common, *extra, f"training.seed={seed}"), seed, group)
            for seed in (seeds[:1] if tiny else seeds)]


def metrics_records(workdir: Path) -> list[dict]:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def checkpoint_to_score(workdir: Path) -> str:
    """The step a recipe scores a run at, as `tgjax.load` takes it: "best" (by validation) once the run has a
    validation record, else "latest"."""
    return "best" if any(r.get("split") == "valid" for r in metrics_records(workdir)) else "latest"


def run_eval_command(main: Callable[[Sequence[str]], int], argv: list[str], output: Path) -> dict:
    """Runs a `tgjax eval ...` entry point with `-o output`, its printout held back; returns the JSON it wrote.

    A failure raises with the command's own message (it printed one line to stderr)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main([*argv, "-o", str(output)])
    if status != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {status}); see the message above")
    return json.loads(output.read_text())


NO_TREES = "no parse F1: a baseline has no pointers to read trees from"


def parse_f1_or_note(result: dict) -> dict:
    """An Ordered Memory's parse F1, or (a baseline) a note saying there is none: never a made-up number."""
    return {"parse_f1": result["parse_f1"]} if "parse_f1" in result else {"parse_note": NO_TREES}


def encoder_runs(config: str, seeds: Sequence[int], common: Sequence[str], tiny_overrides: Sequence[str],
                 tiny: bool) -> list:
    """An Ordered Memory claim's runs: `seeded_runs` of `config` ("om-seedN"), then the same seeds of each
    same-size baseline encoder ("lstm-seedN", "transformer-seedN"; role "baseline", grouped by encoder)."""
    from tgjax.models.sequence_encoders import BASELINES  # here, not at import: `tgjax --help` stays fast

    specs = seeded_runs("om", config, seeds, common, tiny_overrides, tiny)
    for encoder in BASELINES:
        specs += seeded_runs(encoder, config, seeds, (*common, f"model.encoder={encoder}"), tiny_overrides, tiny,
                             role="baseline", group=encoder)
    return specs


def onlstm_and_lstm_runs(config: str, seeds: Sequence[int], common: Sequence[str], tiny_overrides: Sequence[str],
                         tiny: bool, *, name_suffix: str = "") -> list:
    """An ON-LSTM claim's runs: `seeded_runs` of `config` ("onlstm{name_suffix}-seedN"), then the same seeds of the
    same config as a plain LSTM (`model.ordered=False`: the master gates fixed at 1; "lstm{name_suffix}-seedN",
    role "baseline", group "lstm")."""
    return (seeded_runs(f"onlstm{name_suffix}", config, seeds, common, tiny_overrides, tiny)
            + seeded_runs(f"lstm{name_suffix}", config, seeds, (*common, "model.ordered=False"), tiny_overrides, tiny,
                          role="baseline", group="lstm"))


def best_validation(workdir: Path) -> dict | None:
    """The metrics.jsonl validation record of highest accuracy, or None before the first validation."""
    valid = [r for r in metrics_records(workdir) if r.get("split") == "valid"]
    return max(valid, key=lambda r: r["accuracy"]) if valid else None


def validation_so_far(workdir: Path) -> dict:
    """A classification run the budget stopped: its best validation accuracy (%) and step, the test left unscored;
    or a note that it has no validation yet."""
    best = best_validation(workdir)
    if best is None:
        return {"split": "none", "note": "no validation yet"}
    return {"split": "valid", "accuracy": 100.0 * best["accuracy"], "best_step": best["step"],
            "note": "test not scored: the run has not finished"}


def at_paper_scale(recipe, *, description: str, runs, model_reserve_s: float, baseline_reserve_s: float,
                   calibration_steps: int = 200):
    """`recipe` (a CPU-scale recipe) with the paper's own runs (`runs`, tiny -> specs), judged and scored the same
    way: trained one after another, each scored as it finishes (`Recipe.one_run_at_a_time`), keeping
    `model_reserve_s` / `baseline_reserve_s` seconds for scoring a model / baseline run (its --tiny reserves are
    the CPU recipe's)."""
    import dataclasses

    return dataclasses.replace(
        recipe, description=description, runs=runs, scale="paper", one_run_at_a_time=True,
        eval_reserve_s=lambda tiny: recipe.eval_reserve_s(True) if tiny else model_reserve_s,
        baseline_eval_reserve_s=lambda tiny: recipe.reserve_s_of_role("baseline", True) if tiny else baseline_reserve_s,
        calibration_steps=lambda tiny: recipe.calibration_steps(True) if tiny else calibration_steps)
