"""The device mesh ("data", "model") and the shardings of parameters, optimiser state, batches and memory.

Parameters carry logical axis names as Flax NNX partition metadata
(`out_sharding`, set by `tgjax.nn.params.param`; `nnx.get_partition_spec`
reads it, and a scanned model's stacked axis is named "layers" there); the
config's rules map each name to a mesh axis (or None: replicated), MaxText
style:

    (("vocab", "model"), ("mlp", "model"), ("heads", "model"), ("embed", None), ("kv", None))

so one model runs data-parallel (`mesh.model=1`), model-parallel
(`mesh.data=1`) or both, from the same code. `mesh.fsdp=true` puts
`FSDP_RULES` ahead of the config's rules: every parameter's "embed"
dimension (and so its Adam moments') is split over "data" too, and a
parameter without one (an MLP of hidden widths) gets its largest dimension
that no rule placed and "data" divides split over "data" (the rule name
`ANY_FREE_DIMENSION`). Each device so holds about 1/data of the parameters
and optimiser state (FSDP / ZeRO-3), and XLA gathers a layer's parameters
where the layer uses them. Batches `[B, ...]` and the memory
`[K, B, M, d]` are split over "data" along B. A name no rule mentions (e.g.
"layers") is replicated. A dimension that a mesh axis does
not divide is replicated instead (and reported once), so odd vocabulary
sizes still run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

log = logging.getLogger(__name__)

MESH_AXES = ("data", "model")
# With `mesh.fsdp`: ahead of the config's rules, so "embed" goes to "data" (the rules' own target for it stays
# the fallback where "data" is taken already).
# A rule of this name places a parameter's largest dimension that no other rule placed (never "layers", the
# stacked axis of a scanned model) on its mesh axes, unless the parameter is on them already.
ANY_FREE_DIMENSION = "*"
FSDP_RULES = (("embed", "data"), (ANY_FREE_DIMENSION, "data"))
Rules = Sequence[tuple[str, str | Sequence[str] | None]]


def make_mesh(data: int = -1, model: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A `data x model` mesh over `devices` (default: all); one of the two may be -1 (the rest).

    Devices are laid out so that the "model" axis varies fastest, i.e. the
    devices of one model replica are neighbours (same host where possible).
    """
    devices = list(jax.devices() if devices is None else devices)
    n = len(devices)
    if data == -1 and model == -1:
        raise ValueError("mesh: at most one of mesh.data and mesh.model may be -1")
    if data == -1:
        if model <= 0 or n % model:
            raise ValueError(f"mesh.model={model} does not divide the {n} devices")
        data = n // model
    elif model == -1:
        if data <= 0 or n % data:
            raise ValueError(f"mesh.data={data} does not divide the {n} devices")
        model = n // data
    if data * model != n:
        raise ValueError(f"mesh: data={data} x model={model} = {data * model}, but there are {n} devices")
    return jax.make_mesh((data, model), MESH_AXES, axis_types=(AxisType.Auto, AxisType.Auto), devices=devices)


def config_rules(config) -> tuple:
    """The config's `mesh.logical_axis_rules` as a tuple of pairs (the shipped defaults where it has none),
    after `FSDP_RULES` with `mesh.fsdp`."""
    from tgjax.train.config import DEFAULT_LOGICAL_AXIS_RULES  # config imports nothing of train: no cycle

    rules = config.mesh.get("logical_axis_rules", None) or DEFAULT_LOGICAL_AXIS_RULES
    fsdp = FSDP_RULES if config.mesh.get("fsdp", False) else ()
    return tuple(tuple(rule) for rule in (*fsdp, *rules))


def logical_to_spec(logical_axes: Sequence[str | None] | None, rules: Rules) -> P:
    """Logical axis names -> a `PartitionSpec` by the first matching rule whose mesh axes are still free."""
    if logical_axes is None:
        return P()
    table: dict[str, list] = {}
    for name, target in rules:
        table.setdefault(name, []).append(target)
    used: set[str] = set()
    spec = []
    for name in logical_axes:
        chosen = None
        for target in table.get(name, []) if name is not None else []:
            axes = (target,) if isinstance(target, str) or target is None else tuple(target)
            if target is None or not used.intersection(axes):
                chosen = target
                break
        if chosen is not None:
            used.update((chosen,) if isinstance(chosen, str) else chosen)
        spec.append(tuple(chosen) if isinstance(chosen, list) else chosen)
    return P(*spec)


def fit_spec(spec: P, shape: Sequence[int], mesh: Mesh, *, what: str = "") -> P:
    """`spec` with every dimension that its mesh axes do not divide replicated instead."""
    fitted = []
    for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
        names = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
        size = int(np.prod([mesh.shape[a] for a in names])) if names else 1
        if size > 1 and dim % size:
            log.info("sharding: %s dimension %d is not divisible by mesh axes %s (%d); replicated", what, dim,
                     names, size)
            axes = None
        fitted.append(axes)
    return P(*fitted)


