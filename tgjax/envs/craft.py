"""The Craft world as a JAX-native environment with gymnax's interface.

`Craft` subclasses `gymnax.environments.environment.Environment` (gymnax
1.0): `reset(key, params) -> (obs, state)` and
`step(key, state, action, params) -> (obs, state, reward, terminated,
truncated, info)`, pure and jittable; `step` auto-resets a finished episode
as gymnax does, and `step_env` is the raw transition (no reset), which the
hand-worked tests and the demonstration generator use. Both `vmap` over
keys, states, actions and params.

Rules (released-code.md §5.4, narrowed to OCN's "get X" tasks; the static
tables and the choices where the sources are silent are in
`tgjax.envs.craft_rules`):

* a 10x10 grid, indexed ``grid[x, y]``, with a boundary border; every map
  holds one wood, gold, iron, grass, toolshed, workbench and factory and the
  agent at distinct random interior cells, the agent facing a random way;
* actions DOWN (y-1), UP (y+1), LEFT (x-1), RIGHT (x+1): set the facing
  direction, move only into an empty cell; USE acts on the faced cell (pick
  up an item; craft every recipe of a workshop in file order, the inventory
  updating as it goes; clear water with a bridge, stone with an axe);
  DONE does nothing;
* a task is a sequence of "get X" subtasks; the current one completes when a
  step raises inventory[X]; the dense reward pays 1 per completed subtask,
  the sparse reward 1 when the last one completes; the episode terminates
  when the task is complete and is truncated at ``max_steps_in_episode``
  (64, OMPN's TimeLimit).

The observation (1075 float32 values): the one-hot kinds of the 5x5 window
centred on the agent, raveled ``[dx, dy, kind]`` (out of bounds = zeros);
the coarse view, a 25x25 window max-pooled by 5x5 blocks, raveled
``[bx, by, kind]`` (zeros unless ``full_view=True``, as OMPN's non-"full"
variants); the inventory counts; the one-hot facing direction.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

try:
    from gymnax.environments import environment, spaces
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("tgjax.envs.craft needs gymnax: pip install 'tgjax[rl]'") from error

from tgjax.envs import craft_rules as rules


@struct.dataclass
class CraftState(environment.EnvState):
    """One episode. grid [10, 10] int32 kinds; pos [2] int32 (x, y); direction int32 in 0..3 (the move
    action last taken); inventory [21] int32; task_id int32; subtask int32 (how many subtasks are done);
    time int32 (steps taken)."""
    grid: jax.Array
    pos: jax.Array
    direction: jax.Array
    inventory: jax.Array
    task_id: jax.Array
    subtask: jax.Array


@struct.dataclass
class CraftParams(environment.EnvParams):
    """task_id indexes the environment's task table; dense_reward picks the reward; vmappable leaves."""
    max_steps_in_episode: int = 64
    dense_reward: bool = True
    task_id: int = 0


