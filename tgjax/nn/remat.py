"""Rematerialisation by policy name: what a layer keeps for the backward pass, and what it recomputes.

`model.remat` names one of `REMAT_POLICIES`:

    none                              keep everything (no remat)
    full                              keep only the layer's inputs; recompute the rest (jax.checkpoint's default)
    dots_saveable                     keep every matmul's output, recompute the elementwise work
    dots_with_no_batch_dims_saveable  keep the matmuls without batch dimensions (the projections and the
                                      feed-forward, not attention's [B, h, T, T] scores)
    everything_saveable               wrap the layer but keep everything (for comparison; costs memory as none)

Older configs said `remat=true` / `remat=false`: they mean `full` / `none`.
No policy changes a number, only what is kept in memory and recomputed.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from flax import nnx

# Policy name -> the `jax.checkpoint_policies` policy (None for "none": the layer is not wrapped).
REMAT_POLICIES: dict[str, Callable | None] = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
}
_BOOLEAN_NAMES = {"true": "full", "false": "none"}


def remat_policy_name(value: bool | str) -> str:
    """`model.remat` (a policy name, or the old true / false) -> a name in `REMAT_POLICIES`.

    Raises ValueError (one line, listing the names) for anything else.
    """
    if isinstance(value, bool):
        return "full" if value else "none"
    name = _BOOLEAN_NAMES.get(str(value).strip().lower(), str(value).strip().lower())
    if name not in REMAT_POLICIES:
        raise ValueError(f"model.remat={value!r}: unknown remat policy; expected one of "
                         f"{', '.join(REMAT_POLICIES)} (or true = full, false = none)")
    return name


def remat_layer(run_layer: Callable, value: bool | str) -> Callable:
    """`run_layer` under `nnx.remat` with the named policy (unchanged for "none")."""
    name = remat_policy_name(value)
    if name == "none":
        return run_layer
    return nnx.remat(run_layer, policy=REMAT_POLICIES[name])


def checkpoint_body(body: Callable, value: bool | str, **kwargs) -> Callable:
    """`body` under `jax.checkpoint` with the named policy (unchanged for "none"), for plain-JAX scans."""
    name = remat_policy_name(value)
    if name == "none":
        return body
    return jax.checkpoint(body, policy=REMAT_POLICIES[name], **kwargs)
