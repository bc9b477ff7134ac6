"""Craft: hand-worked episodes, the observation layout, and an independent pure-Python oracle.

The oracle (`OracleCraft`) is written from released-code.md §5.4 with its own tables, not from
tgjax.envs.craft; hypothesis checks that both give the same trajectories under random actions
from random (also crafted, water- and stone-strewn) states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import skip_module_without  # noqa: E402

skip_module_without("gymnax")

from tgjax.envs import craft_rules as rules  # noqa: E402
from tgjax.envs.craft import Craft, CraftParams, CraftState  # noqa: E402

D, U, L, R, USE, DONE = range(6)

# ---------------------------------------------------------------------------------------------
# The oracle: own tables, restated from released-code.md §5.4
# ---------------------------------------------------------------------------------------------
ORACLE_KINDS = ["empty", "boundary", "water", "stone", "toolshed", "workbench", "factory", "iron", "grass",
                "wood", "gold", "gem", "plank", "stick", "axe", "rope", "bed", "shears", "cloth", "bridge",
                "ladder"]
ORACLE_RECIPES = [  # file order
    ("plank", "toolshed", {"wood": 1}), ("axe", "toolshed", {"stick": 1, "iron": 1}),
    ("rope", "toolshed", {"grass": 1}), ("stick", "workbench", {"wood": 1}),
    ("bed", "workbench", {"plank": 1, "grass": 1}), ("shears", "workbench", {"stick": 1, "iron": 1}),
    ("cloth", "factory", {"grass": 1}), ("bridge", "factory", {"wood": 1, "iron": 1}),
    ("ladder", "factory", {"plank": 1, "stick": 1})]
ORACLE_STEP = {0: (0, -1), 1: (0, 1), 2: (-1, 0), 3: (1, 0)}


class OracleCraft:
    """Plain-Python Craft: grid as a dict-of-names, inventory as a dict."""

    def __init__(self, grid, pos, direction, inventory, subtasks, dense):
        self.grid = [[ORACLE_KINDS[int(k)] for k in column] for column in grid]  # grid[x][y]
        self.pos = tuple(int(v) for v in pos)
        self.direction = int(direction)
        self.inventory = {name: int(n) for name, n in zip(ORACLE_KINDS, inventory)}
        self.subtasks = list(subtasks)   # names
        self.done_count = 0
        self.dense = dense

    def step(self, action):
        before = dict(self.inventory)
        if action in ORACLE_STEP:
            dx, dy = ORACLE_STEP[action]
            nx, ny = self.pos[0] + dx, self.pos[1] + dy
            if self.grid[nx][ny] == "empty":
                self.pos = (nx, ny)
            self.direction = action
        elif action == 4:
            dx, dy = ORACLE_STEP[self.direction]
            fx, fy = self.pos[0] + dx, self.pos[1] + dy
            thing = self.grid[fx][fy]
            if ORACLE_KINDS.index(thing) >= ORACLE_KINDS.index("iron"):
                self.inventory[thing] += 1
                self.grid[fx][fy] = "empty"
            elif thing in ("toolshed", "workbench", "factory"):
                for output, workshop, needs in ORACLE_RECIPES:
                    if workshop == thing and all(self.inventory[k] >= n for k, n in needs.items()):
                        for k, n in needs.items():
                            self.inventory[k] -= n
                        self.inventory[output] += 1
            elif thing == "water" and self.inventory["bridge"] > 0:
                self.grid[fx][fy] = "empty"
            elif thing == "stone" and self.inventory["axe"] > 0:
                self.grid[fx][fy] = "empty"
        completed = False
        if self.done_count < len(self.subtasks):
            wanted = self.subtasks[self.done_count]
            if self.inventory[wanted] > before[wanted]:
                completed = True
                self.done_count += 1
        finished = self.done_count == len(self.subtasks)
        reward = float(completed) if self.dense else float(completed and finished)
        return reward, finished

    def observation(self):
        obs = []
        for dx in range(-2, 3):
            for dy in range(-2, 3):
                x, y = self.pos[0] + dx, self.pos[1] + dy
                cell = [0.0] * 21
                if 0 <= x < 10 and 0 <= y < 10:
                    cell[ORACLE_KINDS.index(self.grid[x][y])] = 1.0
                obs += cell
        obs += [0.0] * 525
        obs += [float(self.inventory[k]) for k in ORACLE_KINDS]
        obs += [1.0 if d == self.direction else 0.0 for d in range(4)]
        return np.array(obs, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def make_state(objects: dict[tuple[int, int], str], pos, direction, inventory=None, task_id=0, subtask=0):
    grid = np.full((10, 10), 1, np.int32)
    grid[1:-1, 1:-1] = 0
    for (x, y), name in objects.items():
        grid[x, y] = rules.KIND[name]
    inv = np.zeros(21, np.int32)
    for name, count in (inventory or {}).items():
        inv[rules.KIND[name]] = count
    return CraftState(time=jnp.int32(0), grid=jnp.asarray(grid), pos=jnp.asarray(pos, jnp.int32),
                      direction=jnp.int32(direction), inventory=jnp.asarray(inv),
                      task_id=jnp.int32(task_id), subtask=jnp.int32(subtask))


def inventory_of(state) -> dict[str, int]:
    return {rules.KINDS[k]: int(n) for k, n in enumerate(np.asarray(state.inventory)) if n}


ENV = Craft(("AC", "A", "DBCA"))
STEP = jax.jit(ENV.step_env)
STEP_AUTO = jax.jit(ENV.step)
KEY = jax.random.key(0)


def run(state, actions, params):
    rewards, dones = [], []
    for action in actions:
        _, state, reward, done, _ = STEP(KEY, state, action, params)
        rewards.append(float(reward))
        dones.append(bool(done))
    return state, rewards, dones


# ---------------------------------------------------------------------------------------------
# hand-worked episodes
# ---------------------------------------------------------------------------------------------
def test_get_wood_then_iron_dense_and_sparse():
    # agent at (2,2) facing DOWN; wood right of it at (3,2); iron at (2,4), two cells up
    objects = {(3, 2): "wood", (2, 4): "iron"}
    actions = [R, USE, USE, U, USE]
    # R: blocked by wood -> turns right, stays; USE: wood (+1, subtask 0 done);
    # USE: faces the now-empty cell, nothing; U: moves to (2,3); USE: faces iron at (2,4) -> iron, task done
    dense = ENV.params("AC", dense_reward=True)
    state, rewards, dones = run(make_state(objects, (2, 2), D), actions, dense)
    assert rewards == [0, 1, 0, 0, 1]
    assert dones == [False, False, False, False, True]
    assert inventory_of(state) == {"wood": 1, "iron": 1}
    assert tuple(np.asarray(state.pos)) == (2, 3) and int(state.direction) == U
    assert int(state.subtask) == 2 and int(state.time) == 5
    grid = np.asarray(state.grid)
    assert grid[3, 2] == 0 and grid[2, 4] == 0

    sparse = ENV.params("AC", dense_reward=False)
    _, rewards, dones = run(make_state(objects, (2, 2), D), actions, sparse)
    assert rewards == [0, 0, 0, 0, 1]
    assert dones[-1] and not any(dones[:-1])


def test_out_of_order_pickup_pays_nothing():
    # task AC (wood, then iron): picking iron first is no subtask; the wood afterwards is
    objects = {(3, 2): "iron", (1, 2): "wood"}
    state, rewards, dones = run(make_state(objects, (2, 2), D), [R, USE, L, USE], ENV.params("AC"))
    assert rewards == [0, 0, 0, 1]
    assert int(state.subtask) == 1 and not any(dones)


def test_blocked_moves_turn_but_do_not_move():
    # boundary to the left of (1,1), workbench above it
    state, _, _ = run(make_state({(1, 2): "workbench"}, (1, 1), R), [L], ENV.params("A"))
    assert tuple(np.asarray(state.pos)) == (1, 1) and int(state.direction) == L
    state, _, _ = run(state, [U, D], ENV.params("A"))
    assert tuple(np.asarray(state.pos)) == (1, 1) and int(state.direction) == D
    state, _, _ = run(state, [R], ENV.params("A"))
    assert tuple(np.asarray(state.pos)) == (2, 1)


def test_workshop_recipes_chain_in_file_order():
    # at the workbench, wood + iron: stick (wood@workbench) fires, then shears (stick+iron@workbench)
    state = make_state({(3, 2): "workbench"}, (2, 2), R, {"wood": 1, "iron": 1})
    state, _, _ = run(state, [USE], ENV.params("A"))
    assert inventory_of(state) == {"shears": 1}
    # at the toolshed, wood + iron: plank fires; axe needs a stick, so iron stays
    state = make_state({(3, 2): "toolshed"}, (2, 2), R, {"wood": 1, "iron": 1})
    state, _, _ = run(state, [USE], ENV.params("A"))
    assert inventory_of(state) == {"plank": 1, "iron": 1}
    # factory with wood, iron, grass, plank, stick: cloth, bridge, ladder each once; workshop stays
    state = make_state({(3, 2): "factory"}, (2, 2), R,
                       {"wood": 2, "iron": 1, "grass": 1, "plank": 1, "stick": 1})
    state, _, _ = run(state, [USE], ENV.params("A"))
    assert inventory_of(state) == {"wood": 1, "cloth": 1, "bridge": 1, "ladder": 1}
    assert int(np.asarray(state.grid)[3, 2]) == rules.KIND["factory"]


def test_water_needs_a_bridge_and_stone_an_axe():
    state = make_state({(3, 2): "water", (2, 3): "stone"}, (2, 2), R)
    state, _, _ = run(state, [USE, U, USE], ENV.params("A"))
    grid = np.asarray(state.grid)
    assert grid[3, 2] == rules.KIND["water"] and grid[2, 3] == rules.KIND["stone"]
    state = make_state({(3, 2): "water", (2, 3): "stone"}, (2, 2), R, {"bridge": 1, "axe": 1})
    state, _, _ = run(state, [USE, U, USE], ENV.params("A"))
    grid = np.asarray(state.grid)
    assert grid[3, 2] == 0 and grid[2, 3] == 0
    assert inventory_of(state) == {"bridge": 1, "axe": 1}  # tools are kept


def test_done_action_is_a_no_op():
    state = make_state({(3, 2): "wood"}, (2, 2), R)
    after, rewards, _ = run(state, [DONE], ENV.params("A"))
    assert rewards == [0]
    assert np.array_equal(np.asarray(after.grid), np.asarray(state.grid))
    assert tuple(np.asarray(after.pos)) == (2, 2) and int(after.direction) == R


def test_time_limit_truncates_and_step_auto_resets():
    params = ENV.params("A", max_steps=3)
    state = make_state({(3, 2): "wood"}, (5, 5), D)
    truncs = []
    for _ in range(3):
        _, state, reward, terminated, truncated, info = STEP_AUTO(KEY, state, DONE, params)
        truncs.append((bool(terminated), bool(truncated)))
    assert truncs == [(False, False), (False, False), (False, True)]
    assert int(state.time) == 0  # gymnax auto-reset after the limit


def test_task_completion_terminates_with_auto_reset():
    params = ENV.params("A")
    state = make_state({(3, 2): "wood"}, (2, 2), R, task_id=ENV.task_id("A"))
    _, state, reward, terminated, truncated, info = STEP_AUTO(KEY, state, USE, params)
    assert float(reward) == 1 and bool(terminated) and not bool(truncated)
    assert bool(info["success"]) and int(state.time) == 0 and int(state.subtask) == 0


# ---------------------------------------------------------------------------------------------
# observation layout
# ---------------------------------------------------------------------------------------------
def local_index(dx, dy, kind):
    return ((dx + 2) * 5 + (dy + 2)) * 21 + rules.KIND[kind]


def test_observation_layout_for_a_known_state():
    state = make_state({(2, 3): "wood", (3, 1): "iron"}, (1, 1), U, {"grass": 2})
    obs = np.asarray(ENV.get_obs(state))
    assert obs.shape == (1075,) and obs.dtype == np.float32
    local = obs[:525]
    # 25 cells, 9 out of bounds (dx = -2 or dy = -2): 16 one-hots
    assert local.sum() == 16
    assert local[local_index(1, 2, "wood")] == 1       # (2, 3)
    assert local[local_index(2, 0, "iron")] == 1       # (3, 1)
    assert local[local_index(-1, 0, "boundary")] == 1  # (0, 1)
    assert local[local_index(0, -1, "boundary")] == 1  # (1, 0)
    assert local[local_index(0, 0, "empty")] == 1      # the agent's own cell
    assert local[((0 * 5) + 2) * 21:((0 * 5) + 3) * 21].sum() == 0  # dx = -2: out of bounds
    assert obs[525:1050].sum() == 0                     # no coarse view by default
    assert obs[1050 + rules.KIND["grass"]] == 2 and obs[1050:1071].sum() == 2
    assert list(obs[1071:]) == [0, 1, 0, 0]             # facing UP


def test_full_view_max_pools_a_25_window():
    env = Craft("A", full_view=True)
    state = make_state({(2, 3): "wood", (7, 8): "gold"}, (1, 1), U)
    coarse = np.asarray(env.get_obs(state))[525:1050].reshape(5, 5, 21)
    # block (bx, by) covers x in [-11 + 5 bx, -7 + 5 bx]: bx = 0, 1 are off the map
    assert coarse[:2].sum() == 0 and coarse[:, :2].sum() == 0
    assert coarse[2, 2, rules.KIND["wood"]] == 1        # (2, 3): bx = 2, by = 2
    assert coarse[3, 3, rules.KIND["gold"]] == 1        # (7, 8): bx = 3, by = 3 (both 4..8)
    assert coarse[3, 4, rules.KIND["gold"]] == 0 and coarse[:, :, rules.KIND["gold"]].sum() == 1
    assert coarse[4, 4, rules.KIND["boundary"]] == 1 and coarse[3, 3, rules.KIND["boundary"]] == 0
    assert coarse[3, 3, rules.KIND["empty"]] == 1


# ---------------------------------------------------------------------------------------------
# reset, vmap, construction errors
# ---------------------------------------------------------------------------------------------
def test_reset_places_one_of_each_and_vmaps_under_jit():
    keys = jax.random.split(jax.random.key(3), 64)
    params = ENV.params("DBCA")
    reset = jax.jit(jax.vmap(ENV.reset, in_axes=(0, None)))
    obs, states = reset(keys, params)
    grids = np.asarray(states.grid)
    assert obs.shape == (64, 1075)
    for grid, pos in zip(grids, np.asarray(states.pos)):
        assert (grid[0] == 1).all() and (grid[-1] == 1).all() and (grid[:, 0] == 1).all()
        inside = grid[1:-1, 1:-1]
        for name in rules.PLACED:
            assert (inside == rules.KIND[name]).sum() == 1
        assert (inside != 0).sum() == len(rules.PLACED)
        assert grid[pos[0], pos[1]] == 0
    assert len({g.tobytes() for g in grids}) == 64
    assert set(np.asarray(states.direction).tolist()) == {0, 1, 2, 3}
    # step all 64 under jit(vmap), each with its own action
    actions = jnp.arange(64) % 6
    step = jax.jit(jax.vmap(ENV.step, in_axes=(0, 0, 0, None)))
    obs2, states2, rewards, terminated, truncated, _ = step(keys, states, actions, params)
    assert obs2.shape == (64, 1075) and rewards.shape == (64,)
    assert np.array_equal(np.asarray(states2.direction)[actions < 4], np.asarray(actions)[actions < 4])
    # and over params: two tasks side by side
    both = jax.tree.map(lambda *x: jnp.stack(x), ENV.params("A"), ENV.params("AC"))
    _, two = jax.jit(jax.vmap(ENV.reset))(keys[:2], both)
    assert np.asarray(two.task_id).tolist() == [ENV.task_id("A"), ENV.task_id("AC")]


@pytest.mark.parametrize("task, message", [
    ("AX", "unknown Craft task name 'AX'"),
    ("", "unknown Craft task name ''"),
    ("AA", "subtask 1 of task 'AA', 'get wood', is unreachable"),
    (("wood", "gem"), "'get gem', is unreachable"),
    (("wood", "diamond"), "unknown kind 'diamond'"),
    (("toolshed",), "toolshed cannot be picked up"),
])
def test_bad_tasks_fail_at_construction(task, message):
    with pytest.raises(rules.CraftTaskError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Craft((task,))


def test_params_for_an_absent_task():
    with pytest.raises(rules.CraftTaskError, match="'CD' is not among"):
        ENV.params("CD")


# ---------------------------------------------------------------------------------------------
# the oracle property
# ---------------------------------------------------------------------------------------------
CELL_KINDS = ["empty"] * 6 + ["water", "stone", "toolshed", "workbench", "factory", "iron", "grass", "wood",
                               "gold", "gem", "plank", "stick"]


@st.composite
def craft_cases(draw):
    """A random crowded state and 30 USE-heavy actions, from a drawn seed (hypothesis' own small lists
    mostly draw empty cells and rarely face anything)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grid = np.full((10, 10), 1, np.int32)
    grid[1:-1, 1:-1] = np.array([rules.KIND[k] for k in rng.choice(CELL_KINDS, 64)]).reshape(8, 8)
    pos = tuple(int(v) for v in rng.integers(1, 9, 2))
    grid[pos] = 0
    inventory = np.zeros(21, np.int32)
    for name in ("wood", "iron", "grass", "plank", "stick", "bridge", "axe"):
        inventory[rules.KIND[name]] = rng.integers(0, 3)
    task_id = int(rng.integers(len(ENV.tasks)))
    direction = int(rng.integers(4))
    actions = [int(a) for a in rng.choice([D, U, L, R, USE, USE, USE, DONE], 30)]
    dense = bool(rng.integers(2))
    return grid, pos, direction, inventory, task_id, actions, dense


