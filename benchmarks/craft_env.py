"""Craft environment throughput: many episodes under jit(vmap) against one.

One timed call is a jitted `lax.scan` of 64 steps (the time limit) of gymnax's auto-resetting `step`
with uniformly random actions, over B episodes at once (`vmap`) and over a single episode; both are
timed alternately in the same process (so a shared machine's load falls on both sides) and the
medians give environment steps per second and their ratio.

    python benchmarks/craft_env.py [--batch 4096] [--repeats 5] [--task ACD]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

from tgjax.envs.craft import Craft

STEPS = 64


def make_rollout(env: Craft, params, batch: int):
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset = jax.vmap(env.reset, in_axes=(0, None))

    @jax.jit
    def rollout(key):
        key_reset, key_run = jax.random.split(key)
        _, state = reset(jax.random.split(key_reset, batch), params)

        def body(carry, key_t):
            state, total = carry
            key_act, key_step = jax.random.split(key_t)
            actions = jax.random.randint(key_act, (batch,), 0, env.num_actions)
            _, state, reward, _, _, _ = step(jax.random.split(key_step, batch), state, actions, params)
            return (state, total + reward.sum()), None

        (_, total), _ = jax.lax.scan(body, (state, jnp.float32(0)), jax.random.split(key_run, STEPS))
        return total

    return rollout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--task", default="ACD")
    args = parser.parse_args()
    env = Craft((args.task,))
    params = env.params(args.task)
    sides = {"batched": (make_rollout(env, params, args.batch), args.batch),
             "single": (make_rollout(env, params, 1), 1)}
    times = {name: [] for name in sides}
    for rollout, _ in sides.values():
        rollout(jax.random.key(0)).block_until_ready()  # compile
    for repeat in range(args.repeats):
        for name, (rollout, _) in sides.items():
            start = time.perf_counter()
            rollout(jax.random.key(repeat + 1)).block_until_ready()
            times[name].append(time.perf_counter() - start)
    rates = {name: sides[name][1] * STEPS / statistics.median(times[name]) for name in sides}
    print(f"device {jax.devices()[0].platform}; task {args.task}; {STEPS} steps per call")
    print(f"batched B={args.batch}: {rates['batched']:,.0f} env steps/s; single: {rates['single']:,.0f} env steps/s")
    print(f"ratio batched/single: {rates['batched'] / rates['single']:.1f}x")


if __name__ == "__main__":
    main()
