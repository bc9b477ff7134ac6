"""`tgjax eval craft`: rollout accounting on scripted policies, and the command end to end on a tiny run."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tests.needs import skip_module_without  # noqa: E402

skip_module_without("gymnax")

from tgjax.envs import craft_rules as rules  # noqa: E402
from tgjax.envs.craft import Craft  # noqa: E402
from tgjax.infer.craft import option_subtask_success, rollout, scripted_controller_rollout  # noqa: E402
from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy  # noqa: E402


def scripted_ocn(action: int, done_bias: float, uniform: tuple[int, ...] = ()) -> OptionControllerPolicy:
    """Every option always takes `action` (its hidden units saturate at tanh(1) and only `action` has weight), or
    acts uniformly at random if listed in `uniform` (no action weight), and reports done with probability
    sigmoid(done_bias). Its parameters are written in NumPy (no operation compiled to build it)."""
    config = CraftPolicyConfig(num_tasks=1, hidden_size=4)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: OptionControllerPolicy(config, rngs=nnx.Rngs(0))))
    params = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), nnx.to_pure_dict(state))
    for bank in ("options", "controller"):
        params[bank]["b_in"][...] = 1.0
        params[bank]["b_deep"][...] = 1.0
    params["options"]["w_pi"][..., action] = 100.0
    params["options"]["w_pi"][list(uniform)] = 0.0
    params["options"]["b_e"][...] = done_bias
    nnx.replace_by_pure_dict(state, jax.tree.map(jnp.asarray, params))
    return nnx.merge(graphdef, state)


def test_a_policy_that_only_says_done_never_succeeds_and_runs_to_the_limit():
    result = rollout(scripted_ocn(rules.DONE, 0.0), Craft(("AC",)), "AC", 0, jax.random.key(0), 16, max_steps=20)
    assert np.all(result.returns == 0) and not result.success.any() and np.all(result.lengths == 20)


def test_every_task_and_policy_of_one_structure_runs_one_compiled_program():
    from tgjax.infer.craft import _sampled_episodes

    before = _sampled_episodes._cache_size()
    for task_id, task in enumerate(("AC", "CA")):
        for action in (rules.DONE, rules.USE):  # two policies: different parameters, one structure
            rollout(scripted_ocn(action, 0.0), Craft(("AC", "CA")), task, 0, jax.random.key(task_id), 8, max_steps=6)
    assert _sampled_episodes._cache_size() == before + 1


def test_an_option_stopped_after_one_step_cannot_finish_a_subtask_it_had_to_walk_to():
    # moving RIGHT once never picks anything up, and the option's done fires (b_e = 50) at the second step
    table = option_subtask_success(scripted_ocn(rules.RIGHT, 50.0), jax.random.key(1), 32, "AC", max_steps=10)
    assert table.shape == (3, 2) and np.all(table == 0)


def test_an_option_chosen_again_at_each_done_acts_as_if_it_never_said_done():
    # uniformly random actions whatever the state (no policy weights): a done that fires at every step changes
    # nothing when the option is chosen again, and ends every run after its first step when it stops it
    def table(done_bias, on_done):
        policy = scripted_ocn(rules.USE, done_bias, uniform=(0, 1, 2))
        return option_subtask_success(policy, jax.random.key(3), 32, "AD", max_steps=32, on_done=on_done)

    never = table(-50.0, "reselect")
    assert never.min() > 0  # a random walk with USE finds a lone wood or grass within 32 steps now and then
    np.testing.assert_array_equal(table(50.0, "reselect"), never)
    np.testing.assert_array_equal(table(-50.0, "stop"), never)
    assert np.all(table(50.0, "stop") < never)


def test_a_scripted_controller_on_one_subtask_is_the_option_table_cell():
    # two implementations of "the option chosen again whenever its done fires", on an untrained OCN whose
    # options act and say done at random: on a one-subtask task they agree episode by episode
    config = CraftPolicyConfig(num_tasks=1, hidden_size=8)
    policy = nnx.jit(lambda: OptionControllerPolicy(config, rngs=nnx.Rngs(5)))()  # one program, not op by op
    policy.options.b_e[...] = jnp.full_like(policy.options.b_e[...], -1.0)  # done fires about a quarter of steps
    key = jax.random.key(7)
    table = option_subtask_success(policy, key, 64, "A", max_steps=40)
    for option in range(3):
        cell_key = jax.random.fold_in(key, option * 100)  # the table's key for (option, first subtask)
        result = scripted_controller_rollout(policy, Craft(("A",)), "A", {"A": option}, cell_key, 64, max_steps=40)
        assert result.success.mean() == table[option, 0]
    assert len(set(table[:, 0])) > 1  # the options differ, so a wrong option would show


def test_a_scripted_controller_switches_options_only_when_done_fires():
    # option 0 only ever says DONE (a no-op), option 1 acts at random. On AC with C given to option 0, an option
    # whose done fires at every step hands over after wood and no episode finishes; one whose done never fires
    # keeps running option 1 (Algorithm 4 asks the controller only at done), which finishes the same episodes as
    # giving C option 1
    env, key = Craft(("AC",)), jax.random.key(22)  # 2 of this key's 64 random episodes get wood, then iron

    def returns(done_bias, option_of_subtask):
        policy = scripted_ocn(rules.DONE, done_bias, uniform=(1,))
        return scripted_controller_rollout(policy, env, "AC", option_of_subtask, key, 64).returns

    assert np.all(returns(50.0, {"A": 0, "C": 1}) == 0)
    assert returns(50.0, {"A": 1, "C": 0}).max() == 1 and returns(50.0, {"A": 1, "C": 1}).max() == 2
    never = returns(-50.0, {"A": 1, "C": 0})
    np.testing.assert_array_equal(never, returns(-50.0, {"A": 1, "C": 1}))
    assert never.max() == 2
    with pytest.raises(ValueError, match="no option given for subtask"):
        scripted_controller_rollout(scripted_ocn(rules.DONE, 0.0), env, "AC", {"A": 1}, key, 4)


def train_craft_bc(workdir, *overrides) -> None:
    """A tiny craft_bc run (OCN, 3 options unless overridden, 4 steps on 10 demonstrations a task) in `workdir`."""
    from tgjax.train.config import apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks.craft_bc import default_config

    config = apply_overrides(default_config(), [
        "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4", "evaluation.batch_size=4",
        "training.num_steps=4", "evaluation.interval_steps=4", "checkpointing.interval_steps=4",
        "logging.tensorboard=false", *overrides])
    train(config, workdir, quiet=True)


def eval_craft_of_one_run(workdir, tasks: list[str]) -> dict:
    """`tgjax eval craft` of a craft_bc run on `tasks` end to end, its report checked; the report."""
    from tgjax.eval.craft import main_craft, plot_curves

    assert main_craft(["--workdir", str(workdir), "--episodes", "8", "--subtasks", "AC",
                       "--controller-tasks", "CA"]) == 0
    report = json.loads((workdir / "craft_eval.json").read_text())
    assert report["policy"] == "ocn" and report["tasks"] == tasks
    assert report["demonstrations"]["episodes"] == 2 * len(tasks) and 0 <= report["demonstrations"]["nmi"] <= 1
    by_position = report["demonstrations"]["nll_by_subtask"]       # two subtasks a task, then the DONE row
    assert len(by_position) == 2 and all(v > 0 for v in by_position)
    # the thesis' actions (the default): the final DONE row is read but no target, so it has no NLL
    assert report["demonstrations"]["nll_after_subtasks"] is None
    assert list(report["rollouts"]) == tasks
    for task, result in report["rollouts"].items():
        assert 0 <= result["success_rate"] <= 1 and 0 <= result["return"] <= len(task)
    assert np.array(report["option_subtask_success"]["rows"]).shape == (3, 2)
    subtasks = sorted(set("".join(tasks)))
    usage = np.array(report["option_usage"]["rows"])            # options x the subtasks of the tasks
    assert report["option_usage"]["subtasks"] == subtasks and usage.shape == (3, len(subtasks))
    np.testing.assert_allclose(usage.sum(axis=0), 1.0, atol=1e-3)
    assert report["option_subtask_success"]["on_done"] == "reselect"
    assert np.array(report["option_subtask_success_until_done"]["rows"]).shape == (3, 2)
    assert list(report["scripted_controller"]) == ["CA"]
    assert 0 <= report["scripted_controller"]["CA"]["return"] <= 2
    assert main_craft(["--workdir", str(workdir), "--curves-only", "--plot", str(workdir / "curves.png")]) == 0
    assert (workdir / "curves.png").stat().st_size > 0
    # the run's last validation NLL (the trainer's, at step 4) is the held-out NLL that eval craft scored on the
    # same episodes
    drawn = plot_curves(workdir, workdir / "again.png")
    assert "return" not in drawn and [step for step, _ in drawn["nll"][str(workdir)]] == [4]
    assert drawn["nll"][str(workdir)][-1][1] == pytest.approx(report["demonstrations"]["nll"], rel=1e-5)
    assert main_craft(["--workdir", str(workdir), "--subtasks", "AX"]) == 2
    assert main_craft(["--workdir", str(workdir), "--subtasks", "AC", "--controller-tasks", "ACD"]) == 2
    assert main_craft(["--workdir", str(workdir / "nowhere")]) == 2
    return report


def eval_craft_of_a_pool(first, second, report: dict, options: list[int]) -> None:
    """`tgjax eval craft --workdir FIRST,SECOND` (setting S2: the runs' options pooled), checked against the
    report of FIRST alone; `options`: each run's number of options."""
    from tgjax.eval.craft import main_craft

    pool = f"{first},{second}"
    assert main_craft(["--workdir", pool, "--episodes", "8", "--subtasks", "AC", "--controller-tasks", "CA"]) == 0
    pooled = json.loads((first / "craft_pool_eval.json").read_text())
    assert pooled["options_per_run"] == options and pooled["steps"] == [4, 4]
    rows = np.array(pooled["option_subtask_success"]["rows"])
    assert rows.shape == (sum(options), 2)
    # the first run's options come first, unchanged: their rows are the run's own table (same keys, same cells)
    np.testing.assert_array_equal(rows[:options[0]], np.array(report["option_subtask_success"]["rows"]))
    assert all(0 <= i < sum(options) for i in pooled["scripted_controller"]["CA"]["option_of_subtask"].values())
    assert main_craft(["--workdir", f"{first},{first / 'nowhere'}"]) == 2


def test_eval_craft_end_to_end_on_one_task_and_its_options_pooled_with_themselves(tmp_path):
    """The CI twin of `test_eval_craft_end_to_end` (slow: two runs, on two tasks and on another one): one run on one
    task, its report, and its options pooled with themselves (setting S2's code, 3 + 3 options)."""
    train_craft_bc(tmp_path, "data.tasks=AC")
    report = eval_craft_of_one_run(tmp_path, ["AC"])
    eval_craft_of_a_pool(tmp_path, tmp_path, report, [3, 3])


@pytest.mark.slow
def test_eval_craft_end_to_end(tmp_path):
    from tgjax.eval.craft import plot_curves

    train_craft_bc(tmp_path, "data.tasks=AC,CD")
    report = eval_craft_of_one_run(tmp_path, ["AC", "CD"])

    # setting S2: this run's 3 options pooled with a second run's 2 (another task set)
    second = tmp_path / "second"
    train_craft_bc(second, "data.tasks=CA", "model.num_options=2")
    eval_craft_of_a_pool(tmp_path, second, report, [3, 2])

    # both runs' curves in one figure: the first run's last validation NLL (the trainer's, at step 4) is the
    # held-out NLL that eval craft scored on the same episodes
    pool = f"{tmp_path},{second}"
    drawn = plot_curves(pool, tmp_path / "both.png")
    assert list(drawn["nll"]) == [str(tmp_path), str(second)] and "return" not in drawn
    assert [step for step, _ in drawn["nll"][str(second)]] == [4]
    assert drawn["nll"][str(tmp_path)][-1][1] == pytest.approx(report["demonstrations"]["nll"], rel=1e-5)