class Craft(environment.Environment[CraftState, CraftParams]):
    """Craft with a static table of tasks (each a string of subtask letters or a tuple of kind names).

    Unknown tasks and unreachable subtasks raise `craft_rules.CraftTaskError` here, at construction.
    """

    def __init__(self, tasks: str | tuple[str | tuple[str, ...], ...] = ("A",), full_view: bool = False):
        super().__init__()
        self.tasks = (tasks,) if isinstance(tasks, str) else tuple(tasks)
        table, lengths = rules.task_table(self.tasks)
        self._task_table = table        # [num_tasks, max_len] kinds, -1 padded
        self._task_lengths = lengths    # [num_tasks]
        self.full_view = bool(full_view)

    # Equal tables, equal environments: a jitted program that takes the environment as a static argument
    # (tgjax/infer/craft.py's episode programs) is compiled once for all of them.
    def __eq__(self, other) -> bool:
        return type(other) is type(self) and (self.tasks, self.full_view) == (other.tasks, other.full_view)

    def __hash__(self) -> int:
        return hash((type(self), self.tasks, self.full_view))

    # -- static facts -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return "Craft-" + ",".join(t if isinstance(t, str) else "+".join(t) for t in self.tasks)

    @property
    def num_actions(self) -> int:
        return rules.NUM_ACTIONS

    @property
    def default_params(self) -> CraftParams:
        return CraftParams()

    def task_id(self, task: str | tuple[str, ...]) -> int:
        """Row of `task` in this environment's table (a clear error if absent)."""
        if task not in self.tasks:
            raise rules.CraftTaskError(f"task {task!r} is not among this environment's tasks {self.tasks}")
        return self.tasks.index(task)

    def params(self, task: str | tuple[str, ...] | None = None, dense_reward: bool = True,
               max_steps: int = 64) -> CraftParams:
        """Checked params for one task of the table (the first if None)."""
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        return CraftParams(max_steps_in_episode=max_steps, dense_reward=dense_reward,
                           task_id=0 if task is None else self.task_id(task))

    def task_subtasks(self, task_id: int) -> tuple[int, ...]:
        """Kind ids of task `task_id`'s subtasks."""
        return tuple(int(k) for k in self._task_table[task_id, :self._task_lengths[task_id]])

    def action_space(self, params: CraftParams | None = None) -> spaces.Discrete:
        return spaces.Discrete(rules.NUM_ACTIONS)

    def observation_space(self, params: CraftParams) -> spaces.Box:
        return spaces.Box(0.0, jnp.inf, (rules.OBS_SIZE,), jnp.float32)

    # -- dynamics -----------------------------------------------------------------------------
    def reset_env(self, key: jax.Array, params: CraftParams) -> tuple[jax.Array, CraftState]:
        key_cells, key_direction = jax.random.split(key)
        interior = WIDTH_INTERIOR = rules.WIDTH - 2
        # distinct interior cells, uniformly (the objects in PLACED order, then the agent): the top k of
        # i.i.d. uniform scores; far cheaper than a permutation's sorts, and gymnax's auto-resetting
        # `step` runs this reset at every step
        _, cells = jax.lax.top_k(jax.random.uniform(key_cells, (interior * interior,)), len(rules.PLACED) + 1)
        xs, ys = 1 + cells // WIDTH_INTERIOR, 1 + cells % WIDTH_INTERIOR
        grid = jnp.asarray(_border_grid())
        grid = grid.at[xs[:-1], ys[:-1]].set(jnp.array([rules.KIND[k] for k in rules.PLACED], jnp.int32))
        state = CraftState(
            time=jnp.int32(0),
            grid=grid,
            pos=jnp.stack([xs[-1], ys[-1]]).astype(jnp.int32),
            direction=jax.random.randint(key_direction, (), 0, 4, dtype=jnp.int32),
            inventory=jnp.zeros(rules.NUM_KINDS, jnp.int32),
            task_id=jnp.asarray(params.task_id, jnp.int32),
            subtask=jnp.int32(0),
        )
        return self.get_obs(state), state

    def step_env(self, key: jax.Array, state: CraftState, action: int | jax.Array,
                 params: CraftParams) -> tuple[jax.Array, CraftState, jax.Array, jax.Array, dict[str, Any]]:
        del key  # the dynamics are deterministic
        action = jnp.asarray(action, jnp.int32)
        moves = jnp.asarray(rules.MOVES)
        is_move = action < 4
        is_use = action == rules.USE

        # moves: turn always, step only into an empty cell
        target = state.pos + moves[jnp.clip(action, 0, 3)]
        can_enter = is_move & (state.grid[target[0], target[1]] == rules.KIND["empty"])
        pos = jnp.where(can_enter, target, state.pos)
        direction = jnp.where(is_move, action, state.direction)

        # USE acts on the cell faced before this step (USE does not turn)
        front = state.pos + moves[state.direction]
        faced = state.grid[front[0], front[1]]
        inventory = state.inventory
        grab = is_use & (faced >= rules.GRABBABLE[0])
        inventory = inventory.at[faced].add(grab.astype(jnp.int32))
        clear = grab
        clear |= is_use & (faced == rules.KIND["water"]) & (inventory[rules.KIND["bridge"]] > 0)
        clear |= is_use & (faced == rules.KIND["stone"]) & (inventory[rules.KIND["axe"]] > 0)
        grid = state.grid.at[front[0], front[1]].set(jnp.where(clear, rules.KIND["empty"], faced))
        for row in range(len(rules.RECIPES)):  # file order; each sees the inventory the last left
            inputs = jnp.asarray(rules.RECIPE_INPUTS[row])
            craft = (is_use & (faced == int(rules.RECIPE_WORKSHOP[row])) & jnp.all(inventory >= inputs))
            inventory = inventory - inputs * craft + jax.nn.one_hot(int(rules.RECIPE_OUTPUT[row]),
                                                                    rules.NUM_KINDS, dtype=jnp.int32) * craft

        # the current "get X" subtask completes when inventory[X] rises
        table = jnp.asarray(self._task_table)
        length = jnp.asarray(self._task_lengths)[state.task_id]
        pending = state.subtask < length
        wanted = table[state.task_id, jnp.minimum(state.subtask, table.shape[1] - 1)]
        completed = pending & (inventory[wanted] > state.inventory[wanted])
        subtask = state.subtask + completed.astype(jnp.int32)
        finished = subtask >= length
        reward = jnp.where(params.dense_reward, completed, completed & finished).astype(jnp.float32)

        new_state = CraftState(time=state.time + 1, grid=grid, pos=pos, direction=direction,
                               inventory=inventory, task_id=state.task_id, subtask=subtask)
        info = {"subtask_completed": completed, "subtask_index": state.subtask, "success": finished}
        return self.get_obs(new_state), new_state, reward, finished, info

    def is_terminated(self, state: CraftState, params: CraftParams) -> jax.Array:
        return state.subtask >= jnp.asarray(self._task_lengths)[state.task_id]

    # -- observation --------------------------------------------------------------------------
    def get_obs(self, state: CraftState, params: CraftParams | None = None, key: jax.Array | None = None
                ) -> jax.Array:
        """[1075] float32, the layout of the module docstring."""
        one_hot = jax.nn.one_hot(state.grid, rules.NUM_KINDS, dtype=jnp.float32)      # [10, 10, 21]
        half = rules.WINDOW // 2
        padded = jnp.pad(one_hot, ((half, half), (half, half), (0, 0)))
        local = jax.lax.dynamic_slice(padded, (state.pos[0], state.pos[1], 0),
                                      (rules.WINDOW, rules.WINDOW, rules.NUM_KINDS))
        if self.full_view:
            big = rules.COARSE_WINDOW // 2
            padded = jnp.pad(one_hot, ((big, big), (big, big), (0, 0)))
            window = jax.lax.dynamic_slice(padded, (state.pos[0], state.pos[1], 0),
                                           (rules.COARSE_WINDOW, rules.COARSE_WINDOW, rules.NUM_KINDS))
            block = rules.COARSE_WINDOW // rules.WINDOW
            coarse = window.reshape(rules.WINDOW, block, rules.WINDOW, block, rules.NUM_KINDS).max(axis=(1, 3))
        else:
            coarse = jnp.zeros_like(local)
        direction = jax.nn.one_hot(state.direction, 4, dtype=jnp.float32)
        return jnp.concatenate([local.ravel(), coarse.ravel(), state.inventory.astype(jnp.float32), direction])


def _border_grid() -> np.ndarray:
    """[10, 10] int32: boundary on the border, empty inside."""
    grid = np.full((rules.WIDTH, rules.HEIGHT), rules.KIND["boundary"], dtype=np.int32)
    grid[1:-1, 1:-1] = rules.KIND["empty"]
    return grid
