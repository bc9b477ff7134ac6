"""Training batches as grain datasets, one epoch at a time, resumable at any step (no JAX).

A family describes an epoch as a `grain.MapDataset` whose item `i` is the
batch of the epoch's step `i` (this process's rows, a dict of NumPy arrays),
usually the epoch's plan (which examples go in which batch, in the epoch's
order) mapped through the function that builds a batch:

    def epoch(e: int) -> grain.MapDataset:
        plan = [batch_indices[i] for i in epoch_order(len(batch_indices), seed, e)]
        return grain.MapDataset.source(plan).map(lambda rows: local_rows(make_batch(rows), shard))

    batches = EpochBatches(epoch, position)      # position: None, or a checkpoint's {"epoch", "step"}
    batch = next(batches); batches.get_state()   # the position once `batch` is consumed

`EpochBatches` walks the epochs in turn; a restored iterator starts at the
checkpointed step by grain's random access, so nothing is replayed and a
resumed run reads exactly the batches an uninterrupted one would. The
position is what the trainer saves with each checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def round_up(n: int, multiple: int) -> int:
    """`n` rounded up to a multiple of `multiple`, and at least `multiple` (a width or row count never 0)."""
    return max(multiple, -(-n // multiple) * multiple)


def local_rows(batch: dict[str, np.ndarray], process_index: int, process_count: int) -> dict[str, np.ndarray]:
    """This process's contiguous share of a global batch's rows (the rows are a multiple of `process_count`)."""
    if process_count == 1:
        return batch
    rows = len(next(iter(batch.values()))) // process_count
    return {name: value[process_index * rows:(process_index + 1) * rows] for name, value in batch.items()}


def epoch_order(num_batches: int, seed: int, epoch: int) -> np.ndarray:
    """The order of an epoch's `num_batches` batches: a permutation drawn from (`seed`, `epoch`) alone."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(epoch,))).permutation(num_batches)


class EpochBatches:
    """Batches of `epoch_dataset(0)`, then of `epoch_dataset(1)`, ...; `get_state()` is {"epoch", "step"}, the
    batches of that epoch already given. An epoch of no batches is an error (it would never end)."""

    def __init__(self, epoch_dataset: Callable[[int], Any], position: dict | None = None):
        self.epoch_dataset = epoch_dataset
        self.epoch, self.step = (int(position["epoch"]), int(position["step"])) if position else (0, 0)
        self._dataset = epoch_dataset(self.epoch)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.step >= len(self._dataset):
            self.epoch, self.step = self.epoch + 1, 0
            self._dataset = self.epoch_dataset(self.epoch)
            if len(self._dataset) == 0:
                raise ValueError(f"epoch {self.epoch} of the training data has no batch")
        batch = self._dataset[self.step]
        self.step += 1
        return batch

    def get_state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step}


__all__ = ["EpochBatches", "epoch_order", "local_rows", "round_up"]