@settings(max_examples=40, deadline=None)
@given(craft_cases())
def test_matches_the_pure_python_oracle(case):
    grid, pos, direction, inventory, task_id, actions, dense = case
    state = CraftState(time=jnp.int32(0), grid=jnp.asarray(grid), pos=jnp.asarray(pos, jnp.int32),
                       direction=jnp.int32(direction), inventory=jnp.asarray(inventory),
                       task_id=jnp.int32(task_id), subtask=jnp.int32(0))
    params = CraftParams(dense_reward=dense, task_id=task_id)
    subtasks = [rules.KINDS[k] for k in ENV.task_subtasks(task_id)]
    oracle = OracleCraft(grid, pos, direction, inventory, subtasks, dense)
    assert np.array_equal(np.asarray(ENV.get_obs(state)), oracle.observation())
    for action in actions:
        obs, state, reward, done, _ = STEP(KEY, state, action, params)
        want_reward, want_done = oracle.step(action)
        assert float(reward) == want_reward and bool(done) == want_done
        assert np.array_equal(np.asarray(obs), oracle.observation())
        assert [[rules.KINDS[k] for k in col] for col in np.asarray(state.grid)] == oracle.grid
        assert int(state.subtask) == oracle.done_count


@settings(max_examples=60, deadline=None)
@given(workshop=st.sampled_from(["toolshed", "workbench", "factory"]),
       counts=st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_workshop_use_matches_the_oracle(workshop, counts):
    """Every recipe combination at every workshop: the chains of the file order, against the oracle."""
    inventory = np.zeros(21, np.int32)
    for name, count in zip(("wood", "iron", "grass", "plank", "stick"), counts):
        inventory[rules.KIND[name]] = count
    state = make_state({(3, 2): workshop}, (2, 2), R, dict(zip(("wood", "iron", "grass", "plank", "stick"), counts)))
    oracle = OracleCraft(np.asarray(state.grid), (2, 2), R, inventory, ["wood"], True)
    _, state, reward, _, _ = STEP(KEY, state, USE, ENV.params("AC"))
    want_reward, _ = oracle.step(USE)
    assert inventory_of(state) == {k: n for k, n in oracle.inventory.items() if n}
    assert float(reward) == want_reward
