"""The first steps' training losses of families' test-sized configs, pinned before their train steps moved to the
trainer's one step (`tgjax.train.step`): a refactoring must not change a number.

    python -m tests.train.loss_pins record [FAMILY ...]    # rewrites their pins from the current code

Only record when a change of numbers is intended (say so in the commit); tests/train/test_loss_pins.py compares.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import sys
import tempfile
from pathlib import Path

from tgjax.train.config import apply_overrides, load_config
from tgjax.train.loop import train
from tgjax.train.tasks import make_task

PINS = Path(__file__).with_name("loss_pins.json")
STEPS = 12
# A run stops after its first STEPS steps (`stop_after_step`), of STEPS + 1 where the config counts steps: the
# validation at the end of a run, which no pinned loss depends on, is then never compiled (PPO, whose learning rate
# anneals over training.num_steps, keeps STEPS: its task is told it has no validation, `losses`).
COMMON = ["logging.interval_steps=1", "logging.tensorboard=false", "checkpointing.interval_steps=1000",
          "checkpointing.async_save=false", f"training.num_steps={STEPS + 1}", "evaluation.interval_steps=1000"]


@functools.cache
def craft_demo_dir() -> Path:
    """Demonstrations of Craft tasks AC and CD, 10 each, as a run makes the missing ones (`data.generate`: the bot,
    seeded), made once per process: the craft_bc pin trains on the first 8 of each, the PPO pins' behaviour cloning
    on all 10."""
    from tgjax.train.tasks import craft_bc

    directory = Path(tempfile.mkdtemp(prefix="craft_demos_"))
    atexit.register(shutil.rmtree, directory, True)
    config = apply_overrides(craft_bc.default_config(), ["data.tasks=AC,CD", "data.num_demos=10",
                                                         f"data.demo_dir={directory}"])
    craft_bc.load_task_demos(config, directory, say=lambda *_: None)
    return directory


def family_config(family: str, workdir: Path):
    if family == "mlm":
        return load_config("configs/udgn_tiny.py", [
            "model.d_model=16", "model.num_layers=1", "model.num_channels=2", "model.channel_size=8",
            "model.parser_hidden=8", "data.num_train_sentences=60", "data.num_valid_sentences=8",
            "training.token_budget=128", "training.length_bucket=32", "evaluation.runs=1", *COMMON])
    if family == "craft_bc":
        from tgjax.train.tasks.craft_bc import default_config

        return apply_overrides(default_config(), [
            "data.tasks=AC,CD", "data.num_demos=8", "model.hidden_size=8", "training.batch_size=4",
            "evaluation.batch_size=4", f"data.demo_dir={craft_demo_dir()}", *COMMON])
    if family == "pushdown_lm":
        return load_config("configs/pushdown_tiny.py", [
            "model.d_model=32", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=64",
            "model.sequence_length=32", "data.num_train_sentences=40", "data.num_valid_sentences=8",
            "training.batch_size=8", "evaluation.batch_size=8", *COMMON])
    if family == "cfl":  # one trial of one epoch: 15 batches of 8 (the first 12 trained); 3 layers, the middle one Sup
        return load_config("configs/stack_cfl.py:marked_reversal,tf_sup", [
            "architecture.num_layers=3", "training.epochs=1", "data.train_size=120", "data.valid_size=8",
            "data.length_bucket=88",
            "training.batch_size=8", "evaluation.batch_size=8", "logging.interval_steps=1"])
    if family == "lm":  # TG on the built-in treebank, dropout on (the step's key matters)
        return load_config("configs/tiny.py", [
            "model.d_model=32", "model.num_layers=1", "model.num_heads=2", "model.ffw_hidden_size=64",
            "model.embedding_dropout=0.1", "model.core_dropout=0.1", "model.core_output_dropout=0.1",
            "training.batch_size=8", *COMMON])
    if family == "onlstm_lm":  # SGD, ASGD from step 5 on (averaging and the released rate rule), BPTT hidden
        return load_config("configs/onlstm_tiny.py", [
            "model.embedding_size=16", "model.hidden_size=16", "model.num_layers=2", "model.chunk_size=4",
            "data.num_train_sentences=40", "data.num_valid_sentences=8", "training.batch_size=4",
            "training.bptt=8", "training.min_seq_len=2", "training.length_bucket=16", "evaluation.batch_size=4",
            "evaluation.bptt=16", "training.num_epochs=1",  # about 25 steps (the first 12 trained)
            *[key for key in COMMON if not key.startswith(("training.num_steps", "evaluation."))]])
    if family == "classification":  # Ordered Memory on a toy logic set, dropouts on
        from tests.train.test_classification_task import write_toy_logic

        return load_config("configs/om_logic.py", [
            "model.embedding_size=16", "model.slot_size=16", "model.mlp_hidden_size=16", "model.n_slots=4",
            "model.test_n_slots=4", "training.batch_size=8", "evaluation.batch_size=8",
            f"data.logic_dir={write_toy_logic(workdir / 'logic')}", *COMMON])
    if family == "stack_lm":  # Tf+Sup on the built-in treebank's words, dropout on
        return load_config("configs/stack_lm_tiny.py", [
            "model.num_layers=1", "model.d_model=16", "model.num_heads=2", "model.feedforward_size=32",
            "model.stack_embedding_size=8", "data.num_train_sentences=96", "data.num_valid_sentences=8",
            "training.batch_size=8", "training.length_bucket=32", *COMMON])
    if family in ("ppo_actions", "ppo_options"):  # PPO fine-tuning of a 4-step behaviour-cloning run
        from tgjax.train.tasks import craft_bc, ppo_actions, ppo_options

        kind = "lstm" if family == "ppo_actions" else "ocn"  # a flat policy to fine-tune, or options to control
        bc_config = apply_overrides(craft_bc.default_config(), [
            f"model.kind={kind}", "data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8",
            "training.batch_size=4", "evaluation.batch_size=4", "training.num_steps=4", "evaluation.interval_steps=4",
            "checkpointing.interval_steps=4", "logging.tensorboard=false", f"data.demo_dir={craft_demo_dir()}"])
        # Its one checkpoint (step 4, the "best" PPO reads: the latest where nothing was validated) holds what
        # the 4 steps trained; the validation, which changes no parameter, is not compiled.
        bc_task = make_task(bc_config)
        bc_task.has_validation = lambda: False
        train(bc_config, workdir / "bc", task=bc_task, quiet=True)
        module, key = (ppo_actions, "policy_workdir") if family == "ppo_actions" else (ppo_options, "options_workdir")
        return apply_overrides(module.default_config(), [
            f"rl.{key}={workdir / 'bc'}", "rl.task=ACD", "rl.num_envs=4", "rl.rollout_steps=8",
            "rl.num_minibatches=2", "rl.num_epochs=2", "rl.max_steps=16", "evaluation.episodes=4", *COMMON,
            f"training.num_steps={STEPS}"])
    raise ValueError(f"no pinned config for {family!r}")


def losses(family: str) -> list[float]:
    with tempfile.TemporaryDirectory() as directory:
        config = family_config(family, Path(directory))
        task = None
        if family in ("ppo_actions", "ppo_options"):  # its last step is STEPS: no validation episodes after it
            task = make_task(config)
            task.has_validation = lambda: False
        result = train(config, Path(directory) / "run", task=task, quiet=True, stop_after_step=STEPS)
    return [result.losses[step] for step in range(1, STEPS + 1)]


# Migrated families first; the rest are pinned ahead of their move to the one step.
FAMILIES = ("mlm", "craft_bc", "pushdown_lm", "cfl", "lm", "onlstm_lm", "classification", "ppo_actions",
            "ppo_options", "stack_lm")

if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    # `record FAMILY ...`: only those families' pins (the others keep theirs); `record`: all of them.
    chosen = sys.argv[2:] or FAMILIES
    pins = json.loads(PINS.read_text()) if PINS.exists() else {}
    PINS.write_text(json.dumps({**pins, **{family: losses(family) for family in chosen}}, indent=1) + "\n")
    print(f"wrote {PINS} ({', '.join(chosen)})")
