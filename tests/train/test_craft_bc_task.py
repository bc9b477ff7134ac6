"""Behaviour cloning of Craft policies through the trainer: learning, stop/resume bit-identity, bad input."""

from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pytest

from tests.needs import skip_module_without  # noqa: E402

skip_module_without("gymnax")

from tgjax.data.craft_demos import CraftDemoError, read_craft_demos, write_craft_demos  # noqa: E402
from tgjax.train.config import ConfigError, apply_overrides  # noqa: E402
from tgjax.train.loop import train  # noqa: E402
from tgjax.train.tasks.craft_bc import default_config  # noqa: E402

# Resumed and repeated runs lower the same programs: each compiles once while this module runs (tests/compile_memo.py).
pytestmark = pytest.mark.compile_once


SMALL = ["data.tasks=AC,CD", "data.num_demos=10", "model.hidden_size=8", "training.batch_size=4",
         "evaluation.batch_size=4", "training.num_steps=8", "evaluation.interval_steps=4",
         "checkpointing.interval_steps=2", "logging.interval_steps=1", "logging.tensorboard=false",
         "checkpointing.max_to_keep=10", "training.learning_rate=0.01"]


def small_config(demo_dir, *overrides):
    return apply_overrides(default_config(), [*SMALL, f"data.demo_dir={demo_dir}", *overrides])


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """Bot demonstrations of AC and CD (10 each), made once by the task's own generation path (what its setup
    calls; nothing trained)."""
    from tgjax.train.tasks.craft_bc import load_task_demos

    directory = tmp_path_factory.mktemp("demos")
    demos = load_task_demos(small_config(directory), tmp_path_factory.mktemp("gen"), say=lambda text: None)
    assert sorted(demos) == ["AC", "CD"] and (directory / "AC.npz").is_file()
    return directory


def _losses(workdir):
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["split"] == "train"}, [r for r in records
                                                                           if r["split"] == "valid"]


# The OCN in CI (the family's model); the other policies with -m slow.
@pytest.mark.parametrize("kind", ["ocn", pytest.param("ompn", marks=pytest.mark.slow),
                                  pytest.param("lstm", marks=pytest.mark.slow)])
def test_stop_and_resume_is_bit_identical(tmp_path, demo_dir, kind):
    """Resumed from step 4's checkpoint, steps 5-8 are the uninterrupted run's. The checkpoint is the whole run's
    (interval 2), its later ones removed: what a stop after step 4 leaves (the trainer's `stop_after_step`,
    tests/train/test_resume.py), without training the first half again."""
    whole = tmp_path / "whole"
    train(small_config(demo_dir, f"model.kind={kind}"), whole, quiet=True)
    parts = tmp_path / "parts"
    shutil.copytree(whole, parts)
    for step in (6, 8):
        shutil.rmtree(parts / "checkpoints" / str(step))
    resumed = train(small_config(demo_dir, f"model.kind={kind}"), parts, quiet=True)
    assert resumed.start_step == 4 and not resumed.checkpoint_problems
    assert sorted(resumed.losses) == [5, 6, 7, 8]
    losses_whole, valid_whole = _losses(whole)
    losses_parts, _ = _losses(parts)
    assert losses_whole == losses_parts and len(losses_whole) == 8
    assert losses_whole[8] < losses_whole[1]  # it learns
    if kind == "ocn":  # the segmentation metrics are reported at validation
        assert {"f1_tol1", "align_acc", "nmi", "nll"} <= set(valid_whole[-1])
    if kind == "ompn":  # boundaries from the expected expansion position; the pointer is no option: no NMI
        assert {"f1_tol0", "f1_tol1", "align_acc", "nll"} <= set(valid_whole[-1])
        assert "nmi" not in valid_whole[-1]


