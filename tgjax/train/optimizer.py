"""The paper's optimiser: Adam with linear warm-up then cosine decay, after global-norm clipping.

Sartran et al. (2022), Appendix B: the learning rate rises linearly from
`start_lr` (1e-7) to `max_lr` over `warmup_steps`, then decays with a cosine
to `min_lr` over `cosine_cycle_length` steps (and stays there). Names follow
the authors' release (`training.lr_schedule.name` / `.kwargs`), whose
`linear_warmup_then_cosine_anneal` this reproduces; give
`cosine_cycle_length = num_steps - warmup_steps` to end exactly at `min_lr`.

optax calls the schedule with the number of updates done so far, so the
first update uses `start_lr`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import optax

Schedule = Callable[[Any], Any]


def linear_warmup_then_cosine_anneal(start_lr: float, max_lr: float, min_lr: float, warmup_steps: int,
                                     cosine_cycle_length: int) -> Schedule:
    """step -> learning rate: `optax.warmup_cosine_decay_schedule` under the authors' names.

    `lr(0) = start_lr`, `lr(warmup_steps) = max_lr`, and
    `lr(warmup_steps + t) = min_lr + (max_lr - min_lr) * (1 + cos(pi * min(t / cycle, 1))) / 2`.
    optax counts its `decay_steps` from step 0 (warm-up included), the authors
    count `cosine_cycle_length` from the end of the warm-up. optax interpolates
    the warm-up as `(start_lr - max_lr) * (1 - t) + max_lr`, so in float32 its
    values are exact up to half an ulp of `max_lr`, not of themselves: with
    `max_lr = 1e-3` the first step's 1e-7 reads 1.0012e-7.
    """
    if warmup_steps < 0 or cosine_cycle_length <= 0:
        raise ValueError(f"lr_schedule: warmup_steps={warmup_steps} must be >= 0 and "
                         f"cosine_cycle_length={cosine_cycle_length} > 0")
    if max_lr == 0.0 and min_lr != 0.0:
        # optax decays to end_value as a fraction of the peak, which a zero peak cannot express
        raise ValueError(f"lr_schedule: max_lr=0 needs min_lr=0 (got {min_lr})")
    return optax.warmup_cosine_decay_schedule(init_value=start_lr, peak_value=max_lr, warmup_steps=warmup_steps,
                                              decay_steps=warmup_steps + cosine_cycle_length, end_value=min_lr)


def constant_lr(lr: float) -> Schedule:
    return lambda step: jnp.full((), lr, jnp.float32)


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "linear_warmup_then_cosine_anneal": linear_warmup_then_cosine_anneal,
    "constant": constant_lr,
}


def _call_with_kwargs(what: str, fn: Callable, kwargs: Mapping[str, Any]):
    """`fn(**kwargs)`, with an error naming the config keys that are unknown or missing."""
    params = inspect.signature(fn).parameters
    unknown = sorted(set(kwargs) - set(params))
    missing = sorted(n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in kwargs)
    if unknown or missing:
        raise ValueError(f"{what}: unknown key(s) {unknown}, missing key(s) {missing}; "
                         f"expected {sorted(params)}")
    return fn(**kwargs)


def make_schedule(name: str, kwargs: Mapping[str, Any]) -> Schedule:
    """The schedule `training.lr_schedule.name` with `training.lr_schedule.kwargs`."""
    if name not in SCHEDULES:
        raise ValueError(f"training.lr_schedule.name: unknown {name!r}; expected one of {sorted(SCHEDULES)}")
    return _call_with_kwargs(f"training.lr_schedule.kwargs ({name})", SCHEDULES[name], dict(kwargs))


def clip_gradients(max_norm: float | None) -> optax.GradientTransformation:
    """Scales the whole gradient by `min(1, max_norm / global_norm)`; identity when `max_norm` is None or <= 0."""
    if max_norm is None or max_norm <= 0:
        return optax.identity()
    return optax.clip_by_global_norm(max_norm)


def make_optimizer(training_config) -> tuple[optax.GradientTransformation, Schedule]:
    """`optax.chain(clip, adam(schedule))` from the `training` config section, and the schedule.

    Reads `clip_grad_norm`, `optimizer.name` ("adam" or "adamw") with
    `optimizer.kwargs` (b1, b2, eps, weight_decay for adamw), and `lr_schedule`.
    """
    schedule = make_schedule(training_config.lr_schedule.name, training_config.lr_schedule.kwargs)
    name = training_config.optimizer.name
    optimizers = {"adam": optax.adam, "adamw": optax.adamw}
    if name not in optimizers:
        raise ValueError(f"training.optimizer.name: unknown {name!r}; expected one of {sorted(optimizers)}")
    kwargs = dict(training_config.optimizer.kwargs)
    allowed = {"b1", "b2", "eps"} | ({"weight_decay"} if name == "adamw" else set())
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise ValueError(f"training.optimizer.kwargs ({name}): unknown key(s) {unknown}; "
                         f"expected some of {sorted(allowed)}")
    tx = optax.chain(clip_gradients(training_config.clip_grad_norm), optimizers[name](schedule, **kwargs))
    return tx, schedule
