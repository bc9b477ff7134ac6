"""benchmarks/craft_hint_start.py: its two phases and its table, on made-up runs (nothing is trained)."""

import json

import pytest

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("craft_hint_start")


def _run(workdir, records):
    """A run folder of validation records (step, nll, nmi or None)."""
    workdir.mkdir(parents=True)
    lines = [json.dumps({"split": "valid", "step": step, "nll": nll, "nll_by_subtask": [nll + 0.1, nll - 0.1],
                         **({} if nmi is None else {"nmi": nmi})}) for step, nll, nmi in records]
    (workdir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_each_side_is_read_where_the_protocol_says_and_judged_over_the_seeds(tool, tmp_path):
    runs, control = tmp_path / "runs", tmp_path / "control"
    for seed, (kept, collapsed) in zip((1, 2, 3), ((0.80, 0.02), (0.70, 0.05), (0.75, 0.01))):
        # the hint ends at step 500 with a low NLL that the likelihood-only phase must not be read at
        _run(runs / f"ocn_hint_seed{seed}", [(250, 0.9, 0.5), (500, 0.40, 0.95), (750, 0.55, 0.9),
                                              (1000, 0.50 + seed / 100, kept), (1250, 0.6, 0.1)])
        _run(control / f"ocn_bc_seed{seed}", [(500, 0.7, 0.3), (1000, 0.62, collapsed)])
        _run(control / f"lstm_bc_seed{seed}", [(1000, 0.50, None)])
    lines = tool.table(runs, control, [1, 2, 3], 500)
    text = "\n".join(lines)
    assert "seed 1 hinted, end of the hint" in text and " 500  0.400  0.950" in text
    assert "seed 2 hinted, best after it      1000  0.520  0.700" in text   # the best after 500, not 500 itself
    assert "NMI hinted, best after it: 0.750 ± 0.050 (3 seeds)" in text
    assert "the options stay specialised (NMI above the control OCN's): in direction" in text
    assert "the likelihood prefers them (NLL below the control OCN's): in direction" in text


def test_the_phases_hint_then_train_on_the_likelihood_alone(tool, tmp_path):
    first = tool.phase_command(2, tmp_path / "w", tmp_path / "demos", 500, 1.0)
    second = tool.phase_command(2, tmp_path / "w", tmp_path / "demos", 3000, 0.0)
    assert "--config.training.subtask_hint_weight=1.0" in first and "--config.training.num_steps=500" in first
    assert "--config.training.subtask_hint_weight=0.0" in second and "--config.training.num_steps=3000" in second
    assert first[first.index("--workdir") + 1] == second[second.index("--workdir") + 1]   # one run, resumed


def test_a_run_without_its_second_phase_is_named(tool, tmp_path):
    _run(tmp_path / "ocn_hint_seed1", [(250, 0.9, 0.5), (500, 0.4, 0.9)])
    with pytest.raises(SystemExit, match=r"no validation after step 500; did the second phase run\?"):
        tool.best_after(tmp_path / "ocn_hint_seed1", 500)
