"""Ordered Memory's classification data on the host (`trainer="classification"`,
`tgjax.train.tasks.classification`): ListOps and logical inference examples, their splits and padded batches.

- `load_splits`: the training, validation and test examples of a config's
  `data` section (ListOps: generated training and validation sets, the
  shipped test file; logic: the original files, a length or systematicity
  split), with what was skipped and a fingerprint of the training examples.
  A process keeps the last logic files it read and the last ListOps sets it
  generated (`logic_files`, `generated_listops`), so that the Trainers one
  process builds in turn (the reproduction runner's chunks) do not parse the
  250k lines or draw the trees again.
- `epoch_batches`: smart batching as the release (shuffle, sort by length
  inside windows of 10 batches, shuffle the batches), a function of
  (seed, epoch) only; `train_epochs` makes each epoch a `grain.MapDataset` of
  padded batches for `tgjax.data.batching.EpochBatches`.
- `encode_batch`: a fixed number of rows, the examples then empty rows of
  weight 0; `eval_batches`: a whole split sorted by length.

Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tgjax.data import listops, logic
from tgjax.data.batching import local_rows, round_up

SMART_BATCH_WINDOW = 10  # batches per sorted window (the release's 10 shards)


@dataclasses.dataclass
class Split:
    """Examples of one split with their token lengths (the longer side of a pair)."""

    examples: list
    lengths: np.ndarray  # [n] int


def example_length(dataset: str, example) -> int:
    """An example's tokens: the ListOps expression's, or the longer side of a logic pair."""
    if dataset == "listops":
        return listops.num_tokens(example.expression)
    return max(len(logic.tokens_of(example.left)), len(logic.tokens_of(example.right)))


def make_split(dataset: str, examples) -> Split:
    return Split(list(examples), np.array([example_length(dataset, e) for e in examples], dtype=np.int64))


# -----------------------------------------------------------------------------
# Reading.


def logic_files(directory: str | Path) -> logic.LogicFiles:
    """Every logic file of `directory`, read once per process while the files stay as they were (their names,
    sizes and modification times): the reproduction runner builds a Trainer per chunk, and parsing the 250k
    lines took 8-17 s each time on 2 CPU cores. The buckets are tuples: every caller shares them."""
    path = Path(directory)
    if not path.is_dir():
        return logic.LogicFiles.read(path)  # its own one-line error
    stats = {p.name: p.stat() for p in path.iterdir() if p.is_file()}
    signature = tuple(sorted((name, stat.st_size, stat.st_mtime_ns) for name, stat in stats.items()))
    return _read_logic_files(str(path.resolve()), signature)


@functools.lru_cache(maxsize=1)
def _read_logic_files(directory: str, signature: tuple) -> logic.LogicFiles:
    del signature  # only the cache's key: another signature reads the files again
    files = logic.LogicFiles.read(directory)
    return logic.LogicFiles({n: tuple(v) for n, v in files.train.items()},
                            {n: tuple(v) for n, v in files.test.items()})


@functools.lru_cache(maxsize=1)
def generated_listops(train_size: int, valid_size: int, seed: int, max_tokens: int | None) -> tuple[tuple, tuple]:
    """ListOps' generated (training, validation) sets, the validation trees distinct from the training ones;
    the last pair is kept for the process (a function of its arguments: 20k trees took 6 s, 90k about 30 s)."""
    train = listops.generate(train_size, seed=seed, max_tokens=max_tokens)
    valid = listops.generate(valid_size, seed=seed + 1, max_tokens=max_tokens, exclude=[e.expression for e in train])
    return tuple(train), tuple(valid)


@dataclasses.dataclass
class ClassificationData:
    """A dataset's splits: `tests` by name (ListOps "test"; logic "ops7".. or "A/3"..), `skipped` counts
    ({"test": n} when ListOps' `test_max_tokens` dropped n), `test_note` (the test file is absent), and
    `fingerprint`, the SHA-256 of the training examples (a checkpoint of other data is refused)."""

    train: Split
    valid: Split
    tests: dict[str, Split]
    skipped: dict[str, int]
    test_note: str | None
    fingerprint: str


def example_text(dataset: str, example) -> str:
    """One line per example (label and text) for the training data's fingerprint."""
    if dataset == "listops":
        return f"{example.label}\t{listops.to_bracketed(example.expression)}"
    return f"{example.relation}\t{example.text}"


def load_splits(dataset: str, data) -> ClassificationData:
    """The splits of `dataset` ("listops" or "logic") as the config's `data` section says."""
    d = data
    skipped: dict[str, int] = {}
    tests: dict[str, list] = {}
    test_note = None
    if dataset == "listops":
        train, valid = generated_listops(d.train_size, d.valid_size, d.seed, d.max_train_tokens)
        if d.test_path:
            if Path(d.test_path).is_file():
                examples = listops.read_listops(d.test_path).examples
                if d.test_max_tokens:
                    kept = [e for e in examples if listops.num_tokens(e.expression) <= d.test_max_tokens]
                    skipped["test"] = len(examples) - len(kept)
                    examples = kept
                tests["test"] = examples
            else:
                test_note = f"no ListOps test file at {d.test_path}: no test accuracy at the end"
    else:
        files = logic_files(d.logic_dir)
        splits = (logic.length_split(files) if d.split == "length"
                  else logic.systematicity_split(files, d.split))
        train, valid = splits.train, splits.valid
        tests = {f"{d.split}/{n}" if d.split != "length" else f"ops{n}": examples
                 for n, examples in splits.test.items() if examples}
    if d.max_train_examples and d.max_train_examples < len(train):
        rng = np.random.default_rng(np.random.SeedSequence(d.seed, spawn_key=(1_000_003,)))
        keep = np.sort(rng.choice(len(train), d.max_train_examples, replace=False))
        train = [train[i] for i in keep]
    if d.max_valid_examples:
        valid = valid[:d.max_valid_examples]
    text = "\n".join(example_text(dataset, e) for e in train)
    return ClassificationData(
        train=make_split(dataset, train), valid=make_split(dataset, valid),
        tests={name: make_split(dataset, examples) for name, examples in tests.items()}, skipped=skipped,
        test_note=test_note, fingerprint=hashlib.sha256(text.encode()).hexdigest())


# -----------------------------------------------------------------------------
# Batches.


def encode_batch(dataset: str, examples, rows: int, width: int) -> dict[str, np.ndarray]:
    """`rows` rows of width `width`: the examples, then empty rows of weight 0.

    listops: inputs [rows, T] (left-padded, the release's side), valid [rows, T];
    logic: left, right [rows, T] (right-padded), left_valid, right_valid;
    both: labels [rows] int32, weights [rows] float32 (1 real, 0 filler).
    """
    n = len(examples)
    if n > rows:
        raise ValueError(f"{n} examples do not fit in a batch of {rows} rows")
    weights = np.zeros(rows, np.float32)
    weights[:n] = 1.0
    labels = np.zeros(rows, np.int32)
    if dataset == "listops":
        inputs = np.full((rows, width), listops.PAD_ID, np.int32)
        if n:
            encoded = listops.encode(examples, pad_to=width, pad_side="left")
            inputs[:n], labels[:n] = encoded["inputs"], encoded["labels"]
        return {"inputs": inputs, "valid": inputs != listops.PAD_ID, "labels": labels, "weights": weights}
    left = np.full((rows, width), logic.PAD_ID, np.int32)
    right = np.full((rows, width), logic.PAD_ID, np.int32)
    if n:
        encoded = logic.encode(examples, pad_to=width)
        left[:n], right[:n], labels[:n] = encoded["left"], encoded["right"], encoded["labels"]
    return {"left": left, "right": right, "left_valid": left != logic.PAD_ID, "right_valid": right != logic.PAD_ID,
            "labels": labels, "weights": weights}


def epoch_batches(split: Split, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Epoch `epoch`'s batches as index arrays: shuffle, sort windows of 10 batches by length, shuffle batches.

    A function of (seed, epoch) only, so a resumed run rebuilds the same epoch.
    (The release's order: one generator draws the examples' and then the
    batches' permutations, so it is not `tgjax.data.batching.epoch_order`.)
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(epoch,)))
    order = rng.permutation(len(split.examples))
    window = batch_size * SMART_BATCH_WINDOW
    batches = []
    for start in range(0, len(order), window):
        chunk = order[start:start + window]
        chunk = chunk[np.argsort(split.lengths[chunk], kind="stable")]
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def train_epochs(dataset: str, split: Split, batch_size: int, seed: int, length_bucket: int, *,
                 process_index: int = 0, process_count: int = 1) -> Callable[[int], Any]:
    """epoch -> a `grain.MapDataset` of that epoch's training batches (this process's rows), for `EpochBatches`:
    `epoch_batches`' order, each batch `batch_size` rows wide enough for its longest example, rounded up to a
    multiple of `length_bucket`. The last, partial batch of an epoch is filled with rows of weight 0."""

    def batch(indices: np.ndarray) -> dict[str, np.ndarray]:
        width = round_up(int(split.lengths[indices].max()), length_bucket)
        encoded = encode_batch(dataset, [split.examples[i] for i in indices], batch_size, width)
        return local_rows(encoded, process_index, process_count)

    def epoch(e: int):
        import grain  # the loader; imported here so that `import tgjax.data` stays light

        return grain.MapDataset.source(epoch_batches(split, batch_size, seed, e)).map(batch)

    return epoch


def eval_batches(dataset: str, split: Split, batch_size: int) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """(example indices, batch) over a whole split, sorted by length, widths rounded up to a power of two >= 32.

    Few widths, few compilations; the recurrence carries its state over padding, so width changes nothing.
    """
    order = np.argsort(split.lengths, kind="stable")
    out = []
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        width = max(32, 1 << int(math.ceil(math.log2(max(int(split.lengths[indices].max()), 1)))))
        out.append((indices, encode_batch(dataset, [split.examples[i] for i in indices], batch_size, width)))
    return out


__all__ = ["SMART_BATCH_WINDOW", "ClassificationData", "Split", "encode_batch", "epoch_batches", "eval_batches",
           "example_length", "example_text", "load_splits", "make_split", "train_epochs"]