def _axes_of(entry) -> tuple[str, ...]:
    """The mesh axes of one `PartitionSpec` entry (None, a name or a tuple of names)."""
    return () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))


def place_free_dimension(spec: P, names: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules: Rules) -> P:
    """`spec` with each `ANY_FREE_DIMENSION` rule applied: the largest dimension left whole (replicated, or on
    mesh axes of size 1; not "layers") that the rule's mesh axes divide goes on them, unless `spec` uses them
    already."""
    entries = list(spec) + [None] * (len(shape) - len(spec))
    names = tuple(names) + (None,) * (len(shape) - len(names))
    size_of = lambda axes: int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
    for rule_name, target in rules:
        axes = _axes_of(target)
        used = {axis for entry in entries for axis in _axes_of(entry)}
        if rule_name != ANY_FREE_DIMENSION or size_of(axes) <= 1 or used.intersection(axes):
            continue
        free = [i for i, entry in enumerate(entries)
                if size_of(_axes_of(entry)) == 1 and names[i] != "layers" and shape[i] % size_of(axes) == 0]
        if free:
            entries[max(free, key=lambda i: shape[i])] = target
    return P(*entries)


def _is_variable(x) -> bool:
    return isinstance(x, nnx.Variable)


def variable_shardings(tree: Any, mesh: Mesh, rules: Rules) -> Any:
    """`NamedSharding` of every leaf of a tree of (abstract) NNX Variables and arrays, in the tree's layout.

    A Variable's partition is its NNX metadata (`out_sharding`, logical names),
    read by `nnx.get_partition_spec` and mapped through `rules`; any other
    array leaf (an optimiser's step count) is replicated. A Variable comes back
    as a Variable holding its sharding.
    """
    logical = nnx.get_partition_spec(tree)

    def sharding_of(leaf, spec):
        if _is_variable(leaf):
            names = tuple(spec.get_value())
            mesh_spec = fit_spec(logical_to_spec(names, rules), leaf.shape, mesh, what=f"parameter {names}")
            mesh_spec = place_free_dimension(mesh_spec, names, leaf.shape, mesh, rules)
            return spec.replace(NamedSharding(mesh, mesh_spec))
        return NamedSharding(mesh, P())

    return jax.tree.map(sharding_of, tree, logical, is_leaf=_is_variable)


def _pure(tree: Any) -> Any:
    """Every `nnx.State` in `tree` as a pure dict (the layout the train state keeps its arrays in)."""
    return jax.tree.map(lambda x: nnx.to_pure_dict(x) if isinstance(x, nnx.State) else x, tree,
                        is_leaf=lambda x: isinstance(x, nnx.State))


def param_shardings(abstract_params: nnx.State, mesh: Mesh, rules: Rules) -> dict:
    """`NamedSharding` of every parameter, as a pure dict shaped like `nnx.to_pure_dict(params)`.

    `abstract_params` is the `nnx.Param` state (abstract or concrete), whose
    Variables carry their logical axes as NNX partition metadata.
    """
    return nnx.to_pure_dict(variable_shardings(abstract_params, mesh, rules))


def opt_state_shardings(tx: optax.GradientTransformation, abstract_params: nnx.State, mesh: Mesh,
                        rules: Rules) -> Any:
    """Shardings of `tx.init(nnx.to_pure_dict(params))`: each moment as its parameter, counts replicated.

    As `nnx.Optimizer` does, the optimiser state is initialised (abstractly)
    from the parameters as NNX Variables, so every moment carries its
    parameter's partition metadata; the States are then made pure dicts.
    """
    abstract_opt_state = jax.eval_shape(tx.init, abstract_params)
    return _pure(variable_shardings(abstract_opt_state, mesh, rules))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Every batch field `[B, ...]`: rows split over "data"."""
    return NamedSharding(mesh, P("data"))


def memory_sharding(mesh: Mesh) -> NamedSharding:
    """The TXL memory `[K, B, M, d]`: rows split over "data"."""
    return NamedSharding(mesh, P(None, "data"))


def check_batch_divides(batch_size: int, mesh: Mesh, what: str) -> None:
    if batch_size % mesh.shape["data"]:
        raise ValueError(f"{what}={batch_size} is not divisible by the mesh's data axis ({mesh.shape['data']})")


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This host's rows `[B_local, ...]` -> global arrays `[B, ...]` split over "data" (one call per host)."""
    sharding = batch_sharding(mesh)
    return {name: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for name, value in local_batch.items()}
