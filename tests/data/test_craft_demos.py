"""Craft demonstration files: round trip, the version check, bad files, the command, and no JAX."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tgjax.data.craft_demos import FIELDS, CraftDemoError, CraftDemos, read_craft_demos, write_craft_demos
from tgjax.envs import craft_rules as rules


def small_demos(version: str = rules.ENV_VERSION) -> CraftDemos:
    """Two hand-made episodes of task 'AC' (lengths 3 and 4, DONE last)."""
    rng = np.random.default_rng(0)
    episodes = []
    for length, boundaries in ((3, [0, 1]), (4, [1, 2])):
        obs = rng.integers(0, 3, (length, rules.OBS_SIZE)).astype(np.float32)
        actions = np.array([rules.USE] * (length - 1) + [rules.DONE])
        episodes.append((obs, actions, np.array(boundaries)))
    return CraftDemos.from_episodes(episodes, task="AC", subtasks=np.array([9, 7], np.int32), env_version=version,
                                    max_steps=64, dense_reward=False, full_view=False, seed=7)


def test_round_trip(tmp_path):
    demos = small_demos()
    path = tmp_path / "demos.npz"
    write_craft_demos(path, demos)
    back = read_craft_demos(path)
    assert len(back) == 2 and back.offsets.tolist() == [0, 3, 7]
    for name in FIELDS:
        assert np.array_equal(np.asarray(getattr(back, name)), np.asarray(getattr(demos, name))), name
    obs, actions, boundaries = back.episode(1)
    assert obs.dtype == np.float32 and obs.shape == (4, 1075)
    assert np.array_equal(obs, demos.observations[3:7].astype(np.float32))
    assert actions.tolist() == [4, 4, 4, 5] and boundaries.tolist() == [1, 2]
    assert back.task == "AC" and back.dense_reward is False and back.seed == 7


def test_version_mismatch_names_the_file(tmp_path):
    path = tmp_path / "old.npz"
    write_craft_demos(path, small_demos(version="craft-ocn-0"))
    with pytest.raises(CraftDemoError, match=rf"{path}: made by Craft environment version 'craft-ocn-0'.*"
                                             rf"'{rules.ENV_VERSION}'"):
        read_craft_demos(path)


def test_bad_files(tmp_path):
    with pytest.raises(CraftDemoError, match="no such demonstration file"):
        read_craft_demos(tmp_path / "missing.npz")
    text = tmp_path / "notes.npz"
    text.write_text("not an archive\n")
    with pytest.raises(CraftDemoError, match=f"{text}: not a Craft demonstration file"):
        read_craft_demos(text)
    partial = tmp_path / "partial.npz"
    np.savez(partial, observations=np.zeros((1, 1075)))
    with pytest.raises(CraftDemoError, match=r"missing fields \['actions'"):
        read_craft_demos(partial)
    demos = small_demos()
    fields = {name: np.asarray(getattr(demos, name)) for name in FIELDS}
    fields["offsets"] = np.array([0, 3, 9])
    broken = tmp_path / "broken.npz"
    np.savez(broken, **fields)
    with pytest.raises(CraftDemoError, match=f"{broken}: inconsistent demonstration file: offsets"):
        read_craft_demos(broken)


def test_observations_must_fit_uint8():
    episode = (np.full((2, rules.OBS_SIZE), 300.0), np.array([4, 5]), np.array([0]))
    with pytest.raises(CraftDemoError, match="0..255"):
        CraftDemos.from_episodes([episode], task="A", subtasks=np.array([9]), env_version=rules.ENV_VERSION,
                                 max_steps=64, dense_reward=True, full_view=False, seed=0)


def test_reader_imports_no_jax():
    code = ("import sys, tgjax.data.craft_demos\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'gymnax')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_command_writes_a_readable_file(tmp_path, capsys):
    pytest.importorskip("gymnax")
    from tgjax.cli import main

    path = tmp_path / "cd.npz"
    assert main(["data", "craft-demos", "--task", "CD", "--num", "6", "-o", str(path), "--batch-size", "8",
                 "--sparse"]) == 0
    demos = read_craft_demos(path)
    assert len(demos) == 6 and demos.task == "CD" and demos.subtasks.tolist() == [7, 8]
    assert demos.dense_reward is False and demos.env_version == rules.ENV_VERSION
    assert "6 demonstrations of task CD" in capsys.readouterr().out
    assert main(["data", "craft-demos", "--task", "CCA", "--num", "2", "-o", str(tmp_path / "x.npz")]) == 2
    assert "'get iron', is unreachable" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()
    assert main(["data", "craft-demos", "--task", "A", "--num", "2", "-o", str(tmp_path / "no" / "x.npz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["data", "craft-demos", "--task", "A", "--num", "0", "-o", str(tmp_path / "x.npz")]) == 2
    assert "--num, --max-steps and --batch-size must be >= 1" in capsys.readouterr().err
