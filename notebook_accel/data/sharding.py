"""Which batches each process takes: accelerate's batch sharding, as a batch sampler.

Whole batches (default): with ``n`` processes, rank ``r`` takes batches ``r, r+n, r+2n, ...`` of the original
batch sampler, so one step of all processes covers ``n`` consecutive batches. ``split_batches=True`` instead
slices every batch into ``n`` equal pieces.

The last, incomplete round: ``drop_last`` drops it; ``even_batches=False`` gives each rank what exists;
``even_batches=True`` (default) completes it by cycling indices from the start of the epoch, so every rank runs
the same number of full batches (range(21), batch 3, 2 ranks: rank 1's fourth batch is ``[0, 1, 2]``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import BatchSampler, Sampler

from notebook_accel.data.randomness import IsolatedRandomness, SeedableRandomSampler
from notebook_accel.data.shuffle_order import shuffle_order
from notebook_accel.errors import NotebookAccelError

__all__ = ["DataPrepareError", "LastRound", "SeededShuffleSampler", "ShardedBatchSampler", "ShardedSampler",
           "shard_batches"]


class DataPrepareError(NotebookAccelError, ValueError):
    """A DataLoader cannot be sharded as asked (the message says why and what to change)."""


class SeededShuffleSampler(SeedableRandomSampler):
    """A random permutation that is a pure function of ``(seed, epoch)``: same on every rank and on resume
    (:class:`~notebook_accel.data.randomness.SeedableRandomSampler` with the seed as its one option).

    Example:
        >>> s = SeededShuffleSampler(range(5), seed=1)
        >>> first = list(s)
        >>> s.set_epoch(0)
        >>> list(s) == first
        True
    """

    def __init__(self, data_source: Any, seed: int) -> None:
        super().__init__(data_source, initial_seed=seed)


@dataclass
class LastRound:
    """What the final round of the epoch being dealt held: ``real`` keys, or ``None`` while not yet dealt.

    Every rank deals the whole epoch the same way, so every rank knows this number, and
    :meth:`Accelerator.gather_for_metrics` cuts the ``even_batches`` padding off with it. A round that needed
    no padding has ``real == 0``.
    """

    real: int | None = None


def _take(cycle: list[int], start: int, count: int) -> list[int]:
    """``count`` indices of ``cycle`` from ``start``, wrapping around."""
    return [cycle[(start + j) % len(cycle)] for j in range(count)]


def _whole(batches: Iterable[list[int]], rank: int, n: int, batch_size: int | None, drop_last: bool,
           even: bool, last: LastRound) -> Iterator[list[int]]:
    """Rank ``rank``'s whole batches: r, r+n, ...; the last round completed, dropped or left uneven."""
    last.real = None
    first: list[list[int]] = []
    pending: list[list[int]] = []
    for batch in batches:
        if len(first) < n:
            first.append(batch)
        pending.append(batch)
        if len(pending) == n and (batch_size is None or len(batch) == batch_size):
            yield pending[rank]
            pending = []
        elif len(pending) > n:  # a short batch that was not the last one (a custom batch sampler)
            yield pending[rank]
            pending = pending[n:]
    yield from _final_round(pending, first, rank, n, batch_size, drop_last, even, last)


def _whole_from_indices(sampler: Iterable[int], rank: int, n: int, batch_size: int, drop_last: bool,
                        even: bool, last: LastRound) -> Iterator[list[int]]:
    """:func:`_whole` for torch's own ``BatchSampler(sampler, batch_size, drop_last)``, read from ``sampler``.

    The same batches, but the other ranks' batches are never built (``BatchSampler`` fills every batch of every
    rank index by index in Python, the bulk of an epoch's sampling cost on a small-item dataset). A plain
    shuffle's order is drawn as one tensor (:mod:`.shuffle_order`), of which this rank turns only its own rows
    into lists of ints (that conversion, for the whole order, cost more than the draw); any other sampler is read
    a round at a time, one C-level slice of its index stream.
    """
    last.real = None
    size = n * batch_size
    drawn = shuffle_order(sampler)
    if drawn is None:
        indices = iter(sampler)
        start = rank * batch_size
        first = chunk = list(itertools.islice(indices, size))
        while len(chunk) == size:
            yield chunk[start : start + batch_size]
            chunk = list(itertools.islice(indices, size))
    else:
        order, finish = drawn
        rounds = len(order) // size
        first = order[:size].tolist()
        yield from order[: rounds * size].view(rounds, n, batch_size)[:, rank].tolist()
        chunk = order[rounds * size :].tolist()
        finish()  # the sampler's draws once its indices ran out
    pending = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    if drop_last and pending and len(pending[-1]) < batch_size:
        pending.pop()  # BatchSampler(drop_last=True) never makes the short batch
    firsts = [first[i : i + batch_size] for i in range(0, len(first), batch_size)][:n]
    yield from _final_round(pending, firsts, rank, n, batch_size, drop_last, even, last)


