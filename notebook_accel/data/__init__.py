"""Data: sharding DataLoaders across processes, the prepared (resumable) loader, and ``skip_first_batches``."""

from __future__ import annotations

from notebook_accel.data.iterable import ShardedIterableDataset
from notebook_accel.data.loader import PreparedDataLoader
from notebook_accel.data.prepare import prepare_data_loader
from notebook_accel.data.randomness import SeedableRandomSampler
from notebook_accel.data.sharding import DataPrepareError, SeededShuffleSampler, ShardedBatchSampler, shard_batches
from notebook_accel.data.skip import SkipBatchSampler, skip_first_batches

__all__ = [
    "DataPrepareError",
    "PreparedDataLoader",
    "SeedableRandomSampler",
    "SeededShuffleSampler",
    "ShardedBatchSampler",
    "ShardedIterableDataset",
    "SkipBatchSampler",
    "prepare_data_loader",
    "shard_batches",
    "skip_first_batches",
]
