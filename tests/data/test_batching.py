"""The grain batches every family's training data goes through: resume at any step, rows per process, orders."""

import grain
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tgjax.data.batching import EpochBatches, epoch_order, local_rows, round_up


def _epochs(sizes: list[int], seed: int):
    """Epoch e: `sizes[e % len(sizes)]` batches, each {"x": [epoch, position, item]}, in the epoch's order."""

    def epoch(e: int):
        order = epoch_order(sizes[e % len(sizes)], seed, e)
        return grain.MapDataset.source(list(order)).map(lambda i: {"x": np.array([e, int(i)])})

    return epoch


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3), seed=st.integers(0, 99),
       stop=st.integers(0, 12))
def test_a_restored_iterator_continues_as_an_uninterrupted_one(sizes, seed, stop):
    whole = EpochBatches(_epochs(sizes, seed))
    expected = [next(whole)["x"].tolist() for _ in range(stop + 8)]
    first = EpochBatches(_epochs(sizes, seed))
    for _ in range(stop):
        next(first)
    resumed = EpochBatches(_epochs(sizes, seed), first.get_state())
    assert [next(resumed)["x"].tolist() for _ in range(8)] == expected[stop:]
    # every epoch gives each of its batches once, in its own order
    epochs = [x for x, _ in expected]
    for e in set(epochs[:-1]) - {max(epochs)}:
        assert sorted(i for x, i in expected if x == e) == list(range(sizes[e % len(sizes)]))


def test_position_counts_the_batches_given_of_the_current_epoch():
    batches = EpochBatches(_epochs([2], 0))
    assert batches.get_state() == {"epoch": 0, "step": 0}
    next(batches), next(batches)
    assert batches.get_state() == {"epoch": 0, "step": 2}
    next(batches)
    assert batches.get_state() == {"epoch": 1, "step": 1}


@given(rows=st.integers(1, 6), processes=st.sampled_from([1, 2, 4]))
def test_the_processes_rows_put_together_are_the_batch(rows, processes):
    batch = {"a": np.arange(rows * processes * 3).reshape(rows * processes, 3), "b": np.arange(rows * processes)}
    parts = [local_rows(batch, p, processes) for p in range(processes)]
    for name in batch:
        np.testing.assert_array_equal(np.concatenate([part[name] for part in parts]), batch[name])
        assert all(len(part[name]) == rows for part in parts)


@given(n=st.integers(0, 1000), multiple=st.integers(1, 64))
def test_round_up(n, multiple):
    value = round_up(n, multiple)
    assert value % multiple == 0 and value >= max(n, multiple) and value - max(n, 1) < multiple


def test_epoch_orders_are_permutations_fixed_by_seed_and_epoch():
    assert sorted(epoch_order(7, 3, 0)) == list(range(7))
    np.testing.assert_array_equal(epoch_order(7, 3, 1), epoch_order(7, 3, 1))
    assert not np.array_equal(epoch_order(50, 3, 0), epoch_order(50, 3, 1))
