"""Schedule policies: what a validation result does to the learning rate and to the run.

The trainer calls `policy.update(value)` after every validation with the
task's selection value and reads (improved, decay, stop): on `decay` it
multiplies the learning rate the optimiser state holds by the policy's
`factor` (`decayed`; the optimiser is made by `plateau_optimizer`, so the
rate is checkpointed with the rest and a decay recompiles nothing), on `stop`
it saves a checkpoint and ends the run early, naming the policy's
`stop_reason` in its message.

- `StepSchedule`: the rate is a function of the step inside the optimiser
  (warm-up + cosine, `tgjax.train.optimizer`); validation changes nothing.
- `Plateau`: decay after `lr_patience` validations without improvement,
  stop after `early_stopping_patience` (DuSell & Chiang 2024, Appendix D.3;
  the ON-LSTM recipe's plateau schedule is the same rule).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax


class StepSchedule:
    """Step-based: the optimiser's schedule sets the rate; `update` never decays nor stops."""

    def update(self, value: float) -> tuple[bool, bool, bool]:
        return False, False, False


class Plateau:
    """Appendix D.3's schedule on the validation criterion (lower is better; `mode="max"`: higher).

    `update(value)` after each epoch returns (improved, decay, stop): `decay`
    when `lr_patience` epochs in a row (since the best, or since the last
    decay) brought no improvement — the trainer multiplies the learning rate by
    `factor` — and `stop` after `early_stopping_patience` epochs without
    improvement. `state_dict()` / `load_state_dict()` carry the counters
    through a checkpoint's meta.
    """

    stop_reason = "no improvement: early stopping"  # the trainer's stop message

    def __init__(self, lr_patience: int, early_stopping_patience: int, mode: str = "min", *, factor: float = 0.5,
                 threshold: float = 0.0, threshold_offset: float = 0.0):
        if mode not in ("min", "max"):
            raise ValueError(f"Plateau mode must be 'min' or 'max', got {mode!r}")
        if not threshold >= 0.0:
            raise ValueError(f"Plateau threshold must be >= 0, got {threshold!r}")
        self.lr_patience, self.early_stopping_patience = lr_patience, early_stopping_patience
        self.factor = float(factor)  # the learning rate's multiplier at each decay
        self.sign = 1.0 if mode == "min" else -1.0  # compare sign * value, lower is better
        # An improvement must beat the best by threshold * |best + threshold_offset| (0: any improvement).
        # threshold > 0 with offset 0 is PyTorch's ReduceLROnPlateau(threshold_mode="rel"); the offset lets a
        # criterion that is a shifted loss (the CFL's Δ = cross-entropy - a constant true cross-entropy) apply
        # the relative threshold to the loss itself, as the stack-attention release does.
        self.threshold, self.threshold_offset = float(threshold), float(threshold_offset)
        self.best = self.sign * math.inf
        self.since_best = self.since_decay = 0

    def state_dict(self) -> dict:
        return {"best": self.best, "since_best": self.since_best, "since_decay": self.since_decay}

    def load_state_dict(self, saved: dict) -> None:
        self.best, self.since_best, self.since_decay = saved["best"], saved["since_best"], saved["since_decay"]

    def update(self, value: float) -> tuple[bool, bool, bool]:
        margin = 0.0 if math.isinf(self.best) else self.threshold * abs(self.best + self.threshold_offset)
        if self.sign * value < self.sign * self.best - margin:
            self.best = value
            self.since_best = self.since_decay = 0
            return True, False, False
        self.since_best += 1
        self.since_decay += 1
        stop = self.since_best >= self.early_stopping_patience
        decay = not stop and self.since_decay >= self.lr_patience
        if decay:
            self.since_decay = 0
        return False, decay, stop


def plateau_optimizer(direction: optax.GradientTransformation, learning_rate: float) -> optax.GradientTransformation:
    """`direction` (clipping, Adam's scaling, ...), then a step of `-learning_rate` times it, the rate held in the
    optimiser state (`optax.inject_hyperparams`): a plateau decays it there (`decayed`), so a checkpoint holds it
    and the compiled step is the same at every rate."""
    return optax.inject_hyperparams(
        lambda learning_rate: optax.chain(direction, optax.scale_by_learning_rate(learning_rate)))(
        learning_rate=learning_rate)


def decayed(state: Any, factor: float) -> tuple[Any, float]:
    """`state` (a dataclass with `opt_state`, a `plateau_optimizer`'s) with its learning rate times `factor`, and
    the new rate. The rate is multiplied in float32 from the stored one, so a resumed run decays to the rate an
    uninterrupted one does."""
    hyperparams = state.opt_state.hyperparams
    old = hyperparams["learning_rate"]
    new = jax.device_put(jnp.asarray(old * jnp.float32(factor), old.dtype), old.sharding)
    opt_state = state.opt_state._replace(hyperparams={**hyperparams, "learning_rate": new})
    return dataclasses.replace(state, opt_state=opt_state), float(new)
