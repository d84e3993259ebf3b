"""Sharding an ``IterableDataset``: each round of ``global batch`` items is dealt out, one slice per rank.

Items are read in order into a buffer of ``batch_size * num_processes`` (``batch_size`` with ``split_batches``);
rank ``r`` takes slice ``r`` of every full buffer. The last, partial buffer is dropped (``drop_last``), dealt as
is (``even_batches=False``), or completed with items from the first buffer (``even_batches=True``).

**Resuming.** A dataset that can say where it is (``state_dict()`` and ``load_state_dict(state)``, the protocol
of torchdata's ``Stateful``) has its state recorded before each round is read (:meth:`state_before`); a loader
checkpoint stores the state before the next round it will yield, and a resume loads it instead of reading and
discarding the rounds already trained on. Other iterable datasets are resumed by reading past those rounds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import IterableDataset, get_worker_info

from notebook_accel.data.sharding import LastRound

__all__ = ["PaddedRoundItem", "ShardedIterableDataset", "Tagged", "TaggingCollate", "is_stateful"]

_KEPT_ROUNDS = 8  # round states kept: the loader reads at most a batch or two ahead of what it has yielded


class PaddedRoundItem(NamedTuple):
    """An item of a round that ``even_batches`` completed with repeats: ``real`` items of the round are not."""

    value: Any
    real: int


class Tagged(NamedTuple):
    """A batch from a padded round, with the count of the round's real items (over every process)."""

    batch: Any
    real: int


class TaggingCollate:
    """The loader's collate function, which also turns a batch of :class:`PaddedRoundItem` into :class:`Tagged`.

    It runs where batches are made (in DataLoader workers too), so the main process learns which batches hold
    padding whether or not the stream is read in other processes.
    """

    def __init__(self, collate: Callable[[Any], Any], batched: bool) -> None:
        self.collate = collate
        self.batched = batched

    def __call__(self, data: Any) -> Any:
        if not self.batched:  # one item, already a batch
            if isinstance(data, PaddedRoundItem):
                return Tagged(self.collate(data.value), data.real)
            return self.collate(data)
        if data and isinstance(data[0], PaddedRoundItem):
            return Tagged(self.collate([item.value for item in data]), data[0].real)
        return self.collate(data)


def is_stateful(dataset: Any) -> bool:
    """Whether ``dataset`` can report and restore its position (``state_dict`` and ``load_state_dict``)."""
    return callable(getattr(dataset, "state_dict", None)) and callable(getattr(dataset, "load_state_dict", None))


class ShardedIterableDataset(IterableDataset):
    """This rank's items of ``dataset``; batch them with ``batch_size=per_process_batch``.

    Args:
        dataset: the user's iterable dataset.
        batch_size: the DataLoader's batch size.
        num_processes: number of processes.
        rank: this process's index.
        drop_last: drop an incomplete last round.
        split_batches: ``batch_size`` is the global batch (sliced), not the per-process one.
        even_batches: complete the last round by cycling from the first one.
        batched: False for a loader with ``batch_size=None`` (each item is already a batch; ``batch_size`` is
            then 1: rank ``r`` takes items ``r, r+n, ...``).
        tag_padding: wrap the items of a round completed with repeats in :class:`PaddedRoundItem` (for
            :class:`TaggingCollate`), so that ``gather_for_metrics`` can drop the repeats wherever they occur.

    Attributes:
        last: the real items of the pass's final round once it has been read (this process's copy only: with
            DataLoader worker processes it stays unknown here).

    Example:
        >>> list(ShardedIterableDataset(range(5), 1, 2, 1))
        [1, 3, 0]
    """

    def __init__(self, dataset: Any, batch_size: int, num_processes: int, rank: int, drop_last: bool = False,
                 split_batches: bool = False, even_batches: bool = True, batched: bool = True,
                 tag_padding: bool = False) -> None:
        self.dataset = dataset
        self.batched = batched
        self.tag_padding = tag_padding
        self.last = LastRound()
        self.global_batch = batch_size if split_batches else batch_size * num_processes
        self.per_process_batch = self.global_batch // num_processes
        self.num_processes = num_processes
        self.rank = rank
        self.drop_last = drop_last
        self.even_batches = even_batches and num_processes > 1
        self.stateful = is_stateful(dataset)
        self._round_states: OrderedDict[int, Any] = OrderedDict()
        self._first_round = 0  # the round the next iteration starts at (after a restore)
        # The epoch, in memory shared with DataLoader workers: persistent workers keep the copy of the dataset they
        # were started with, so set_epoch reaches them only through this (see _epoch_in_worker).
        self._shared_epoch = torch.zeros(1, dtype=torch.int64).share_memory_()

    def state_before(self, round_index: int) -> Any:
        """The dataset's state before round ``round_index`` of the current pass was read, or ``None`` when it
        was not recorded (not stateful, or too far back)."""
        return self._round_states.get(round_index)

    def restore(self, state: Any, round_index: int) -> None:
        """Put the dataset where it was before round ``round_index``; the next pass starts there."""
        self.dataset.load_state_dict(state)
        self._first_round = round_index
        self._round_states = OrderedDict({round_index: state})

    def _record(self, round_index: int) -> None:
        """Keep the dataset's state before ``round_index`` (the last few only)."""
        if self.stateful:
            self._round_states[round_index] = self.dataset.state_dict()
            while len(self._round_states) > _KEPT_ROUNDS:
                self._round_states.popitem(last=False)

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the dataset when it takes one (to DataLoader workers' copies too)."""
        self._shared_epoch[0] = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def _epoch_in_worker(self) -> None:
        """In a DataLoader worker, give this copy's dataset the current epoch.

        A persistent worker's copy would otherwise stay at the epoch it was started in: every epoch would repeat
        that epoch's order, and a resumed run (whose workers start in the resumed epoch) would read another order
        than the run it continues, losing and repeating items.
        """
        if get_worker_info() is not None and hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(int(self._shared_epoch[0]))

    def _mine(self, buffer: list[Any]) -> list[Any]:
        """This rank's slice of a round."""
        return buffer[self.rank * self.per_process_batch : (self.rank + 1) * self.per_process_batch]

    def __iter__(self) -> Iterator[Any]:
        self._epoch_in_worker()
        first: list[Any] = []
        buffer: list[Any] = []
        round_index, self._first_round = self._first_round, 0
        self._round_states.clear()  # states from 1 on are taken inside the pass, where the iterator is live
        self.last.real = None
        for item in self.dataset:
            buffer.append(item)
            if len(buffer) == self.global_batch:
                if not first:
                    first = list(buffer)
                round_index += 1
                self._record(round_index)
                yield from self._mine(buffer)
                buffer = []
        if not buffer or self.drop_last or not self.even_batches:
            self.last.real = 0
            if buffer and not self.drop_last:
                yield from self._mine(buffer)
            return
        real = self.last.real = len(buffer)
        source = first or list(buffer)
        buffer += [source[i % len(source)] for i in range(self.global_batch - len(buffer))]
        if self.tag_padding:
            yield from (PaddedRoundItem(item, real) for item in self._mine(buffer))
        else:
            yield from self._mine(buffer)

    def __len__(self) -> int:
        """Items this rank yields (only when the dataset has a length)."""
        total = len(self.dataset)
        rounds, tail = divmod(total, self.global_batch)
        mine = rounds * self.per_process_batch
        if tail and not self.drop_last:
            if self.even_batches:
                mine += self.per_process_batch
            else:
                mine += min(max(tail - self.rank * self.per_process_batch, 0), self.per_process_batch)
        return mine