def _final_round(pending: list[list[int]], first: list[list[int]], rank: int, n: int, batch_size: int | None,
                 drop_last: bool, even: bool, last: LastRound) -> Iterator[list[int]]:
    """Rank ``rank``'s batch of the incomplete final round ``pending`` (none, its own, or one completed from the
    epoch's ``first`` batches), and the round's real keys told to ``last``."""
    if not pending or drop_last or not even:
        last.real = 0
        if pending and not drop_last and rank < len(pending):
            yield pending[rank]
        return
    last.real = sum(len(b) for b in pending)
    if batch_size is None:  # unknown size: complete the round with whole batches from the epoch start
        yield (pending + first * n)[rank]
        return
    cycle = [i for b in first for i in b]
    pos = 0
    completed: list[list[int]] = []
    for batch in pending:
        missing = batch_size - len(batch)
        completed.append(batch + _take(cycle, pos, missing))
        pos += missing
    while len(completed) < n:
        completed.append(_take(cycle, pos, batch_size))
        pos += batch_size
    yield completed[rank]


def _split(batches: Iterable[list[int]], rank: int, n: int, batch_size: int, drop_last: bool,
           even: bool, last: LastRound) -> Iterator[list[int]]:
    """Rank ``rank``'s slice of every batch; a short last batch is completed from the first batch."""
    last.real = None
    per = batch_size // n
    first: list[int] | None = None
    short: list[int] | None = None
    for batch in batches:
        if first is None:
            first = batch
        if len(batch) == batch_size:
            yield batch[rank * per : (rank + 1) * per]
        else:
            short = batch
    if short is None or first is None or drop_last or not even:
        last.real = 0
        if short is not None and not drop_last and len(short) > rank * per:
            yield short[rank * per : (rank + 1) * per]
        return
    last.real = len(short)
    full = short + _take(first, 0, batch_size - len(short))
    yield full[rank * per : (rank + 1) * per]


def shard_batches(batches: Iterable[list[int]], rank: int, num_processes: int, batch_size: int | None,
                  drop_last: bool = False, even_batches: bool = True, split_batches: bool = False,
                  last: LastRound | None = None) -> Iterator[list[int]]:
    """The batches of ``batches`` that process ``rank`` of ``num_processes`` takes (see the module docstring).

    ``last``, when given, is told how many real keys the final round held once it is dealt.

    Example:
        >>> batches = [list(range(i, min(i + 3, 21))) for i in range(0, 21, 3)]
        >>> list(shard_batches(batches, 1, 2, 3))[-1]
        [0, 1, 2]
    """
    even_batches = even_batches and num_processes > 1  # one process has nothing to even out
    last = last if last is not None else LastRound()
    if split_batches:
        if batch_size is None:
            raise DataPrepareError("split_batches=True needs a DataLoader with a batch_size")
        return _split(batches, rank, num_processes, batch_size, drop_last, even_batches, last)
    return _whole(batches, rank, num_processes, batch_size, drop_last, even_batches, last)


