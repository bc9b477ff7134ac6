"""The rule-based demonstration bot for Craft, and the demonstration generator.

The bot restates OMPN's demo bot (released-code.md §5.4) for "get X" tasks:
a stack of GoTo(X) subgoals, one per subtask, over a belief map of the grid
(-1 = unknown) that every observation's 5x5 window updates.

* Target known: a breadth-first search from the agent to the nearest cell
  beside a believed X, through cells believed empty or still unknown (an
  unknown cell that turns out blocked only turns the agent; the window then
  reveals it and the next step plans again). Beside X: face it (a move
  toward a non-empty cell turns without moving), then USE.
* Target unknown: explore, along a shortest route (through cells believed
  empty or unknown, ties broken at random) to the nearest cell from which
  the window shows an unknown cell. OMPN's bot instead steps greedily
  (Manhattan distance) toward the first unknown cell in scan order; that
  stalls behind an obstacle (a workshop between the agent and a corner) and
  its generator throws such episodes away, which on these maps cost 5-10%
  of episodes and biases the kept ones toward open maps, so we deviate.
  The bot knows the border is boundary (it is on every map), so it never
  walks just to look at the edge.
* A subgoal is popped when the inventory of X has risen since it began; DONE
  once the stack is empty.

Host-side NumPy: it runs once to make data. `generate_demos` steps a batch
of environments under `jit(vmap(step_env))` and one bot per episode, keeps
the successful episodes (every subtask done within the time limit) with a
final DONE transition, as OMPN's generate_demo.py, and records each
subtask's boundary: the step whose action completed it (as the environment
reports it).
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from tgjax.envs import craft_rules as rules
from tgjax.envs.craft_episodes import CraftDemos

UNKNOWN = -1


class DemoBot:
    """One episode's bot. subtasks: kind ids of the task's "get X" subtasks, in order."""

    def __init__(self, subtasks: tuple[int, ...], rng: np.random.Generator):
        self.subgoals = list(subtasks)
        self.rng = rng
        self.belief = np.full((rules.WIDTH, rules.HEIGHT), UNKNOWN, dtype=np.int32)   # [x, y]
        # every map's border is boundary: known before looking, so exploration never walks to see it
        self.belief[[0, -1], :] = self.belief[:, [0, -1]] = rules.KIND["boundary"]
        self.start_count: int | None = None   # inventory[X] when the current subgoal began
        self.completed_at: list[int] = []     # step index of the action that completed each subgoal
        self.steps = 0

    def observe(self, obs: np.ndarray, pos: tuple[int, int]) -> None:
        """Write the 5x5 window of `obs` [1075] around `pos` (x, y) into the belief map."""
        window = np.asarray(obs[rules.LOCAL_VIEW]).reshape(rules.WINDOW, rules.WINDOW, rules.NUM_KINDS)
        half = rules.WINDOW // 2
        for i in range(rules.WINDOW):
            for j in range(rules.WINDOW):
                x, y = pos[0] + i - half, pos[1] + j - half
                if window[i, j].sum() > 0:  # in bounds
                    self.belief[x, y] = int(window[i, j].argmax())

    def act(self, obs: np.ndarray, pos: tuple[int, int], direction: int) -> int:
        """The action for this step from the observation, the agent's (x, y) and facing direction."""
        pos = (int(pos[0]), int(pos[1]))
        self.observe(obs, pos)
        inventory = np.asarray(obs[rules.INVENTORY])
        while self.subgoals:
            target = self.subgoals[0]
            if self.start_count is None:
                self.start_count = int(inventory[target])
            if inventory[target] > self.start_count:  # satisfied by the previous action
                self.subgoals.pop(0)
                self.completed_at.append(self.steps - 1)
                self.start_count = None
                continue
            break
        self.steps += 1
        if not self.subgoals:
            return rules.DONE
        action = self._go_to(self.subgoals[0], pos, int(direction))
        return self._explore(pos) if action is None else action

    # -- navigation ---------------------------------------------------------------------------
    def _passable(self, x: int, y: int) -> bool:
        return self.belief[x, y] in (rules.KIND["empty"], UNKNOWN)

    def _go_to(self, target: int, pos: tuple[int, int], direction: int) -> int | None:
        """Next action toward the nearest believed `target`; None if none is known or reachable."""
        targets = {(int(x), int(y)) for x, y in zip(*np.nonzero(self.belief == target))}
        if not targets:
            return None
        facing = (pos[0] + rules.MOVES[direction][0], pos[1] + rules.MOVES[direction][1])
        if facing in targets:
            return rules.USE
        for move in range(4):  # beside a target: turn toward it
            if (pos[0] + rules.MOVES[move][0], pos[1] + rules.MOVES[move][1]) in targets:
                return move
        # breadth-first search to the nearest cell beside a target; remember each cell's first move
        first_move = {pos: None}
        queue = deque([pos])
        while queue:
            cell = queue.popleft()
            for move in range(4):
                nxt = (cell[0] + rules.MOVES[move][0], cell[1] + rules.MOVES[move][1])
                if nxt in first_move or not (0 <= nxt[0] < rules.WIDTH and 0 <= nxt[1] < rules.HEIGHT):
                    continue
                if not self._passable(*nxt):
                    continue
                first_move[nxt] = move if cell == pos else first_move[cell]
                if any((nxt[0] + dx, nxt[1] + dy) in targets for dx, dy in rules.MOVES):
                    return first_move[nxt]
                queue.append(nxt)
        return None

    def _explore(self, pos: tuple[int, int]) -> int:
        """First move of a shortest route to the nearest cell whose 5x5 window holds an unknown cell
        (moves tried in random order, so ties break at random); a random move if there is none."""
        half = rules.WINDOW // 2
        unknown = self.belief == UNKNOWN
        padded = np.pad(unknown, half)
        # reveals[x, y]: standing at (x, y) shows some unknown cell
        reveals = np.zeros_like(unknown)
        for dx in range(rules.WINDOW):
            for dy in range(rules.WINDOW):
                reveals |= padded[dx:dx + rules.WIDTH, dy:dy + rules.HEIGHT]
        first_move = {pos: None}
        queue = deque([pos])
        while queue:
            cell = queue.popleft()
            for move in self.rng.permutation(4):
                move = int(move)
                nxt = (cell[0] + rules.MOVES[move][0], cell[1] + rules.MOVES[move][1])
                if nxt in first_move or not self._passable(*nxt):
                    continue
                first_move[nxt] = move if cell == pos else first_move[cell]
                if reveals[nxt]:
                    return first_move[nxt]
                queue.append(nxt)
        return int(self.rng.integers(4))


