"""IterableDataset sharding: slices of each global batch, tail handling, length."""

from __future__ import annotations

import pytest

from notebook_accel.data.iterable import ShardedIterableDataset


class _Stream:
    def __init__(self, n: int) -> None:
        self.n = n
        self.epoch = -1

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def _shards(n_items: int, bs: int, n: int, **kw: bool) -> list[list[int]]:
    return [list(ShardedIterableDataset(_Stream(n_items), bs, n, r, **kw)) for r in range(n)]


def test_whole_batches_and_even_padding() -> None:
    assert _shards(7, 2, 2) == [[0, 1, 4, 5], [2, 3, 6, 0]]
    assert _shards(7, 2, 2, even_batches=False) == [[0, 1, 4, 5], [2, 3, 6]]
    assert _shards(7, 2, 2, drop_last=True) == [[0, 1], [2, 3]]
    assert _shards(6, 4, 2, split_batches=True) == [[0, 1, 4, 5], [2, 3, 0, 1]]


@pytest.mark.parametrize("kw", [{}, {"even_batches": False}, {"drop_last": True}, {"split_batches": True}])
def test_len_matches(kw: dict[str, bool]) -> None:
    for rank in range(2):
        shard = ShardedIterableDataset(_Stream(9), 2, 2, rank, **kw)
        assert len(shard) == len(list(shard))


def test_set_epoch_is_forwarded() -> None:
    stream = _Stream(3)
    ShardedIterableDataset(stream, 1, 1, 0).set_epoch(4)
    ShardedIterableDataset(range(3), 1, 1, 0).set_epoch(4)  # datasets without set_epoch are fine
    assert stream.epoch == 4
