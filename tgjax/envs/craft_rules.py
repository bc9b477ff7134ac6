"""Craft's static rules as NumPy tables (no JAX): kinds, actions, recipes, tasks.

The rules restate OMPN's Craft (released-code.md §5.4), narrowed to what the
Option-Control Network needs (§5.3, thesis Table 5.1): "get X" subtasks with
X in {wood, gold, iron, grass}, and tasks as ordered sequences of them.

This module imports only NumPy so that the demonstration reader in
`tgjax.data.craft_demos` (which must never import JAX) can check the
environment version and decode task tables.

Choices where the sources are silent (documented and tested):

* gold is placed as a plain object, without OMPN's water "island"
  (released-code.md §5.4 marks this uncertain);
* every map holds exactly one of each primitive wood, gold, iron and grass,
  and one of each workshop, so a task that asks for the same primitive twice
  (or for gem, which is never placed) is unreachable and refused at
  construction;
* an empty in-bounds cell lights up kind 0 (``empty``) in the observation; an
  out-of-bounds cell is all zeros;
* USE on water with a bridge (or on stone with an axe) clears the cell and
  does not consume the tool.
"""

from __future__ import annotations

import numpy as np

#: Bump whenever a rule, the map generator or the observation layout changes:
#: demonstration files record it and the reader refuses other versions.
ENV_VERSION = "craft-ocn-2"  # 2: maps drawn by top-k of uniform scores

WIDTH = HEIGHT = 10
KINDS = ("empty", "boundary", "water", "stone", "toolshed", "workbench", "factory", "iron", "grass", "wood",
         "gold", "gem", "plank", "stick", "axe", "rope", "bed", "shears", "cloth", "bridge", "ladder")
NUM_KINDS = len(KINDS)  # 21
KIND = {name: index for index, name in enumerate(KINDS)}
WORKSHOPS = ("toolshed", "workbench", "factory")
#: kinds USE picks up: the primitives and every crafted item
GRABBABLE = tuple(range(KIND["iron"], NUM_KINDS))

ACTIONS = ("down", "up", "left", "right", "use", "done")
DOWN, UP, LEFT, RIGHT, USE, DONE = range(6)
NUM_ACTIONS = len(ACTIONS)
#: (dx, dy) of the four moves, indexed by action (= facing direction) 0..3
MOVES = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], dtype=np.int32)

#: (output, workshop, ingredients) in the recipe file's order, which USE follows
RECIPES = (
    ("plank", "toolshed", ("wood",)),
    ("axe", "toolshed", ("stick", "iron")),
    ("rope", "toolshed", ("grass",)),
    ("stick", "workbench", ("wood",)),
    ("bed", "workbench", ("plank", "grass")),
    ("shears", "workbench", ("stick", "iron")),
    ("cloth", "factory", ("grass",)),
    ("bridge", "factory", ("wood", "iron")),
    ("ladder", "factory", ("plank", "stick")),
)
RECIPE_OUTPUT = np.array([KIND[out] for out, _, _ in RECIPES], dtype=np.int32)                     # [9]
RECIPE_WORKSHOP = np.array([KIND[at] for _, at, _ in RECIPES], dtype=np.int32)                     # [9]
RECIPE_INPUTS = np.zeros((len(RECIPES), NUM_KINDS), dtype=np.int32)                                # [9, 21]
for _row, (_, _, _ingredients) in enumerate(RECIPES):
    for _name in _ingredients:
        RECIPE_INPUTS[_row, KIND[_name]] += 1

#: what every map holds besides boundary and agent: one of each, in placement order
PLACED = ("wood", "gold", "iron", "grass", "toolshed", "workbench", "factory")

#: the thesis' subtask letters (Table 5.1)
SUBTASK_LETTERS = {"A": "wood", "B": "gold", "C": "iron", "D": "grass"}
SUBTASK_KINDS = tuple(SUBTASK_LETTERS.values())

# Observation layout (1075 values), as OMPN's craft.py concatenates it.
WINDOW = 5             # egocentric window side
COARSE_WINDOW = 25     # the coarse view's window side, max-pooled by 5x5 blocks
LOCAL_VIEW = slice(0, WINDOW * WINDOW * NUM_KINDS)                # 525: [dx, dy, kind] raveled
COARSE_VIEW = slice(525, 1050)                                    # 525: [bx, by, kind] raveled
INVENTORY = slice(1050, 1050 + NUM_KINDS)                         # 21 counts
DIRECTION = slice(1071, 1075)                                     # one-hot facing direction
OBS_SIZE = 1075


def live_observation_indices(full_view: bool = False) -> np.ndarray:
    """Indices of the 1075 observation features that can be non-zero on this environment's maps.

    The 5x5 window (and, with `full_view`, the coarse view) shows only the
    kinds maps hold: empty, boundary, the placed primitives and workshops;
    then every inventory count and the direction.
    """
    shown = sorted({KIND["empty"], KIND["boundary"]} | {KIND[k] for k in PLACED})
    cells = WINDOW * WINDOW
    window = [cell * NUM_KINDS + kind for cell in range(cells) for kind in shown]
    views = [LOCAL_VIEW.start + i for i in window]
    if full_view:
        views += [COARSE_VIEW.start + i for i in window]
    rest = list(range(INVENTORY.start, OBS_SIZE))
    return np.array(views + rest, dtype=np.int32)


class CraftTaskError(ValueError):
    """A task name or subtask the environment cannot run."""


def parse_task(task: str | tuple[str, ...]) -> tuple[int, ...]:
    """Kind ids of a task's "get X" subtasks, in order.

    A task is a string of the thesis' letters ("ACD" = wood, iron, grass) or a
    tuple of kind names (("wood", "iron")). Unknown letters or names, and
    subtasks no map can satisfy, raise `CraftTaskError`.
    """
    if isinstance(task, str):
        if not task or any(letter not in SUBTASK_LETTERS for letter in task):
            raise CraftTaskError(
                f"unknown Craft task name {task!r}: expected a non-empty string of the subtask letters "
                f"{', '.join(f'{k}={v}' for k, v in SUBTASK_LETTERS.items())} (e.g. 'ACD')")
        names = tuple(SUBTASK_LETTERS[letter] for letter in task)
    else:
        names = tuple(task)
        if not names:
            raise CraftTaskError("empty Craft task: expected at least one 'get X' subtask")
        for name in names:
            if name not in KIND:
                raise CraftTaskError(f"unknown kind {name!r} in Craft task {task!r}: expected one of {KINDS}")
    for position, name in enumerate(names):
        if KIND[name] not in GRABBABLE:
            raise CraftTaskError(f"subtask {position} of task {task!r}, 'get {name}': {name} cannot be picked up")
        needed = names[:position + 1].count(name)
        available = PLACED.count(name)
        if needed > available:
            raise CraftTaskError(
                f"subtask {position} of task {task!r}, 'get {name}', is unreachable: every map holds "
                f"{available} {name} (placed: {', '.join(PLACED)}) and the task needs {needed} by then")
    return tuple(KIND[name] for name in names)


def task_table(tasks: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(subtask kinds [num_tasks, max_len] padded with -1, lengths [num_tasks]) of parsed tasks."""
    parsed = [parse_task(task) for task in tasks]
    lengths = np.array([len(p) for p in parsed], dtype=np.int32)
    table = np.full((len(parsed), int(lengths.max())), -1, dtype=np.int32)
    for row, kinds in enumerate(parsed):
        table[row, :len(kinds)] = kinds
    return table, lengths