def test_demonstrations_of_another_environment_version_are_refused(tmp_path, demo_dir):
    demos = read_craft_demos(demo_dir / "AC.npz")
    stale = tmp_path / "stale"
    stale.mkdir()
    write_craft_demos(stale / "AC.npz", demos.__class__(**{**demos.__dict__, "env_version": "craft-ocn-0"}))
    write_craft_demos(stale / "CD.npz", read_craft_demos(demo_dir / "CD.npz"))
    with pytest.raises(CraftDemoError, match=r"AC.npz: made by Craft environment version 'craft-ocn-0'"):
        train(small_config(stale, "data.generate=false"), tmp_path / "run", quiet=True)


def test_a_file_of_another_task_is_refused(tmp_path, demo_dir):
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    write_craft_demos(swapped / "AC.npz", read_craft_demos(demo_dir / "CD.npz"))
    write_craft_demos(swapped / "CD.npz", read_craft_demos(demo_dir / "CD.npz"))
    with pytest.raises(CraftDemoError, match=r"AC.npz: holds demonstrations of task 'CD', expected 'AC'"):
        train(small_config(swapped, "data.generate=false"), tmp_path / "run", quiet=True)


@pytest.mark.parametrize("override, message", [
    ("data.tasks=AX", r"data.tasks.*unknown Craft task name 'AX'"),
    ("data.tasks=AA", r"data.tasks.*'get wood', is unreachable"),
    ("model.kind=gru", r"model settings: policy kind 'gru'"),
    ("data.valid_fraction=1.0", r"data.valid_fraction"),
    ("data.train_final_done=maybe", r"data.train_final_done.*expected true or false"),
])
def test_bad_config_is_named(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        train(small_config(tmp_path, override), tmp_path / "run", quiet=True)


def test_missing_file_without_generation_is_named(tmp_path):
    with pytest.raises(CraftDemoError, match=r"AC.npz: no demonstration file for task 'AC'"):
        train(small_config(tmp_path / "none", "data.generate=false"), tmp_path / "run", quiet=True)


def test_validation_split_is_the_last_fifth(demo_dir, tmp_path):
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext
    from tgjax.train.tasks.craft_bc import CraftBCTask

    task = CraftBCTask(small_config(demo_dir))
    task.setup(RunContext(tmp_path, shd.make_mesh(-1, 1), False, 0, 1, print))
    assert len(task.train_episodes) == 16 and len(task.valid_episodes) == 4
    demos = read_craft_demos(demo_dir / "CD.npz")
    # validation row 2 is CD's episode 8: its actions, padded, masked
    obs, actions, _ = demos.episode(8)
    np.testing.assert_array_equal(task.valid_episodes.actions[2, :len(actions)], actions)
    assert task.valid_episodes.mask[2].sum() == len(actions) and task.valid_episodes.task_ids[2] == 1


def test_checkpoint_of_before_num_slots_is_the_same_model(demo_dir, tmp_path):
    """A checkpoint whose model config predates a field (num_slots, added with OMPN) holds that field's default,
    so it still matches; another value of a field is refused, naming the model."""
    import dataclasses

    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext
    from tgjax.train.tasks.craft_bc import CraftBCTask

    task = CraftBCTask(small_config(demo_dir))
    task.setup(RunContext(tmp_path, shd.make_mesh(-1, 1), False, 0, 1, print))
    meta = task.checkpoint_meta()
    old = {k: v for k, v in dataclasses.asdict(task.policy_config).items() if k != "num_slots"}
    task.check_checkpoint({**meta, "model": old}, 2, tmp_path)
    with pytest.raises(ConfigError, match=r"is of another run: model:"):
        task.check_checkpoint({**meta, "model": {**old, "num_slots": 5}}, 2, tmp_path)


@functools.cache
def jitted_sequence_nll():
    import jax

    from tgjax.train.tasks.craft_bc import sequence_nll

    return jax.jit(sequence_nll, static_argnums=0)


@pytest.mark.parametrize("imitate_done", [False, True])
def test_the_loss_targets_done_only_under_the_release_switch(demo_dir, tmp_path, imitate_done):
    """The thesis' actions (default): no batch of an epoch has a DONE target, and the loss is the one with every
    DONE row's weight removed. `data.train_final_done=True` (OMPN's release): every episode's final DONE is a
    target again, and the loss differs."""
    from tgjax.envs.craft_rules import DONE
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext
    from tgjax.train.tasks.craft_bc import CraftBCTask

    overrides = ["data.train_final_done=true"] if imitate_done else []
    task = CraftBCTask(small_config(demo_dir, *overrides))
    task.setup(RunContext(tmp_path, shd.make_mesh(-1, 1), False, 0, 1, print))
    batches = task.batches(None)
    per_epoch = len(task.train_episodes) // task.batch_size
    done_targets = 0
    for _ in range(per_epoch):
        batch = next(batches)
        done_targets += int(np.sum((batch["mask"] > 0) & (batch["actions"] == DONE)))
    assert batches.get_state() == {"epoch": 0, "step": per_epoch}
    assert done_targets == (per_epoch * task.batch_size if imitate_done else 0)

    # the loss itself: the same as with every DONE row's weight removed, unless DONE is imitated
    state, _ = task.init_state()
    batch = task.train_episodes.rows(np.arange(len(task.train_episodes)))
    without_done = {**batch, "mask": batch["mask"] * (batch["actions"] != DONE)}
    nll = jitted_sequence_nll()  # one program for both calls and both cases, not op by op
    loss = float(nll(task.graphdef, state.params, batch)[0])
    loss_without_done = float(nll(task.graphdef, state.params, without_done)[0])
    assert (loss == loss_without_done) != imitate_done


def test_episode_batches_shuffle_each_epoch_resume_and_split_rows_by_process():
    """An epoch's batches: the episodes permuted by (seed, epoch), cut into batches, the partial one dropped;
    a restored position gives the same batches as an uninterrupted run; each process reads its half of the rows."""
    from tgjax.data.craft_episodes import Episodes
    from tgjax.train.tasks.craft_bc import episode_batches

    n, size, seed = 10, 4, 5
    episodes = Episodes(obs=np.zeros((n, 3, 2), np.uint8), actions=np.zeros((n, 3), np.int32),
                        mask=np.ones((n, 3), np.float32), target_mask=np.ones((n, 3), np.float32),
                        task_ids=np.arange(n, dtype=np.int32), boundaries=[], kinds=[])
    batches = episode_batches(episodes, size, seed)
    seen = [next(batches)["task_ids"] for _ in range(5)]
    for epoch in (0, 1):
        order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(epoch,))).permutation(n)
        np.testing.assert_array_equal(np.stack(seen[2 * epoch:2 * epoch + 2]), order[:8].reshape(2, size))
    resumed = episode_batches(episodes, size, seed, {"epoch": 0, "step": 2})
    for k in (2, 3, 4):
        np.testing.assert_array_equal(next(resumed)["task_ids"], seen[k])
    halves = [episode_batches(episodes, size, seed, {"epoch": 0, "step": 1}, p, 2) for p in range(2)]
    for k in (1, 2, 3):
        np.testing.assert_array_equal(np.concatenate([next(h)["task_ids"] for h in halves]), seen[k])
    with pytest.raises(ValueError, match="larger than the 10 training episodes"):
        episode_batches(episodes, 11, seed)


