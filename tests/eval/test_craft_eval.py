"""`tgjax eval craft`: rollout accounting on scripted policies, and the command end to end on a tiny run."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("gymnax")

from tgjax.envs import craft_rules as rules  # noqa: E402
from tgjax.envs.craft import Craft  # noqa: E402
from tgjax.infer.craft import option_subtask_success, rollout  # noqa: E402
from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy  # noqa: E402


def scripted_ocn(action: int, done_bias: float) -> OptionControllerPolicy:
    """Every option always takes `action` (its hidden units saturate at tanh(1) and only `action` has weight)
    and reports done with probability sigmoid(done_bias)."""
    policy = OptionControllerPolicy(CraftPolicyConfig(num_tasks=1, hidden_size=4), rngs=nnx.Rngs(0))
    state = nnx.state(policy, nnx.Param)
    nnx.update(policy, jax.tree.map(jnp.zeros_like, state))
    for bank in (policy.options, policy.controller):
        bank.b_in[...] = jnp.ones_like(bank.b_in[...])
        bank.b_deep[...] = jnp.ones_like(bank.b_deep[...])
    policy.options.w_pi[...] = jnp.zeros_like(policy.options.w_pi[...]).at[..., action].set(100.0)
    policy.options.b_e[...] = jnp.full_like(policy.options.b_e[...], done_bias)
    return policy


def test_a_policy_that_only_says_done_never_succeeds_and_runs_to_the_limit():
    result = rollout(scripted_ocn(rules.DONE, 0.0), Craft(("AC",)), "AC", 0, jax.random.key(0), 16, max_steps=20)
    assert np.all(result.returns == 0) and not result.success.any() and np.all(result.lengths == 20)


def test_an_option_stopped_after_one_step_cannot_finish_a_subtask_it_had_to_walk_to():
    # moving RIGHT once never picks anything up, and the option's done fires (b_e = 50) at the second step
    table = option_subtask_success(scripted_ocn(rules.RIGHT, 50.0), jax.random.key(1), 32, "AC", max_steps=10)
    assert table.shape == (3, 2) and np.all(table == 0)


def test_eval_craft_end_to_end(tmp_path):
    from tgjax.eval.craft import main_craft
    from tgjax.train.config import apply_overrides
    from tgjax.train.loop import train
    from tgjax.train.tasks.craft_bc import default_config

    config = apply_overrides(default_config(), [
        "data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4",
        "evaluation.batch_size=4", "training.num_steps=4", "evaluation.interval_steps=4",
        "checkpointing.interval_steps=4", "logging.tensorboard=false"])
    train(config, tmp_path, quiet=True)
    assert main_craft(["--workdir", str(tmp_path), "--episodes", "8", "--subtasks", "AC"]) == 0
    report = json.loads((tmp_path / "craft_eval.json").read_text())
    assert report["policy"] == "ocn" and report["tasks"] == ["AC", "CD"]
    assert report["demonstrations"]["episodes"] == 4 and 0 <= report["demonstrations"]["nmi"] <= 1
    for task, result in report["rollouts"].items():
        assert 0 <= result["success_rate"] <= 1 and 0 <= result["return"] <= len(task)
    assert np.array(report["option_subtask_success"]["rows"]).shape == (3, 2)
    assert main_craft(["--workdir", str(tmp_path), "--curves-only", "--plot", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert main_craft(["--workdir", str(tmp_path), "--subtasks", "AX"]) == 2
    assert main_craft(["--workdir", str(tmp_path / "nowhere")]) == 2