def generate_demos(task: str, num: int, seed: int = 0, dense_reward: bool = True, max_steps: int = 64,
                   full_view: bool = False, batch_size: int = 256, progress=None,
                   bot_factory=DemoBot) -> tuple[CraftDemos, dict]:
    """`num` successful demonstrations of `task` and a summary dict (episodes tried, success rate, seconds).

    `bot_factory(subtasks, rng)` makes each episode's bot (a `DemoBot` or a subclass that records more, as
    benchmarks/craft_subtask_value.py's); a kept episode's bot is the one whose `act` was called after the
    episode ended, for the final DONE.

    Each episode's arrays: observations [T + 1, 1075] (the last one is the final observation, paired
    with DONE), actions [T + 1], boundaries [num_subtasks] (the step of the action that completed each
    subtask, from the environment's info; the bot's own pops are checked against them).
    """
    import jax  # the generator drives the JAX environment; the bot itself is NumPy

    from tgjax.envs.craft import Craft

    if num < 1:
        raise ValueError(f"num must be >= 1, got {num}")
    env = Craft((task,), full_view=full_view)
    params = env.params(task, dense_reward=dense_reward, max_steps=max_steps)
    subtasks = env.task_subtasks(0)
    reset = jax.jit(jax.vmap(env.reset_env, in_axes=(0, None)))
    step = jax.jit(jax.vmap(env.step_env, in_axes=(None, 0, 0, None)))
    key = jax.random.key(seed)
    rng = np.random.default_rng(seed)

    episodes: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    tried = 0
    started = time.perf_counter()
    batch_index = 0
    while len(episodes) < num:
        keys = jax.random.split(jax.random.fold_in(key, batch_index), batch_size)
        batch_index += 1
        obs, state = reset(keys, params)
        bots = [bot_factory(subtasks, rng) for _ in range(batch_size)]
        observations = [[] for _ in range(batch_size)]
        actions = [[] for _ in range(batch_size)]
        boundaries = [[] for _ in range(batch_size)]
        active = np.ones(batch_size, bool)
        succeeded = np.zeros(batch_size, bool)
        for t in range(max_steps):
            obs_np, pos, direction = np.asarray(obs), np.asarray(state.pos), np.asarray(state.direction)
            chosen = np.full(batch_size, rules.DONE, np.int32)
            for b in np.nonzero(active)[0]:
                chosen[b] = bots[b].act(obs_np[b], pos[b], direction[b])
                observations[b].append(obs_np[b])
                actions[b].append(chosen[b])
            obs, state, _, finished, info = step(key, state, chosen, params)
            completed = np.asarray(info["subtask_completed"])
            finished = np.asarray(finished)
            for b in np.nonzero(active & completed)[0]:
                boundaries[b].append(t)
            succeeded |= active & finished
            active &= ~finished
            if not active.any():
                break
        obs_np, pos, direction = np.asarray(obs), np.asarray(state.pos), np.asarray(state.direction)
        for b in range(batch_size):
            if len(episodes) >= num:
                break
            tried += 1
            if not succeeded[b]:
                continue
            final = bots[b].act(obs_np[b], pos[b], direction[b])
            if final != rules.DONE or bots[b].completed_at != boundaries[b]:
                raise AssertionError(f"the bot's subgoal pops {bots[b].completed_at} (final action {final}) "
                                     f"disagree with the environment's completions {boundaries[b]}")
            episodes.append((np.stack(observations[b] + [obs_np[b]]),
                             np.array(actions[b] + [rules.DONE], np.int32), np.array(boundaries[b], np.int32)))
        if progress is not None:
            progress(len(episodes), tried)
    seconds = time.perf_counter() - started
    demos = CraftDemos.from_episodes(
        episodes, task=task, subtasks=np.array(subtasks, np.int32), env_version=rules.ENV_VERSION,
        max_steps=max_steps, dense_reward=dense_reward, full_view=full_view, seed=seed)
    return demos, {"episodes_tried": tried, "success_rate": len(episodes) / tried, "seconds": seconds}