def test_subtask_hints_mark_each_subtasks_rows_with_its_kinds_option():
    # One episode of 7 rows: subtask 1 (kind 9) up to its completing action at row 2, subtask 2 (kind 7) up to
    # row 5, the final DONE at row 6; then padding. Hinted options: kind 9 -> 2, kind 7 -> 0; none after.
    from tgjax.data.craft_episodes import Episodes
    from tgjax.train.tasks.craft_bc import subtask_hint_options

    option_of_kind = subtask_hint_options(("AC", "CD", "DA"), 3)
    assert option_of_kind == {7: 0, 8: 1, 9: 2}                       # iron, grass, wood: sorted kind ids
    assert subtask_hint_options(("AC", "CD", "DA"), 2) == {7: 0, 8: 1, 9: 0}
    mask = np.zeros((1, 9), np.float32)
    mask[0, :7] = 1
    episodes = Episodes(np.zeros((1, 9, 2), np.uint8), np.zeros((1, 9), np.int32), mask, mask, np.zeros(1, np.int32),
                        [np.array([2, 5])], [np.array([9, 7])])
    hinted = episodes.with_subtask_hints(option_of_kind)
    np.testing.assert_array_equal(hinted.hint_options[0], [2, 2, 2, 0, 0, 0, -1, -1, -1])
    assert "hint_option" in hinted.rows(np.array([0])) and "hint_option" not in episodes.rows(np.array([0]))


