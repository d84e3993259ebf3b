"""Batch sharding: accelerate's examples, every tail case, and len() against the real batches."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from notebook_accel.data.sharding import (DataPrepareError, LastRound, SeededShuffleSampler, ShardedBatchSampler,
                                          shard_batches)


def _batches(n_items: int, batch_size: int, drop_last: bool = False) -> BatchSampler:
    return BatchSampler(SequentialSampler(range(n_items)), batch_size, drop_last)


def _all(n_items: int, bs: int, n: int, **kw: bool) -> list[list[list[int]]]:
    sampler = _batches(n_items, bs, kw.pop("drop_last", False))
    return [list(ShardedBatchSampler(sampler, r, n, **kw)) for r in range(n)]


def test_even_batches_example_from_accelerate() -> None:
    rank0, rank1 = _all(21, 3, 2)
    assert rank0 == [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]]
    assert rank1 == [[3, 4, 5], [9, 10, 11], [15, 16, 17], [0, 1, 2]]


def test_short_last_batch_is_completed_from_the_epoch_start() -> None:
    rank0, rank1 = _all(20, 3, 2)
    assert rank0[-1] == [18, 19, 0] and rank1[-1] == [1, 2, 3]


def test_uneven_and_drop_last() -> None:
    assert _all(21, 3, 2, even_batches=False) == [
        [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]], [[3, 4, 5], [9, 10, 11], [15, 16, 17]]]
    assert _all(22, 3, 2, drop_last=True) == [[[0, 1, 2], [6, 7, 8], [12, 13, 14]], [[3, 4, 5], [9, 10, 11],
                                                                                       [15, 16, 17]]]


def test_split_batches() -> None:
    assert _all(10, 4, 2, split_batches=True) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    assert _all(10, 4, 2, split_batches=True, even_batches=False) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7]]]
    with pytest.raises(DataPrepareError, match="does not divide by 2"):
        ShardedBatchSampler(_batches(10, 3), 0, 2, split_batches=True)
    with pytest.raises(DataPrepareError, match="needs a DataLoader with a batch_size"):
        list(shard_batches([[0]], 0, 2, None, split_batches=True))


def test_tiny_dataset_still_gives_full_batches() -> None:
    assert _all(1, 3, 2) == [[[0, 0, 0]], [[0, 0, 0]]]


def test_unknown_batch_size_pads_with_whole_batches() -> None:
    batches = [[0, 1], [2], [3, 4, 5]]
    assert [list(shard_batches(batches, r, 2, None)) for r in range(2)] == [[[0, 1], [3, 4, 5]], [[2], [0, 1]]]


def test_one_process_is_untouched() -> None:
    assert _all(7, 2, 1) == [[[0, 1], [2, 3], [4, 5], [6]]]


@pytest.mark.parametrize(("n_items", "bs", "n", "drop_last", "even", "split"),
                         [c for c in itertools.product([1, 5, 8, 9, 12, 13], [2, 4], [1, 2, 3], [False, True],
                                                       [False, True], [False, True])
                          if not (c[5] and c[1] % c[2])])
def test_len_matches_the_batches(n_items: int, bs: int, n: int, drop_last: bool, even: bool, split: bool) -> None:
    sampler = _batches(n_items, bs, drop_last)
    for rank in range(n):
        shard = ShardedBatchSampler(sampler, rank, n, split_batches=split, even_batches=even)
        assert len(shard) == len(list(shard))
        assert all(len(b) == (bs // n if split else bs) for b in shard) or not even or drop_last or n == 1


def test_skip_and_set_epoch() -> None:
    inner = SeededShuffleSampler(range(6), seed=3)
    shard = ShardedBatchSampler(BatchSampler(inner, 2, False), 0, 1, skip=1)
    assert len(shard) == 2 and len(list(shard)) == 2
    shard.set_epoch(0)
    first = list(inner)
    shard.set_epoch(1)
    assert inner.epoch == 1 and list(inner) != first and sorted(inner) == list(range(6))
    shard.skip_once = 1
    assert len(list(shard)) == 1 and len(list(shard)) == 2  # the one-shot skip is used once


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("even", [False, True])
def test_torchs_batch_sampler_read_as_indices_deals_what_the_batches_deal(drop_last: bool, even: bool) -> None:
    for items, bs, n in itertools.product(range(0, 30), (1, 3, 4), (1, 2, 3)):
        for rank in range(n):
            general, fast = LastRound(), LastRound()
            expected = list(shard_batches(list(_batches(items, bs, drop_last)), rank, n, bs, drop_last, even,
                                          last=general))
            sharded = ShardedBatchSampler(_batches(items, bs, drop_last), rank, n, even_batches=even)
            assert list(sharded) == expected and sharded.last == general, (items, bs, n, rank)


def test_a_shuffle_read_as_one_list_deals_the_same_and_leaves_the_generator_as_the_sampler_would() -> None:
    def build() -> tuple[ShardedBatchSampler, BatchSampler, torch.Generator, torch.Generator]:
        fast, slow = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
        ours = ShardedBatchSampler(BatchSampler(RandomSampler(range(23), generator=fast), 4, False), 1, 2)
        plain = BatchSampler(RandomSampler(range(23), generator=slow), 4, False)
        return ours, plain, fast, slow

    ours, plain, fast, slow = build()
    for _ in range(3):  # whole epochs: the generator moves on the same way
        assert list(ours) == list(shard_batches(plain, 1, 2, 4))
        assert torch.equal(fast.get_state(), slow.get_state())
    ours, plain, fast, slow = build()
    assert next(iter(ours)) == next(shard_batches(plain, 1, 2, 4))  # an epoch given up after one batch
    assert torch.equal(fast.get_state(), slow.get_state())


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("even", [False, True])
def test_a_shuffle_cut_from_one_tensor_deals_what_the_shuffled_batches_deal(drop_last: bool, even: bool) -> None:
    # each rank turns only its own rows of the drawn order into lists; the tail and the padding come from the rest
    for items, bs, n in itertools.product(range(1, 30), (1, 3, 4), (1, 2, 3)):  # RandomSampler refuses 0 items
        for rank in range(n):
            fast, slow = torch.Generator().manual_seed(items), torch.Generator().manual_seed(items)
            general, cut = LastRound(), LastRound()
            plain = BatchSampler(RandomSampler(range(items), generator=slow), bs, drop_last)
            expected = list(shard_batches(plain, rank, n, bs, drop_last, even, last=general))
            sharded = ShardedBatchSampler(BatchSampler(RandomSampler(range(items), generator=fast), bs, drop_last),
                                          rank, n, even_batches=even)
            got = list(sharded)
            assert got == expected and sharded.last == general, (items, bs, n, rank)
            assert all(type(i) is int for batch in got for i in batch)  # a dataset is indexed by Python ints
            assert torch.equal(fast.get_state(), slow.get_state())
