"""tgjax reproduce's budget: the time a call keeps for scoring, on a simulated clock and trainer.

A recipe that scores each run in the chunk that finishes it (`scored_when_finishing`, the ListOps recipe) keeps a
run's scoring reserve only for a chunk that would finish that run: a call too short to finish anything trains for
its whole budget, a run near its end stops one logging step short unless the rest and its scoring fit, and no call
runs past its budget."""

from __future__ import annotations

import dataclasses

import pytest

from tgjax.reproduce import runner
from tgjax.reproduce.recipes import Comparison, Recipe, RunSpec

NUM_STEPS, ALIGN, STEPS_PER_S, RESERVE_S = 1000, 10, 1.0, 100.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@dataclasses.dataclass
class FakeResult:
    start_step: int
    final_step: int
    stop_reason: str | None


def _recipe(scored_when_finishing: bool) -> Recipe:
    specs = [RunSpec(name=f"run{i}", role="model", config="unused.py", overrides=(), seed=i) for i in range(2)]
    return Recipe(claim_id="fake", description="two simulated runs", runs=lambda tiny: specs,
                  evaluate=lambda *_: {}, comparison=Comparison(model_metric="m", baseline_metric="m", label="m"),
                  eval_reserve_s=lambda tiny: RESERVE_S, calibration_steps=lambda tiny: 10,
                  scored_when_finishing=scored_when_finishing)


@pytest.fixture
def simulated(monkeypatch, tmp_path):
    """(clock, steps reached per run, run a call): each step costs 1/STEPS_PER_S s, a finishing chunk RESERVE_S more."""
    clock = Clock()
    reached: dict[str, int] = {}
    idle_chunks: list[str] = []  # chunks built (a Trainer, in the real runner) with nothing to train

    def train_chunk(spec, workdir, steps, *, may_finish, stream, quiet):
        step = reached.get(spec.name, 0)
        stop = runner.chunk_stop(step, steps, ALIGN, NUM_STEPS, may_finish=may_finish)
        if stop is None:
            idle_chunks.append(spec.name)
            return NUM_STEPS, None
        stop = min(stop, NUM_STEPS)
        clock.now += (stop - step) / STEPS_PER_S + (RESERVE_S if stop == NUM_STEPS else 0.0)
        reached[spec.name] = stop
        return NUM_STEPS, FakeResult(step, stop, "schedule" if stop == NUM_STEPS else "stop_after_step")

    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setattr(runner, "_train_chunk", train_chunk)
    monkeypatch.setattr(runner, "_logging_interval", lambda spec: ALIGN)
    monkeypatch.setattr(runner, "_planned_steps", lambda spec: NUM_STEPS)

    def call(recipe: Recipe, budget_s: float):
        started = clock.now
        state = runner.train_within_budget(recipe, tmp_path, budget_s=budget_s, tiny=False, quiet=True)
        assert not idle_chunks, "a chunk was started with nothing to train short of the end"
        return state, clock.now - started

    return clock, reached, call


def test_a_call_too_short_to_finish_trains_for_its_whole_budget(simulated):
    _, reached, call = simulated
    state, spent = call(_recipe(scored_when_finishing=True), budget_s=300.0)
    assert spent <= 300.0
    # Both runs share the budget less the pack's reserve; chunk ends round down to logging steps.
    assert sum(reached.values()) >= 300.0 - runner.PACK_RESERVE_S - 2 * ALIGN * 3
    assert not any(run.finished for run in state.runs.values())


def test_scoring_after_training_keeps_every_runs_reserve(simulated):
    _, reached, call = simulated
    _, spent = call(_recipe(scored_when_finishing=False), budget_s=300.0)
    assert spent <= 300.0 - 2 * RESERVE_S
    assert sum(reached.values()) <= 300.0 - 2 * RESERVE_S - runner.PACK_RESERVE_S + ALIGN