class ShardedBatchSampler(Sampler[list[int]]):
    """Wraps the original batch sampler and yields this process's batches.

    Args:
        batch_sampler: the DataLoader's batch sampler (``batch_size`` and ``drop_last`` are read from it).
        rank: this process's index.
        num_processes: number of processes.
        split_batches: slice each batch instead of dealing whole batches.
        even_batches: complete the last round by cycling from the epoch start.
        skip: batches to leave out at the start of every iteration (``skip_first_batches``).
        isolate_seed: when set, the batch sampler's own randomness is drawn from a private stream seeded by
            this seed and the epoch (see :class:`~notebook_accel.data.randomness.IsolatedRandomness`), so that
            a custom sampler drawing from the global RNGs deals the same batches on every rank.

    Attributes:
        last: the real keys of the epoch's final round, once dealt (see :class:`LastRound`).

    Raises:
        DataPrepareError: ``split_batches`` with a batch size that does not divide by ``num_processes``.
    """

    def __init__(self, batch_sampler: Any, rank: int, num_processes: int, split_batches: bool = False,
                 even_batches: bool = True, skip: int = 0, isolate_seed: int | None = None) -> None:
        self.batch_sampler = batch_sampler
        self.isolate_seed = isolate_seed
        self.last = LastRound()
        self._epoch = 0
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last: bool = bool(getattr(batch_sampler, "drop_last", False))
        self.rank = rank
        self.num_processes = num_processes
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.skip = skip
        self.skip_once = 0
        if split_batches and (self.batch_size is None or self.batch_size % num_processes != 0):
            raise DataPrepareError(
                f"split_batches=True slices each batch into {num_processes} pieces, but the DataLoader's "
                f"batch_size={self.batch_size} does not divide by {num_processes}; use a batch_size that is a "
                f"multiple of {num_processes}, or split_batches=False"
            )

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the inner sampler and batch sampler when they take one."""
        self._epoch = epoch
        for target in (getattr(self.batch_sampler, "sampler", None), self.batch_sampler):
            if target is not None and hasattr(target, "set_epoch"):
                target.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        # A generator: the one-shot skip is taken at the first batch, not at iter(). torch's worker iterator calls
        # iter() on its batch sampler twice when it starts and reads only the second; taken at iter(), the skip of
        # a resumed epoch went to the discarded one and the resumed epoch started over.
        start, self.skip_once = self.skip + self.skip_once, 0
        source: Iterable[list[int]] = self.batch_sampler
        shards: Iterator[list[int]]
        if self.isolate_seed is not None:
            source = IsolatedRandomness(self.isolate_seed * 1_000_003 + self._epoch).wrap(source)
        elif type(source) is BatchSampler and not self.split_batches:
            even = self.even_batches and self.num_processes > 1  # one process has nothing to even out
            shards = _whole_from_indices(source.sampler, self.rank, self.num_processes, source.batch_size,
                                         source.drop_last, even, self.last)
            yield from itertools.islice(shards, start, None)
            return
        shards = shard_batches(source, self.rank, self.num_processes, self.batch_size,
                               self.drop_last, self.even_batches, self.split_batches, self.last)
        yield from itertools.islice(shards, start, None)

    def with_skip(self, skip: int) -> ShardedBatchSampler:
        """The same sharding of the same sampler, leaving out ``skip`` batches of every iteration."""
        copy = type(self)(self.batch_sampler, self.rank, self.num_processes, self.split_batches,
                          self.even_batches, skip=skip, isolate_seed=self.isolate_seed)
        copy._epoch = self._epoch
        return copy

    def full_length(self) -> int:
        """Batches this rank takes in a whole epoch (ignoring :attr:`skip`)."""
        m, n = len(self.batch_sampler), self.num_processes
        if self.split_batches:
            return m - self._split_missing()
        rounds, extra = divmod(m, n)
        if extra == 0:
            return rounds
        if self.drop_last:
            return rounds
        if self.even_batches and n > 1:
            return rounds + 1
        return rounds + (1 if self.rank < extra else 0)

    def _last_short(self) -> bool:
        """True when the final batch of the original sampler is shorter than ``batch_size`` (when knowable)."""
        sampler = getattr(self.batch_sampler, "sampler", None)
        if self.batch_size is None or sampler is None or not hasattr(sampler, "__len__"):
            return False
        return len(sampler) % self.batch_size != 0

    def _split_missing(self) -> int:
        """1 when, in split mode, this rank gets no slice of a short last batch."""
        padded = self.even_batches and self.num_processes > 1
        if self.drop_last or padded or not self._last_short() or self.batch_size is None:
            return 0
        tail = len(self.batch_sampler.sampler) % self.batch_size
        return 0 if tail > self.rank * (self.batch_size // self.num_processes) else 1

    def __len__(self) -> int:
        return max(0, self.full_length() - self.skip)


class _Singletons:
    """A sampler's keys as batches of one, so a loader without automatic batching is dealt like batches."""

    batch_size = 1
    drop_last = False

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[list[Any]]:
        return ([key] for key in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


class ShardedSampler(ShardedBatchSampler):
    """This process's keys of a sampler, for a DataLoader with ``batch_size=None`` (the dataset or the sampler
    makes the batches: each key, an index or a list of indices, is one step's data).

    Keys are dealt like batches of one: rank ``r`` takes keys ``r, r+n, ...``; ``even_batches`` completes the
    last round with keys from the start of the epoch, ``even_batches=False`` leaves it uneven.

    Example:
        >>> list(ShardedSampler(range(5), rank=1, num_processes=2))
        [1, 3, 0]
    """

    def __init__(self, sampler: Any, rank: int, num_processes: int, split_batches: bool = False,
                 even_batches: bool = True, skip: int = 0, isolate_seed: int | None = None) -> None:
        if split_batches:
            raise DataPrepareError(
                "split_batches=True slices each batch, but this DataLoader has batch_size=None: its sampler or "
                "dataset makes the batches. Use split_batches=False (each process then takes whole batches)."
            )
        inner = sampler if isinstance(sampler, _Singletons) else _Singletons(sampler)
        super().__init__(inner, rank, num_processes, False, even_batches, skip, isolate_seed)

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            yield batch[0]
