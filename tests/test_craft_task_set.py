"""benchmarks/craft_task_set.py: the premise it tests (what follows a subtask in a task set) and its table, read
from made-up finished runs (nothing is trained)."""

import json

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("craft_task_set")


def test_s1_leaves_one_successor_per_subtask_and_all_pairs_two(tool):
    # In {AC, CD, DA} the inventory names the next subtask; in all ordered pairs it does not.
    assert tool.successors("AC,CD,DA") == {"A": {"C"}, "C": {"D"}, "D": {"A"}}
    assert tool.successors("AC,AD,CA,CD,DA,DC") == {"A": {"C", "D"}, "C": {"A", "D"}, "D": {"A", "C"}}
    assert tool.successors("ACD,DA") == {"A": {"C"}, "C": {"D"}, "D": {"A"}}


def _finished_run(workdir, nmis, steps=3000):
    """A run folder whose validations at 1,000-step intervals have NLLs falling then rising (best at the middle)."""
    workdir.mkdir(parents=True)
    nlls = [0.70, 0.60, 0.65][:len(nmis)]
    lines = [json.dumps({"split": "train", "step": 1, "loss": 1.0})]
    for index, (nll, nmi) in enumerate(zip(nlls, nmis)):
        lines.append(json.dumps({"split": "valid", "step": (index + 1) * steps // len(nmis), "nll": nll, "nmi": nmi,
                                 "f1_tol1": 0.5, "nll_by_subtask": [nll + 0.1, nll - 0.1]}))
    (workdir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_each_run_is_read_at_its_lowest_nll_and_the_sides_are_judged_over_seeds(tool, tmp_path):
    runs, control = tmp_path / "runs", tmp_path / "control"
    for seed, (high, low) in zip((1, 2, 3), ((0.9, 0.1), (0.8, 0.0), (0.95, 0.05))):
        _finished_run(runs / f"ocn_seed{seed}", [0.0, high, 0.2])  # read at the middle step: `high`
        _finished_run(control / f"ocn_bc_seed{seed}", [0.5, low, 0.9])
    tool.main(["--seeds", "1", "2", "3", "--runs", str(runs), "--control", str(control)])
    table = (runs / "table.txt").read_text()
    assert "test: NMI 0.883 ± 0.076 (3 seeds)" in table and "control: NMI 0.050 ± 0.050 (3 seeds)" in table
    assert "A -> C/D" in table and "A -> C," in table
    assert table.splitlines()[-1].startswith("options follow the subtasks more on the set under test: in direction")


def test_a_run_short_of_the_steps_is_refused_not_compared(tool, tmp_path):
    runs, control = tmp_path / "runs", tmp_path / "control"
    for seed in (1, 2, 3):
        _finished_run(runs / f"ocn_seed{seed}", [0.1, 0.2, 0.3])
        _finished_run(control / f"ocn_bc_seed{seed}", [0.1, 0.2, 0.3], steps=1500)
    with pytest.raises(SystemExit, match="ocn_bc_seed1: has not reached step 3000"):
        tool.main(["--seeds", "1", "2", "3", "--runs", str(runs), "--control", str(control)])


def _ppo_run(workdir, heldout, iterations=300):
    workdir.mkdir(parents=True)
    records = [{"split": "valid", "step": step, "return": 0.5, "heldout_return": value}
               for step, value in ((iterations // 2, 0.0), (iterations, heldout))]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_ppo_over_each_seeds_options_is_judged_at_the_last_iteration(tool, tmp_path):
    runs, control = tmp_path / "runs", tmp_path / "control"
    for seed, (ours, theirs) in zip((1, 2, 3), ((0.1, 0.2), (0.2, 0.3), (0.3, 0.7))):
        _finished_run(runs / f"ocn_seed{seed}", [0.1, 0.2, 0.3])
        _finished_run(control / f"ocn_bc_seed{seed}", [0.1, 0.2, 0.3])
        _ppo_run(runs / f"ppo_seed{seed}", ours)
        _ppo_run(control / f"ocn_ppo_seed{seed}", theirs)
    tool.main(["--seeds", "1", "2", "3", "--runs", str(runs), "--control", str(control), "--ppo-iters", "300"])
    lines = (runs / "table.txt").read_text().splitlines()
    assert "test: held-out return 0.200 ± 0.100 (3 seeds)" in lines
    assert "control: held-out return 0.400 ± 0.265 (3 seeds)" in lines
    assert lines[-1].startswith("PPO returns more over the options of the set under test: not yet")
    with pytest.raises(SystemExit, match="ppo_seed1/metrics.jsonl: no validation at step 400"):
        tool.last_record(runs / "ppo_seed1", 400)  # a run cut short is not compared


def _report(rows, scripted):
    return {"option_subtask_success": {"subtasks": ["A", "C", "D"], "rows": rows},
            "scripted_controller": {"ACD": {"success_rate": scripted}}}


def test_the_option_table_names_each_subtasks_best_option_and_counts_the_distinct_ones(tool, tmp_path):
    one_each = _report([[0.96, 0.07, 0.03], [0.00, 0.02, 0.95], [0.01, 0.98, 0.01]], 0.9)  # thesis Table 5.2
    generalist = _report([[0.2, 0.1, 0.3], [0.9, 0.8, 0.7], [0.1, 0.2, 0.1]], 0.1)
    assert "best option per subtask 1/3/2 (3 distinct)" in tool.option_table_line("a", one_each)
    assert "best option per subtask 2/2/2 (1 distinct)" in tool.option_table_line("b", generalist)
    runs, control = tmp_path / "runs", tmp_path / "control"
    for seed in (1, 2, 3):
        _finished_run(runs / f"ocn_seed{seed}", [0.1, 0.2, 0.3])
        _finished_run(control / f"ocn_bc_seed{seed}", [0.1, 0.2, 0.3])
        (runs / "eval").mkdir(exist_ok=True)
        (runs / "eval" / f"test_seed{seed}.json").write_text(json.dumps(one_each))
        (runs / "eval" / f"control_seed{seed}.json").write_text(json.dumps(_report(generalist[
            "option_subtask_success"]["rows"], 0.1 * seed)))
    tool.main(["--seeds", "1", "2", "3", "--runs", str(runs), "--control", str(control), "--eval"])
    table = (runs / "table.txt").read_text()
    assert "control: ACD under the scripted controller, success 0.200 ± 0.100 (3 seeds)" in table
    assert table.count("(3 distinct)") == 3 and table.count("(1 distinct)") == 3
