"""Craft demonstration files: the writer and the checked reader (no JAX); the container, `CraftDemos`, is the
bot's (`tgjax.envs.craft_episodes`), re-exported here.

A file (``.npz``, compressed) holds the demonstrations of one task, made by
`tgjax.envs.craft_bot.generate_demos` (``tgjax data craft-demos``):

* ``observations`` [total, 1075] uint8 (every value of the Craft observation
  is a small count), ``actions`` [total] uint8, ``offsets`` [num + 1] int64:
  episode i is rows offsets[i]:offsets[i+1]; its last row is the final
  observation paired with DONE;
* ``boundaries`` [num, num_subtasks] int32: the in-episode step of the action
  that completed each subtask (the environment's report);
* ``subtasks`` [num_subtasks] kind ids; ``task``, ``env_version``,
  ``max_steps``, ``dense_reward``, ``full_view``, ``seed``.

The reader refuses a file whose ``env_version`` is not the environment's
current `craft_rules.ENV_VERSION`, naming the file: demonstrations from other
rules would silently teach the wrong world.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np

from tgjax.envs import craft_rules as rules
from tgjax.envs.craft_episodes import FIELDS, CraftDemoError, CraftDemos


def write_craft_demos(path: str | Path, demos: CraftDemos) -> None:
    """Write `demos` to `path` (compressed .npz; the name is kept as given; whole or not at all). A file in a
    bucket (`gs://...`, a run's workdir on one) is made in memory and written as one object."""
    if "://" in os.fspath(path):
        from etils import epath  # only bucket files need it

        archive = io.BytesIO()
        np.savez_compressed(archive, **{name: np.asarray(getattr(demos, name)) for name in FIELDS})
        epath.Path(os.fspath(path)).write_bytes(archive.getvalue())
        return
    from tgjax.outputs import atomic_write

    with atomic_write(path, "wb") as handle:
        np.savez_compressed(handle, **{name: np.asarray(getattr(demos, name)) for name in FIELDS})


def read_craft_demos(path: str | Path, expected_version: str = rules.ENV_VERSION) -> CraftDemos:
    """Read and check a demonstration file (local, or `gs://...` through `etils.epath`); `CraftDemoError` naming
    the file on any mismatch."""
    url = "://" in os.fspath(path)
    path = os.fspath(path) if url else Path(path)
    try:
        source: Path | io.BytesIO
        if url:
            from etils import epath  # only bucket files need it

            source = io.BytesIO(epath.Path(path).read_bytes())
        else:
            source = Path(path)
        with np.load(source, allow_pickle=False) as archive:
            missing = [name for name in FIELDS if name not in archive.files]
            if missing:
                raise CraftDemoError(f"{path}: not a Craft demonstration file: missing fields {missing} "
                                     f"(expected {list(FIELDS)})")
            raw = {name: archive[name] for name in FIELDS}
    except FileNotFoundError:
        raise CraftDemoError(f"{path}: no such demonstration file") from None
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, CraftDemoError):
            raise
        raise CraftDemoError(f"{path}: not a Craft demonstration file (expected a .npz archive): {error}") from None
    version = str(raw["env_version"])
    if version != expected_version:
        raise CraftDemoError(f"{path}: made by Craft environment version {version!r}, but this environment is "
                             f"{expected_version!r}; regenerate it with `tgjax data craft-demos`")
    demos = CraftDemos(
        observations=raw["observations"], actions=raw["actions"], offsets=raw["offsets"],
        boundaries=raw["boundaries"], subtasks=raw["subtasks"], task=str(raw["task"]), env_version=version,
        max_steps=int(raw["max_steps"]), dense_reward=bool(raw["dense_reward"]),
        full_view=bool(raw["full_view"]), seed=int(raw["seed"]))
    _check_shapes(path, demos)
    return demos


def _check_shapes(path: str | Path, demos: CraftDemos) -> None:
    total = len(demos.actions)
    problems = []
    if demos.observations.ndim != 2 or demos.observations.shape != (total, rules.OBS_SIZE):
        problems.append(f"observations have shape {demos.observations.shape}, expected ({total}, {rules.OBS_SIZE})")
    offsets = demos.offsets
    if offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != total or np.any(np.diff(offsets) < 2):
        problems.append(f"offsets must rise from 0 to {total} by at least 2 per episode")
    elif demos.boundaries.shape != (len(offsets) - 1, len(demos.subtasks)):
        problems.append(f"boundaries have shape {demos.boundaries.shape}, expected "
                        f"({len(offsets) - 1}, {len(demos.subtasks)})")
    elif np.any(demos.actions >= rules.NUM_ACTIONS):
        problems.append(f"actions must be below {rules.NUM_ACTIONS}")
    if problems:
        raise CraftDemoError(f"{path}: inconsistent demonstration file: {'; '.join(problems)}")