def test_a_run_near_its_end_finishes_only_when_its_scoring_fits(simulated, tmp_path):
    _, reached, call = simulated
    recipe = _recipe(scored_when_finishing=True)
    state, _ = call(recipe, budget_s=200.0)  # starts both runs and records their length
    for name, run in state.runs.items():  # then both at step 950 of 1,000
        run.step = reached[name] = 950
    state.save(tmp_path)
    # 120 s: each run's share (60 s) is less than its last 50 steps and its scoring (150 s): both stop at 990.
    state, spent = call(recipe, budget_s=120.0)
    assert spent <= 120.0
    assert reached == {"run0": 990, "run1": 990}
    assert not any(run.finished for run in state.runs.values())
    # 400 s: 10 steps and 100 s of scoring each fit: both finish, inside the budget.
    state, spent = call(recipe, budget_s=400.0)
    assert spent <= 400.0
    assert reached == {"run0": NUM_STEPS, "run1": NUM_STEPS}
    assert all(run.finished for run in state.runs.values())


def test_a_work_folder_started_under_another_config_is_refused_naming_the_run(simulated, tmp_path):
    _, _, call = simulated
    call(_recipe(scored_when_finishing=True), budget_s=100.0)
    changed = _recipe(scored_when_finishing=True)
    specs = [dataclasses.replace(spec, overrides=("model.release_switches=false",)) if spec.name == "run1" else spec
             for spec in changed.runs(False)]
    with pytest.raises(runner.StateMismatch, match=r"run run1 was started as unused\.py, but the recipe now trains "
                                                   r"unused\.py model\.release_switches=false"):
        runner.ClaimState.load_or_new(tmp_path, changed, False, specs)
    # The same recipe resumes.
    assert runner.ClaimState.load_or_new(tmp_path, changed, False, changed.runs(False)).runs["run1"].step > 0


def test_sigterm_in_a_chunk_ends_the_call_with_no_further_chunk(simulated, monkeypatch, tmp_path):
    clock, reached, call = simulated
    chunks = []

    def preempted_chunk(spec, workdir, steps, *, may_finish, stream, quiet):
        chunks.append(spec.name)
        clock.now += 40 / STEPS_PER_S
        reached[spec.name] = 40  # the trainer saved where the signal stopped it
        return NUM_STEPS, FakeResult(0, 40, "sigterm")

    monkeypatch.setattr(runner, "_train_chunk", preempted_chunk)
    state, _ = call(_recipe(scored_when_finishing=True), budget_s=1000.0)
    assert chunks == ["run0"] and state.interrupted  # run1 was not started
    assert state.runs["run0"].step == 40 and not state.runs["run0"].finished
    # Saved as it stood; the next call is not marked interrupted.
    again = runner.ClaimState.load_or_new(tmp_path, _recipe(True), False, _recipe(True).runs(False))
    assert again.runs["run0"].step == 40 and not again.interrupted


@pytest.mark.parametrize("text, says", [
    ("{oops", "unreadable (Expecting property name"),
    ('{"claim": "fake", "tiny": false}', 'expected the JSON object {"claim", "tiny", "runs": {...}}'),
    ('[1, 2]', 'expected the JSON object'),
    ('{"claim": "fake", "tiny": false, "runs": {"run0": {"stepz": 3}}}', "a run's entry does not read"),
])
def test_a_damaged_state_file_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / runner.STATE_FILE).write_text(text)
    recipe = _recipe(scored_when_finishing=True)
    with pytest.raises(runner.StateMismatch) as caught:
        runner.ClaimState.load_or_new(tmp_path, recipe, False, recipe.runs(False))
    assert str(caught.value).startswith(f"{tmp_path / runner.STATE_FILE}: ") and says in str(caught.value)
    assert "\n" not in str(caught.value)


