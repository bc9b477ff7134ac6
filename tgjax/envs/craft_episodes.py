"""Craft demonstrations in memory: `CraftDemos`, what the bot (`tgjax.envs.craft_bot`) makes and the
demonstration files (`tgjax.data.craft_demos`) hold; shapes in that module's docstring. NumPy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

FIELDS = ("observations", "actions", "offsets", "boundaries", "subtasks", "task", "env_version", "max_steps",
          "dense_reward", "full_view", "seed")


class CraftDemoError(ValueError):
    """A demonstration file that cannot be used."""


@dataclasses.dataclass(frozen=True)
class CraftDemos:
    """Demonstrations of one task; shapes in the module docstring."""
    observations: np.ndarray
    actions: np.ndarray
    offsets: np.ndarray
    boundaries: np.ndarray
    subtasks: np.ndarray
    task: str
    env_version: str
    max_steps: int
    dense_reward: bool
    full_view: bool
    seed: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def episode(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(observations [T + 1, 1075] float32, actions [T + 1] int32, boundaries [num_subtasks]) of one episode."""
        rows = slice(int(self.offsets[index]), int(self.offsets[index + 1]))
        return (self.observations[rows].astype(np.float32), self.actions[rows].astype(np.int32),
                self.boundaries[index])

    @classmethod
    def from_episodes(cls, episodes, **meta) -> CraftDemos:
        """From (observations [T+1, 1075], actions [T+1], boundaries [S]) triples and the metadata fields."""
        observations = np.concatenate([obs for obs, _, _ in episodes])
        if observations.min() < 0 or observations.max() > 255 or not np.array_equal(observations,
                                                                                    np.round(observations)):
            raise CraftDemoError("observations must be integers in 0..255 to be stored as uint8")
        lengths = [len(actions) for _, actions, _ in episodes]
        return cls(observations=observations.astype(np.uint8),
                   actions=np.concatenate([actions for _, actions, _ in episodes]).astype(np.uint8),
                   offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                   boundaries=np.stack([b for _, _, b in episodes]).astype(np.int32), **meta)
