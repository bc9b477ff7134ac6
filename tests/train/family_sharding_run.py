"""Run in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=8 (set before JAX starts).

    python -m tests.train.family_sharding_run WORKDIR FAMILY[:LAYOUT,...] [FAMILY[:LAYOUT,...] ...]

Trains each family's test-sized config for a few steps on a 1x1 mesh and on
a data=4 x model=2 mesh (LAYOUTs "1x1", "4x2": only those, when given), and
prints one JSON line:
{family: {layout: {"losses": [...], "split": [names of parameters split over "model"],
"moments_split": n}}}, read off the arrays the trainer actually holds after the last step
("moments_split": optimiser-state leaves split over "model").
"""

import json
import sys
from pathlib import Path

import jax
import numpy as np

from tgjax.train.config import apply_overrides, load_config
from tgjax.train.loop import train

STEPS = 3
# The runs stop after STEPS of RUN_STEPS (`stop_after_step`): no validation at the end (interval 100) to compile.
RUN_STEPS = STEPS + 1
COMMON = ["logging.interval_steps=1", "logging.tensorboard=false", "checkpointing.interval_steps=100",
          "checkpointing.async_save=false"]


def _config(family: str, workdir: Path):
    """(config, task or None) of `family` at test size; every batch size divisible by the data axis (4)."""
    if family == "mlm":
        return load_config("configs/udgn_tiny.py", [
            "model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
            "model.parser_hidden=8", "data.num_train_sentences=40", "data.num_valid_sentences=8",
            "training.token_budget=128", "training.length_bucket=32", "evaluation.interval_steps=100",
            "evaluation.runs=1", f"training.num_steps={RUN_STEPS}", *COMMON]), None
    if family == "onlstm_lm":
        return load_config("configs/onlstm_tiny.py", [
            "model.embedding_size=16", "model.hidden_size=16", "model.num_layers=2", "model.chunk_size=4",
            "data.num_train_sentences=40", "data.num_valid_sentences=8", "training.batch_size=4",
            "training.bptt=8", "training.min_seq_len=2", "training.length_bucket=16", "evaluation.batch_size=4",
            "evaluation.bptt=16", *COMMON]), None
    if family == "pushdown_lm":  # the pinned run's (tests/train/loss_pins.py): its first losses are the 1x1 run's
        from tests.train.loss_pins import family_config

        return family_config("pushdown_lm", workdir), None
    if family == "classification":
        from tests.train.test_classification_task import write_toy_logic

        logic_dir = write_toy_logic(workdir / "logic")
        return load_config("configs/om_logic.py", [
            "model.embedding_size=16", "model.slot_size=16", "model.mlp_hidden_size=16", "model.n_slots=4",
            "model.test_n_slots=4", "model.embedding_dropout=0.0", "model.output_dropout=0.0",
            "model.attention_dropout=0.0", "model.cell_dropout=0.0", "training.batch_size=8",
            f"training.num_steps={RUN_STEPS}", "evaluation.batch_size=8", "evaluation.interval_steps=100",
            f"data.logic_dir={logic_dir}", *COMMON]), None
    if family == "craft_bc":
        from tgjax.train.tasks.craft_bc import default_config

        return apply_overrides(default_config(), [
            "data.tasks=AC,CD", "data.num_demos=8", "model.hidden_size=8", "training.batch_size=4",
            "evaluation.batch_size=4", f"training.num_steps={RUN_STEPS}", "evaluation.interval_steps=100",
            f"data.demo_dir={workdir / 'demos'}", *COMMON]), None
    if family == "cfl":
        from tgjax.train.tasks.cfl import CFLTask

        config = load_config("configs/stack_cfl.py:marked_reversal,tf_sup", [
            "training.epochs=1", "data.train_size=24", "data.valid_size=8", "data.length_bucket=88",
            "training.batch_size=8", "evaluation.batch_size=8", "logging.interval_steps=1"])
        return config, CFLTask(config, trial=0)
    if family == "stack_lm":  # Tf+Sup on words, dropout on (the step's key matters)
        return load_config("configs/stack_lm_tiny.py", [
            "model.num_layers=1", "model.d_model=16", "model.num_heads=2", "model.feedforward_size=32",
            "model.stack_embedding_size=8", "data.num_train_sentences=40", "data.num_valid_sentences=8",
            "training.batch_size=8", "training.length_bucket=32", "evaluation.batch_size=8",
            f"training.num_steps={RUN_STEPS}", "evaluation.interval_steps=100", *COMMON]), None
    if family in ("ppo_actions", "ppo_options"):  # PPO fine-tuning of a 4-step behaviour-cloning run
        from tgjax.train.tasks import craft_bc, ppo_actions, ppo_options

        bc = workdir / "bc"
        if not (bc / "checkpoints").is_dir():  # once for both layouts, on one device
            kind = "lstm" if family == "ppo_actions" else "ocn"  # a flat policy to fine-tune, or options to control
            train(apply_overrides(craft_bc.default_config(), [
                f"model.kind={kind}", "data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8",
                "training.batch_size=4", "evaluation.batch_size=4", "training.num_steps=4",
                "evaluation.interval_steps=4", "checkpointing.interval_steps=4", "logging.tensorboard=false",
                "checkpointing.async_save=false", f"data.demo_dir={workdir / 'demos'}"]), bc,
                  devices=jax.devices()[:1], quiet=True)
        module, key = (ppo_actions, "policy_workdir") if family == "ppo_actions" else (ppo_options, "options_workdir")
        # rl.num_envs 8: the environments split over the data axis (4), two minibatches of 4
        return apply_overrides(module.default_config(), [
            f"rl.{key}={bc}", "rl.task=ACD", "rl.num_envs=8", "rl.rollout_steps=8", "rl.num_minibatches=2",
            "rl.num_epochs=2", "rl.max_steps=16", "evaluation.episodes=4", "evaluation.interval_steps=100",
            f"training.num_steps={RUN_STEPS}", *COMMON]), None
    raise SystemExit(f"unknown family {family!r}")


def _split_over_model(tree) -> list[str]:
    """Paths of the leaves of `tree` whose sharding splits a dimension over "model"."""
    paths = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        spec = getattr(getattr(leaf, "sharding", None), "spec", ())
        if any(axis == "model" or (isinstance(axis, tuple) and "model" in axis) for axis in spec):
            paths.append(jax.tree_util.keystr(path))
    return paths


def run(family: str, workdir: Path, layouts: tuple[str, ...] = ("1x1", "4x2")) -> dict:
    out = {}
    for layout in layouts:
        data, model = (int(n) for n in layout.split("x"))
        config, task = _config(family, workdir)
        config.mesh.data, config.mesh.model = data, model
        seen = {}

        def record(step, state, metrics):
            seen["split"] = _split_over_model(state.params)
            seen["moments_split"] = len(_split_over_model(getattr(state, "opt_state", ())))

        result = train(config, workdir / layout, task=task, devices=jax.devices()[: data * model], quiet=True,
                       callback=record, stop_after_step=STEPS)
        losses = [float(result.losses[s]) for s in sorted(result.losses)][:STEPS]
        out[layout] = {"losses": losses, **seen}
        assert np.all(np.isfinite(losses)), (family, layout, losses)
    return out


def main(workdir: str, families: list[str]) -> None:
    out = {}
    for spec in families:
        family, _, layouts = spec.partition(":")
        out[family] = run(family, Path(workdir) / family, *([tuple(layouts.split(","))] if layouts else []))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
