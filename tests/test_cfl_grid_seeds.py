"""benchmarks/cfl_grid_seeds.py: cells read from grid runs, the length ranges, the best-by-validation pick and the
claims' verdicts over seeds; benchmarks/cfl_grid.py's one-run table of the same claims; on made-up grids (nothing is
trained)."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def seeds_tool():
    yield from load_benchmark("cfl_grid_seeds")


@pytest.fixture(scope="module")
def grid_tool():
    yield from load_benchmark("cfl_grid")


def _result(within: float, past: float, valid: float, seconds: float) -> dict:
    """A results.json with two bins at or under length 80 and one past it (symbol counts 100, 300, 200)."""
    bins = {"60": {"cross_entropy_difference": within + 0.2, "num_symbols": 100, "max_length": 60},
            "80": {"cross_entropy_difference": within - 0.2 / 3, "num_symbols": 300, "max_length": 80},
            "90": {"cross_entropy_difference": past, "num_symbols": 200, "max_length": 90}}
    return {"test": {"cross_entropy_difference": (within * 400 + past * 200) / 600, "bins": bins},
            "valid_cross_entropy_difference": valid, "epochs_run": 12, "num_parameters": 1000,
            "trials": [{"seconds": seconds, "stopped_by_budget": False}]}


def _grid(tmp_path: Path, seed: int, cells: dict, name: str | None = None) -> Path:
    """A cfl_grid.json of `cells` {(task, model): (within, past, valid, seconds)}; every other cell absent."""
    jobs = [{"task": task, "model": model, "result": _result(*numbers)} for (task, model), numbers in cells.items()]
    path = tmp_path / (name or f"seed{seed}") / "cfl_grid.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"args": {"seed": seed}, "scale": "made up", "jobs": jobs}))
    return path.parent


def test_a_cells_length_ranges_are_symbol_weighted_over_the_bins(seeds_tool, tmp_path):
    seed = seeds_tool.seed_of_grid(_grid(tmp_path, 7, {("dyck", "tf"): (0.3, 0.5, 0.25, 90.0)}))
    cell = seed["cells"]["dyck"]["tf"]
    # (0.5 * 100 + (0.3 - 0.2/3) * 300) / 400 = 0.3
    assert seed["seed"] == 7 and cell["within"] == pytest.approx(0.3) and cell["past"] == pytest.approx(0.5)
    assert cell["test"] == pytest.approx((0.3 * 400 + 0.5 * 200) / 600) and cell["valid"] == 0.25
    assert cell["seconds"] == 90.0 and cell["by_length"]["90"] == 0.5


def test_claims_are_judged_by_the_ledgers_rule_and_the_best_trial_by_validation(seeds_tool, tmp_path):
    rng = np.random.default_rng(0)
    grids = []
    for seed in (1, 2, 3):
        noise = rng.normal(0.0, 0.005, size=3)
        grids.append(_grid(tmp_path, seed, {
            # Tf+Nd far below Tf on the Hardest CFL (0.10 vs 0.20, sd ~0.005): in direction; long trials (3 seeds do)
            ("hardest_cfl", "tf"): (0.20 + noise[0], 0.25, 0.30 - 0.01 * seed, 600.0),
            ("hardest_cfl", "tf_nd"): (0.10 + noise[1], 0.12, 0.10, 900.0),
            # Tf+Sup above Tf on Dyck by 0.1: contradicted; but both short trials need 5 seeds, so "not yet"
            ("dyck", "tf"): (0.10 + noise[2], 0.10, 0.2, 90.0),
            ("dyck", "tf_sup"): (0.20 + noise[2], 0.20, 0.2, 90.0),
            # Tf+Nd against Tf+Sup on the Hardest CFL within the spread: not yet
            ("hardest_cfl", "tf_sup"): (0.10 + (0.05 if seed == 1 else -0.05), 0.12, 0.2, 900.0),
        }))
    seeds = seeds_tool.read_seeds(grids, [])
    within = ("hardest_cfl", "tf_nd", "tf", "within")
    assert seeds_tool.judge_comparison(seeds, within)[0] == "in direction"
    assert seeds_tool.judge_comparison(seeds, ("hardest_cfl", "tf", "tf_nd", "within"))[0] == "contradicted"
    assert seeds_tool.judge_comparison(seeds, ("dyck", "tf_sup", "tf", "test"))[0] == "not yet"  # 3 < 5 seeds
    assert seeds_tool.judge_comparison(seeds, ("hardest_cfl", "tf_nd", "tf_sup", "within"))[0] == "not yet"
    assert seeds_tool.claim_verdict(["in direction", "not yet"]) == "not yet"
    assert seeds_tool.claim_verdict(["in direction", "contradicted"]) == "contradicted"
    assert seeds_tool.claim_verdict(["in direction", "in direction"]) == "in direction"
    # Tf's validation Δ falls with the seed (0.29, 0.28, 0.27): seed 3's trial is the one tested
    cell, seed, trials = seeds_tool.best_by_validation(seeds, "hardest_cfl", "tf")
    assert (seed, trials) == (3, 3) and cell is seeds[2]["cells"]["hardest_cfl"]["tf"]
    # Without seed 3's validation of Tf+Sup, every model of the task is chosen from seeds 1 and 2 only
    seeds[2]["cells"]["hardest_cfl"]["tf_sup"]["valid"] = None
    cell, seed, trials = seeds_tool.best_by_validation(seeds, "hardest_cfl", "tf")
    assert (seed, trials) == (2, 2) and cell is seeds[1]["cells"]["hardest_cfl"]["tf"]
    assert seeds_tool.best_by_validation(seeds, "dyck", "tf") is None  # no Tf+Nd on Dyck
    seeds[2]["cells"]["hardest_cfl"]["tf_sup"]["valid"] = 0.2
    text = seeds_tool.format_tables(seeds)
    claim_4 = next(line for line in text.splitlines() if line.startswith("| 4 |"))
    assert claim_4.endswith("| not yet |") and "in direction" in claim_4  # one part holds, the other is within
    assert "Parameters on the Hardest CFL: Tf 1,000, Tf+Sup 1,000, Tf+Nd 1,000" in text
    rise = seeds_tool.values(seeds, "hardest_cfl", "tf_nd", "rise")
    np.testing.assert_allclose(rise, [0.12 - c for c in seeds_tool.values(seeds, "hardest_cfl", "tf_nd", "within")])


def test_a_seed_given_twice_is_refused_and_a_record_reads_back(seeds_tool, tmp_path):
    grid = _grid(tmp_path, 4, {("dyck", "tf"): (0.3, 0.5, 0.25, 90.0)})
    out = tmp_path / "out"
    assert seeds_tool.main(["--grid", str(grid), "--out", str(out)]) == 0
    record = out / "cfl_seeds_cells.json"
    assert seeds_tool.read_seeds([], [record]) == seeds_tool.read_seeds([grid], [])
    with pytest.raises(SystemExit, match=r"seed\(s\) \[4\] given more than once"):
        seeds_tool.read_seeds([grid], [record])


def test_a_missing_or_malformed_input_stops_with_one_line_naming_it(seeds_tool, tmp_path):
    unfinished = tmp_path / "unfinished"  # a cfl_grid.py --out folder before the run has written its JSON
    unfinished.mkdir()
    with pytest.raises(SystemExit, match=rf"^{unfinished}/cfl_grid.json: no such file; expected a finished "):
        seeds_tool.main(["--grid", str(unfinished), "--out", str(tmp_path / "out")])
    broken = tmp_path / "cells.json"
    broken.write_text('{"seeds": [\n')
    with pytest.raises(SystemExit, match=rf"^{broken}:2:1: invalid JSON \(Expecting value\); expected a record"):
        seeds_tool.main(["--cells", str(broken), "--out", str(tmp_path / "out")])
    broken.write_text('{"cells": {}}')
    with pytest.raises(SystemExit, match=rf"^{broken}: no 'seeds' in it; expected a record"):
        seeds_tool.main(["--cells", str(broken), "--out", str(tmp_path / "out")])


def test_a_rerun_replaces_its_seeds_cells_and_keeps_the_old_ones(seeds_tool, tmp_path):
    first = _grid(tmp_path, 1, {("dyck", "tf"): (0.3, 0.5, 0.25, 90.0), ("dyck", "tf_nd"): (0.4, 0.6, 0.35, 900.0)})
    rerun = _grid(tmp_path, 1, {("dyck", "tf_nd"): (0.1, 0.2, 0.05, 1500.0),
                                ("hardest_cfl", "tf_nd"): (0.15, 0.3, 0.1, 1200.0)}, name="rerun")
    out = tmp_path / "out"
    assert seeds_tool.main(["--grid", str(first), "--rerun", str(rerun), "--out", str(out)]) == 0
    (seed,) = json.loads((out / "cfl_seeds_cells.json").read_text())["seeds"]
    assert seed["cells"]["dyck"]["tf_nd"]["within"] == pytest.approx(0.1)  # the rerun's
    assert seed["cells"]["dyck"]["tf"]["within"] == pytest.approx(0.3)  # untouched
    kept = seed["replaced"]["dyck"]["tf_nd"]
    assert kept["within"] == pytest.approx(0.4) and kept["replaced_by"].endswith("rerun/cfl_grid.json")
    assert list(seed["replaced"]) == ["dyck"] and list(seed["replaced"]["dyck"]) == ["tf_nd"]
    # A cell the seed lacked is added, and its source named: nothing joins the record without trace.
    assert seed["cells"]["hardest_cfl"]["tf_nd"]["within"] == pytest.approx(0.15)
    assert seed["added"] == {"hardest_cfl": {"tf_nd": seed["replaced"]["dyck"]["tf_nd"]["replaced_by"]}}
    # The epochs line reads each cell's trials: the capped trial is gone with the rerun.
    capped = seeds_tool.read_seeds([first], [])
    capped[0]["cells"]["dyck"]["tf_nd"].update(epochs=7, stopped_by_budget=True)
    assert seeds_tool.epochs_text(capped, "dyck", "tf_nd") == "7 (1 of 1 capped)"
    assert seeds_tool.epochs_text([seed, {"seed": 2, "cells": {"dyck": {"tf_nd": {"epochs": 9}}}}], "dyck",
                                  "tf_nd") == "9–12"
    assert seeds_tool.epochs_text([seed], "hardest_cfl", "tf") == "—"
    with pytest.raises(SystemExit, match="a rerun of seed 2, which no --grid or --cells gives"):
        seeds_tool.apply_reruns(seeds_tool.read_seeds([first], []), [_grid(tmp_path, 2, {}, name="other")])


def test_one_runs_table_states_each_task_claims_and_whether_this_trial_orders_so(grid_tool):
    results = {  # (within, past): Tf+Nd lowest within; past 80 on Dyck it rises by 0.3, Tf by 0.05
        ("dyck", "tf"): _result(0.20, 0.25, 0.2, 90.0), ("dyck", "tf_sup"): _result(0.10, 0.12, 0.1, 90.0),
        ("dyck", "tf_nd"): _result(0.05, 0.35, 0.1, 400.0),
        ("hardest_cfl", "tf"): _result(0.20, 0.22, 0.2, 90.0), ("hardest_cfl", "tf_sup"): _result(0.15, 0.1, 0.2, 90.0),
        ("hardest_cfl", "tf_nd"): _result(0.12, 0.3, 0.1, 900.0)}
    for result in results.values():
        result["epochs_run"] = 12
    args = grid_tool.argparse.Namespace(seed=1, lr=0.005, train_size=10, valid_size=5, epochs=12, budget_s=60.0,
                                        test_per_length=1)
    lines = grid_tool.format_table(results, args).splitlines()
    dyck = next(line for line in lines if line.startswith("| Dyck |"))
    hardest = next(line for line in lines if line.startswith("| Hardest CFL |"))
    wwr = next(line for line in lines if line.startswith("| wwᴿ |"))
    assert dyck.endswith("| Tf+Sup < Tf: yes; Tf+Nd rises more past 80 than Tf: yes |")
    # whole range: Tf 0.207, Tf+Sup 0.133, Tf+Nd 0.18 (below Tf only); within: 0.12 against 0.20 and 0.15
    assert hardest.endswith("| Tf+Nd < Tf, Tf+Sup: no; Tf+Nd < Tf, Tf+Sup (≤ 80): yes |")
    assert "Tf+Nd < Tf, Tf+Sup: (missing runs)" in wwr and "Tf+Sup < Tf: (missing runs)" in wwr