def _one_at_a_time(evaluated: list[str]) -> Recipe:
    """Three simulated runs trained one after another; `evaluated` records each scoring."""
    specs = [RunSpec(name=f"run{i}", role="model", config="unused.py", overrides=(), seed=i) for i in range(3)]

    def evaluate(spec, workdir, finished, tiny):
        evaluated.append(spec.name)
        return {"m": float(spec.seed)}

    return Recipe(claim_id="fake", description="three simulated runs, one at a time", runs=lambda tiny: specs,
                  evaluate=evaluate, comparison=Comparison(model_metric="m", baseline_metric="m", label="m"),
                  eval_reserve_s=lambda tiny: RESERVE_S, calibration_steps=lambda tiny: 10, one_run_at_a_time=True)


def test_one_at_a_time_trains_each_run_to_its_end_before_the_next_and_scores_it_once(simulated, tmp_path):
    _, reached, call = simulated
    evaluated: list[str] = []
    recipe = _one_at_a_time(evaluated)
    # 1,500 s: run0's 1,000 steps and its scoring (1,100 s), then run1 for what is left; run2 never starts.
    state, spent = call(recipe, budget_s=1500.0)
    assert spent <= 1500.0
    assert reached["run0"] == NUM_STEPS and 0 < reached["run1"] < NUM_STEPS and "run2" not in reached
    assert evaluated == ["run0"] and state.runs["run0"].scores["m"] == 0.0  # scored after its finishing chunk
    scored = runner.evaluate_runs(recipe, tmp_path, state, tiny=False)
    assert evaluated == ["run0"]  # not again, and the unfinished run1 not at all
    assert [scores.get("m", scores.get("note")) for _, _, scores in scored] == [
        0.0, "not finished: scored when it finishes", "not started"]
    # The kept scores survive the state file, and only the scored run's checkpoints are left out of a pack.
    state = runner.ClaimState.load_or_new(tmp_path, recipe, False, recipe.runs(False))
    assert state.runs["run0"].scores["m"] == 0.0 and state.runs["run1"].scores is None
    assert runner.packed_out(state) == ["runs/run0/checkpoints"]
    # The next call finishes run1 and scores it, then goes on to run2.
    state, _ = call(recipe, budget_s=1500.0)
    assert reached["run1"] == NUM_STEPS and reached["run2"] > 0 and evaluated == ["run0", "run1"]


def test_a_finished_run_scored_after_training_is_scored_once_and_its_reserve_kept_only_then(simulated, tmp_path):
    _, reached, call = simulated
    evaluated: list[str] = []
    recipe = dataclasses.replace(_one_at_a_time(evaluated), one_run_at_a_time=False)
    state, _ = call(recipe, budget_s=4000.0)  # round-robin: all three finish
    assert all(run.finished for run in state.runs.values())
    runner.evaluate_runs(recipe, tmp_path, state, tiny=False)
    runner.evaluate_runs(recipe, tmp_path, state, tiny=False)
    assert sorted(evaluated) == ["run0", "run1", "run2"]  # each scored once
    # With run2 to train again from the start, a call keeps the scoring reserve of run2 alone (100 s of 300).
    state.runs["run2"] = runner.RunProgress()
    state.save(tmp_path)
    reached.clear()
    state, spent = call(recipe, budget_s=300.0)
    assert spent <= 300.0 and 300.0 - RESERVE_S - runner.PACK_RESERVE_S - ALIGN <= reached["run2"] < NUM_STEPS


def test_the_claims_total_takes_a_runs_own_count_once_known_and_its_configs_plan_before():
    specs = [RunSpec(name=f"run{i}", role="model", config="unused.py", overrides=(), seed=i) for i in range(3)]
    runs = {"run0": runner.RunProgress(step=500, num_steps=1200),  # set up: its task's count (epochs, say)
            "run1": runner.RunProgress(), "run2": runner.RunProgress()}  # not started
    planned = {"run0": 1000, "run1": 2000, "run2": 0}  # run2 plans by epochs: unknown until set up
    assert runner.claim_total(specs, runs, lambda spec: planned[spec.name]) == 1200 + 2000 + 0