def test_the_hint_adds_its_weight_times_the_mixtures_nll_of_the_hinted_options(demo_dir, tmp_path):
    """cloning_loss(hint_weight=w) - cloning_loss() = w * mean over hinted target rows of -log p_t[hint],
    computed here from the policy's own mixture."""
    import jax
    from flax import nnx

    from tgjax.models.ocn import teacher_forced
    from tgjax.train import sharding as shd
    from tgjax.train.task import RunContext
    from tgjax.train.tasks.craft_bc import CraftBCTask, cloning_loss

    task = CraftBCTask(small_config(demo_dir, "training.subtask_hint_weight=0.5"))
    task.setup(RunContext(tmp_path, shd.make_mesh(-1, 1), False, 0, 1, print))
    state, _ = task.init_state()
    batch = task.train_episodes.rows(np.arange(len(task.train_episodes)))

    @jax.jit
    def run(params, batch):
        model = nnx.merge(task.graphdef, params)
        out = teacher_forced(model, batch["obs"], batch["actions"], batch["task_ids"])[2]
        return cloning_loss(model, batch, hint_weight=0.5)[0], cloning_loss(model, batch)[0], out.log_p

    hinted_loss, plain_loss, log_p = (np.asarray(x) for x in run(state.params, batch))
    hint, mask = batch["hint_option"], batch["mask"]
    rows = (mask > 0) & (hint >= 0)
    assert rows.sum() > 0 and (hint[mask > 0] >= 0).mean() > 0.5   # most target rows carry a hint
    expected = -np.mean(np.take_along_axis(log_p, np.maximum(hint, 0)[..., None], -1)[..., 0][rows])
    assert hinted_loss - plain_loss == pytest.approx(0.5 * expected, rel=1e-4)


def test_a_hinted_start_lowers_the_hint_nll_and_resumes_without_it(demo_dir, tmp_path):
    """Trained 8 steps with the hint, its NLL falls (the controller and done heads learn the assignment); the
    same workdir then resumes to step 12 under the likelihood alone (the two-phase protocol of the diagnostic)."""
    workdir = tmp_path / "hinted"
    train(small_config(demo_dir, "training.subtask_hint_weight=1.0"), workdir, quiet=True)
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    hint_nll = {r["step"]: r["hint_nll"] for r in records if r["split"] == "train"}
    assert hint_nll[8] < hint_nll[1]
    resumed = train(small_config(demo_dir, "training.num_steps=12"), workdir, quiet=True)
    assert resumed.start_step == 8 and sorted(resumed.losses) == [9, 10, 11, 12]


def test_the_hint_is_refused_for_a_policy_without_options(tmp_path):
    with pytest.raises(ConfigError, match=r"training.subtask_hint_weight.*'lstm'"):
        train(small_config(tmp_path, "model.kind=lstm", "training.subtask_hint_weight=1.0"), tmp_path / "run",
              quiet=True)
