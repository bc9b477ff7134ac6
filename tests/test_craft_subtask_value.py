"""benchmarks/craft_subtask_value.py: the Bayes generalist's regret, worked by hand and bounded over random
likelihoods, and the probing bot on real demonstrations (it must not change them)."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def tool():
    yield from load_benchmark("craft_subtask_value")


def test_regret_worked_by_hand(tool):
    # Three tasks over kinds 1, 2, 3; the truth is task 0 = (1, 2). Step 1 fits kinds 1 and 2 equally and kind 3
    # half as well: mixture (0.5 + 0.5 + 0.25) / 3, regret log(0.5 / (1.25 / 3)) = log 1.2, posterior (.4, .4, .2).
    # Step 2 only fits kind 1: regret log(1 / 0.4) = log 2.5. The episode's total is log 1.2 + log 2.5 = log 3.
    # After the first subtask (stage 1) only task 0 is left: no regret, and the generalist is sure from the start.
    tasks = [(1, 2), (2, 3), (3, 1)]
    probes = [(0, {1: 0.5, 2: 0.5, 3: 0.25}, True), (0, {1: 1.0, 2: 0.0, 3: 0.0}, False),
              (1, {1: 0.0, 2: 1.0, 3: 0.0}, False)]
    regrets, posteriors = tool.episode_regrets(probes, tasks, 0)
    assert regrets == pytest.approx([math.log(1.2), math.log(2.5), 0.0])
    assert posteriors == pytest.approx([1 / 3, 0.4, 1.0])
    stages = [stage for stage, _, _ in probes]
    assert tool.steps_to_certainty(stages, posteriors, 0) is None   # sure only after the subtask's last action
    assert tool.steps_to_certainty(stages, posteriors, 1) == 0


def test_certainty_counts_the_steps_before_the_posterior_reaches_the_level(tool):
    stages = [0, 0, 0, 0, 1]
    assert tool.steps_to_certainty(stages, [0.3, 0.6, 0.995, 1.0, 1.0], 0) == 2
    assert tool.steps_to_certainty(stages, [0.3, 0.6, 0.98, 0.989, 0.5], 1) is None


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_an_episodes_regret_never_exceeds_log_of_the_number_of_tasks(tool, data):
    # The mixture gives the true task at least 1/|tasks| of its own likelihood, so the summed regret is at most
    # log |tasks|, and exactly that once every other task has been ruled out.
    num_kinds = data.draw(st.integers(2, 4))
    tasks = data.draw(st.lists(st.tuples(*(st.integers(0, num_kinds - 1),) * 2), min_size=2, max_size=6,
                               unique=True))
    true_task = data.draw(st.integers(0, len(tasks) - 1))
    probes = []
    for stage in (0, 1):
        for _ in range(data.draw(st.integers(1, 5))):
            likelihood = {k: data.draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])) for k in range(num_kinds)}
            likelihood[tasks[true_task][stage]] = data.draw(st.sampled_from([0.05, 0.3, 1.0]))
            probes.append((stage, likelihood, False))
    regrets, _ = tool.episode_regrets(probes, tasks, true_task)
    assert sum(regrets) <= math.log(len(tasks)) + 1e-9
    # a last step only the true task's kind explains leaves it alone: the bound is met
    final_kind = tasks[true_task][1]
    alone = {k: float(k == final_kind) for k in range(num_kinds)}
    rivals = [t for i, t in enumerate(tasks) if i != true_task and t[1] == final_kind]
    regrets, posteriors = tool.episode_regrets(probes + [(1, alone, False)], tasks, true_task)
    if not rivals:
        assert sum(regrets) == pytest.approx(math.log(len(tasks)))


@pytest.fixture(scope="module")
def probed(tool):
    """Demonstrations of AC made by the plain bot and by the probing bot from the same seed, and the probes."""
    from tgjax.envs import craft_rules as rules
    from tgjax.envs.craft_bot import generate_demos

    candidates = tuple(sorted(rules.parse_task("AC") + rules.parse_task("CD")))
    bots = []

    def factory(subtasks, rng):
        bots.append(tool.SubtaskProbe(subtasks, rng, candidates, 4, np.random.default_rng(99)))
        return bots[-1]

    plain, _ = generate_demos("AC", 6, seed=5, batch_size=8)
    probing, _ = generate_demos("AC", 6, seed=5, batch_size=8, bot_factory=factory)
    return plain, probing, [bot for bot in bots if bot.finished]


def test_the_probe_leaves_the_demonstrations_as_the_plain_bot_makes_them(probed):
    plain, probing, kept = probed
    assert len(kept) == len(plain) == 6
    for index in range(len(plain)):
        for a, b in zip(plain.episode(index), probing.episode(index)):
            np.testing.assert_array_equal(a, b)
    for index, bot in enumerate(kept):   # a probe per action but the final DONE
        assert len(bot.probes) == len(plain.episode(index)[1]) - 1


def test_the_bots_own_route_gives_its_action_probability_one(tool, probed):
    from tgjax.envs import craft_rules as rules

    _, probing, kept = probed
    wood, iron = rules.parse_task("AC")
    for index, bot in enumerate(kept):
        actions = probing.episode(index)[1]
        for (stage, likelihood, explored), action in zip(bot.probes, actions):
            own = (wood, iron)[stage]
            if explored:
                assert 0 < likelihood[own] < 1 and action < 4   # exploring only moves
            else:
                assert likelihood[own] == 1.0
        # in {AC, CD} only AC starts with wood: once it is picked up, nothing is left to infer
        regrets, _ = tool.episode_regrets(bot.probes, [(wood, iron), rules.parse_task("CD")], 0)
        stages = [stage for stage, _, _ in bot.probes]
        assert sum(r for s, r in zip(stages, regrets) if s == 1) == pytest.approx(0.0)
        assert sum(regrets) == pytest.approx(math.log(2))


def _run(workdir, by_subtask):
    workdir.mkdir(parents=True)
    records = [{"split": "valid", "step": 100, "nll": 0.9, "nll_by_subtask": [1.0, 1.0]},
               {"split": "valid", "step": 200, "nll": sum(by_subtask) / 2, "nll_by_subtask": by_subtask}]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_each_seeds_runs_are_set_against_each_other_at_their_best_steps(tool, tmp_path):
    for seed, (ocn, lstm) in zip((1, 2, 3), (([0.7, 0.5], [0.6, 0.45]), ([0.8, 0.5], [0.6, 0.5]),
                                             ([0.6, 0.42], [0.6, 0.4]))):
        _run(tmp_path / f"ocn_bc_seed{seed}", ocn)
        _run(tmp_path / f"lstm_bc_seed{seed}", lstm)
    rows = tool.differences((tmp_path, "ocn_bc"), (tmp_path, "lstm_bc"), [1, 2, 3])
    np.testing.assert_allclose(rows, [[0.1, 0.05], [0.2, 0.0], [0.0, 0.02]], atol=1e-12)
    ideal = {"task_set": "AC,CD,DA", "stages": [{"regret_per_step": 0.137}, {"regret_per_step": 0.0}]}
    text = tool.format_differences("OCN minus LSTM", rows, [1, 2, 3], ideal)
    assert "subtask 1: 0.100 / 0.200 / 0.000 (mean 0.100 ± 0.100 (3 seeds)) against 0.137" in text


def test_the_hidden_task_runs_hide_the_task_and_skip_finished_seeds(tool, tmp_path, monkeypatch):
    # seed 1 has finished its 200 steps; seeds 2 and 3 are trained, on the control's demonstrations
    _run(tmp_path / "hidden" / "lstm_hidden_seed1", [0.5, 0.5])
    issued = []
    monkeypatch.setattr(tool, "run_all", lambda jobs, parallel: issued.extend(jobs))
    tool.train_hidden_task(tmp_path / "hidden", tmp_path / "control", [1, 2, 3], 200, 2)
    assert [workdir.name for _, workdir in issued] == ["lstm_hidden_seed2", "lstm_hidden_seed3"]
    arguments = issued[0][0]
    assert "configs/ocn_craft.py:mid,lstm" in arguments and "--config.model.task_input=False" in arguments
    assert f"--config.data.demo_dir={tmp_path / 'control' / 'lstm_bc_seed1' / 'demos'}" in arguments
