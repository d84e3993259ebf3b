"""``skip_first_batches``: a loader that leaves out the first batches, for resuming inside an epoch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader, Sampler

from notebook_accel.argument_checks import checked_loader
from notebook_accel.data.loader import PreparedDataLoader
from notebook_accel.data.prepare import loader_options
from notebook_accel.data.sharding import DataPrepareError
from notebook_accel.errors import shown

__all__ = ["skip_first_batches", "SkipBatchSampler"]


class SkipBatchSampler(Sampler[list[int]]):
    """The batches of ``batch_sampler`` after the first ``skip``."""

    def __init__(self, batch_sampler: Any, skip: int) -> None:
        self.batch_sampler = batch_sampler
        self.skip = skip

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(iter(self.batch_sampler), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.batch_sampler) - self.skip)


def skip_first_batches(dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
    """A loader like ``dataloader`` whose iterations start after ``num_batches`` batches.

    Prepared loaders skip this rank's batches by index (nothing is loaded for the skipped ones); plain loaders
    skip batches of their batch sampler. Use the returned loader for the interrupted epoch only.

    Raises:
        DataPrepareError: ``num_batches`` negative, or a plain loader without a batch sampler.

    Example:
        >>> [b.tolist() for b in skip_first_batches(DataLoader(range(6), batch_size=2), 2)]
        [[4, 5]]
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
        raise DataPrepareError(f"skip_first_batches(num_batches={shown(num_batches)}): expected an integer >= 0")
    checked_loader(dataloader, "skip_first_batches(dataloader=...)")
    if isinstance(dataloader, PreparedDataLoader):
        return dataloader.with_skip(num_batches)
    if dataloader.batch_sampler is None:
        raise DataPrepareError("skip_first_batches needs a DataLoader with a batch_size or a batch_sampler")
    return DataLoader(dataloader.dataset, batch_sampler=SkipBatchSampler(dataloader.batch_sampler, num_batches),
                      **loader_options(dataloader))
