"""Behaviour-cloned Craft policies reused: a craft_bc run's checkpoint, its parameters, and options pooled.

    policy, meta = load_frozen_options("runs/ocn_craft")                        # K options of one run
    policy, meta = load_frozen_options("runs/ocn_AC_CA,runs/ocn_CD_DC")        # setting S2: 2 + 2 pooled

What reuses a BC run reads it through here: PPO in option space
(`tgjax.train.tasks.ppo_options`, the frozen options), PPO in action space
(`tgjax.train.tasks.ppo_actions`, the whole flat policy to fine-tune) and
`tgjax eval craft --workdir W1,W2` (the pooled options' table). Only the
parameters are restored (an orbax partial restore); the optimizer state
and the rest of the trainer's checkpoint are not read.

Setting S2 (thesis §5.3): two models, each one controller and its options
trained on its own task set; their options are pooled in the order the
workdirs are named (`pool_options`) and a fresh controller chooses among
all of them. The pooled policy's own controller and per-task states are
left at initialisation and never read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from tgjax.models.ocn import CraftPolicyConfig, OptionControllerPolicy, build_policy
from tgjax.train.config import ConfigError

__all__ = ["find_bc_checkpoint", "load_frozen_options", "options_workdirs", "pool_options", "restore_bc_policy"]

OPTIONS_KEY = "rl.options_workdir"
OPTIONS_REUSED = "PPO in option space reuses a behaviour-cloned OCN or MoE"

# What pooled option sets must share: the options' inputs, widths, depth and temperature, and the controller's
# temperature (the fresh controller takes it from the BC runs).
POOLED_MUST_AGREE = ("kind", "input_size", "hidden_size", "depth", "option_temperature", "controller_temperature")


def options_workdirs(value) -> list[str]:
    """`rl.options_workdir`: one workdir, or several separated by commas (setting S2: their options pooled)."""
    return [w.strip() for w in str(value).split(",") if w.strip()]


def find_bc_checkpoint(workdir: str | Path, step, key: str = OPTIONS_KEY,
                       reused: str = OPTIONS_REUSED) -> tuple[int, dict]:
    """(step, meta) of a craft_bc run's "best" (validation NLL), "latest" or numbered checkpoint.

    `key` (the config key or flag that named the workdir) and `reused` (what the caller reuses) only word the
    errors (ConfigError)."""
    from tgjax.train.checkpoint import CheckpointStore

    directory = Path(workdir)
    if not (directory / "checkpoints").is_dir():
        raise ConfigError(f"{key} {workdir}: no checkpoints (train configs/ocn_craft.py there first)")
    store = CheckpointStore(directory)
    try:
        latest = store.latest_step()
        if latest is None:
            raise ConfigError(f"{key} {workdir}: no checkpoints")
        meta = store.read_meta(latest)
        chosen = {"latest": latest, "best": meta.get("best_step") or latest}.get(str(step))
        chosen = int(step) if chosen is None else int(chosen)
        if chosen != latest:
            meta = store.read_meta(chosen)
    finally:
        store.close()
    trainer = (meta.get("config") or {}).get("trainer")
    if trainer != "craft_bc":
        raise ConfigError(f"{key} {workdir}: step {chosen} was written by trainer {trainer!r}, not "
                          f"'craft_bc': {reused}")
    return chosen, meta


def restore_bc_policy(workdir: str | Path, chosen: int, policy_config: CraftPolicyConfig) -> nnx.Module:
    """The policy of a craft_bc run's checkpoint `chosen`, built from `policy_config` (its recorded one):
    parameters only (an orbax partial restore)."""
    import orbax.checkpoint as ocp

    abstract = nnx.eval_shape(lambda: build_policy(policy_config, nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    target = {"params": jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), nnx.to_pure_dict(state))}
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    restored = ocp.PyTreeCheckpointer().restore(
        (Path(workdir) / "checkpoints" / str(chosen) / "state").resolve(),
        args=ocp.args.PyTreeRestore(item=target, partial_restore=True,
                                    restore_args=jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device),
                                                              target)))
    nnx.replace_by_pure_dict(state, restored["params"])
    return nnx.merge(graphdef, state)


def pool_options(policies: list[OptionControllerPolicy], names: list[str] | None = None) -> OptionControllerPolicy:
    """One policy whose K = sum K_i options are the given policies' options, in order (thesis §5.3, setting S2).

    Only the options (`options`, a CellBank with every parameter on a leading cell axis, and their initial
    states `h_o_init` [K, H]) are pooled; the pooled policy's controller and per-task states are left at
    initialisation. Raises ConfigError (naming the runs) when the option sets differ in what they must share.
    """
    if len(policies) == 1:
        return policies[0]
    names = names or [f"options run {i}" for i in range(len(policies))]
    first = policies[0].config
    for name, policy in zip(names[1:], policies[1:]):
        for field in POOLED_MUST_AGREE:
            mine, theirs = getattr(first, field), getattr(policy.config, field)
            if mine != theirs:
                raise ConfigError(f"{OPTIONS_KEY}: {names[0]} and {name} cannot be pooled: {field} "
                                  f"{mine!r} against {theirs!r}")
    pooled_config = dataclasses.replace(first, num_options=sum(p.config.num_options for p in policies),
                                        num_tasks=1)
    pooled = OptionControllerPolicy(pooled_config, rngs=nnx.Rngs(0))
    banks = [nnx.to_pure_dict(nnx.state(p.options, nnx.Param)) for p in policies]
    options_state = nnx.state(pooled.options, nnx.Param)
    nnx.replace_by_pure_dict(options_state, jax.tree.map(lambda *cells: jnp.concatenate(cells, axis=0), *banks))
    nnx.update(pooled.options, options_state)
    pooled.h_o_init[...] = jnp.concatenate([p.h_o_init[...] for p in policies], axis=0)
    return pooled


def load_frozen_options(workdir, step="best", key: str = OPTIONS_KEY) -> tuple[OptionControllerPolicy, dict]:
    """The options of one craft_bc run, or of several pooled (`options_workdirs`), and a meta dict:
    {"step": an int for one run, a list of ints for several; "kind"; "configs": each run's recorded config}."""
    workdirs = options_workdirs(workdir)
    if not workdirs:
        raise ConfigError(f"{key}: no workdir given")
    policies, steps, configs = [], [], []
    for one in workdirs:
        chosen, meta = find_bc_checkpoint(one, step, key=key)
        policy_config = CraftPolicyConfig(**meta["model"])
        if policy_config.kind not in ("ocn", "moe"):
            raise ConfigError(f"{key} {one}: a {policy_config.kind!r} policy has no options")
        policy = restore_bc_policy(one, chosen, policy_config)
        assert isinstance(policy, OptionControllerPolicy)
        policies.append(policy)
        steps.append(chosen)
        configs.append(meta.get("config") or {})
    policy = pool_options(policies, workdirs)
    return policy, {"step": steps[0] if len(steps) == 1 else steps, "kind": policy.config.kind, "configs": configs}
