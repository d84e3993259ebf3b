"""``prepare_data_loader``: a user's DataLoader turned into this rank's :class:`PreparedDataLoader`.

What is dealt is the loader's own batch sampler (its sampler's keys when it does not batch), so its order is the
plain loader's; see :mod:`notebook_accel.data.randomness` for how its randomness is made the same on every rank.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from notebook_accel.data.iterable import ShardedIterableDataset, TaggingCollate
from notebook_accel.data.loader import PreparedDataLoader
from notebook_accel.data.randomness import (
    attach_generators,
    draws_from_global_rng,
    generators_of,
    SeedableRandomSampler,
    has_unknown_randomness,
    seedable_copy,
    seedable_parts,
)
from notebook_accel.data.sharding import DataPrepareError, ShardedBatchSampler, ShardedSampler
from notebook_accel.ops import broadcast_object_list
from notebook_accel.plugins import DataLoaderConfiguration
from notebook_accel.state import GradientState, ProcessState

__all__ = ["loader_options", "prepare_data_loader"]


def loader_options(loader: DataLoader) -> dict[str, Any]:
    """The options of ``loader`` a rebuilt DataLoader must keep (workers, collate, pinning, ...)."""
    options: dict[str, Any] = {
        "num_workers": loader.num_workers, "collate_fn": loader.collate_fn, "pin_memory": loader.pin_memory,
        "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        options["prefetch_factor"] = loader.prefetch_factor
    for name in ("pin_memory_device", "in_order"):
        if hasattr(loader, name):
            options[name] = getattr(loader, name)
    return options



def _agree_randomness(config: DataLoaderConfiguration, generators: list[torch.Generator], need_seed: bool,
                      seedable: list[SeedableRandomSampler] | None = None) -> int:
    """Rank 0's base seed, generator states and seedable samplers' seeds, copied to every rank (one broadcast);
    returns the seed.

    The seed is ``config.data_seed``, else drawn from the global torch RNG when ``need_seed`` (every rank
    draws, so the ranks' RNG streams stay in step), else 0.
    """
    seedable = seedable or []
    if config.data_seed is not None:
        seed = config.data_seed
    elif need_seed:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    else:
        seed = 0
    if not generators and not need_seed and not seedable:
        return seed
    payload = [seed, [g.get_state() for g in generators], [s.initial_seed for s in seedable]]
    agreed = broadcast_object_list([payload], from_process=0)[0]
    for generator, state in zip(generators, agreed[1]):
        generator.set_state(state)
    for sampler, initial in zip(seedable, agreed[2]):
        sampler.initial_seed = initial
    return int(agreed[0])


def _remainder(length: int | None, global_batch: int | None, drop_last: bool, config: DataLoaderConfiguration,
               num_processes: int) -> int:
    """Real keys in the padded last global batch: 0 when nothing is padded, -1 when unknown."""
    if drop_last or not config.even_batches or num_processes == 1:
        return 0
    if length is None or global_batch is None:
        return -1
    return length % global_batch


def prepare_data_loader(loader: DataLoader, state: ProcessState,
                        gradient_state: GradientState, config: DataLoaderConfiguration,
                        device_placement: bool = True) -> PreparedDataLoader:
    """This rank's sharded, device-placing, resumable version of ``loader``.

    Every kind of DataLoader is taken: map-style or iterable, with or without a length, any sampler or batch
    sampler (its randomness made the same on every rank), and ``batch_size=None`` (each key or item is one
    step's data).

    Raises:
        DataPrepareError: ``split_batches`` with a batch size it cannot divide, or with ``batch_size=None``.

    Example:
        >>> from notebook_accel.state import ProcessState, GradientState
        >>> dl = prepare_data_loader(DataLoader(range(6), batch_size=2), ProcessState(cpu=True), GradientState(),
        ...                          DataLoaderConfiguration())
        >>> [b.tolist() for b in dl]
        [[0, 1], [2, 3], [4, 5]]
    """
    if isinstance(loader, PreparedDataLoader):
        return loader
    common: dict[str, Any] = {"options": _in_order(loader_options(loader)), "state": state,
                              "gradient_state": gradient_state,
                              "device": state.device if device_placement else None,
                              "non_blocking": config.non_blocking}
    if isinstance(loader.dataset, IterableDataset):
        return _prepare_iterable(loader, state.num_processes, state.process_index, config, common)
    return _prepare_map(loader, state.num_processes, state.process_index, config, common)


def _in_order(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the workers' batches kept in order (``in_order=True``), warning when the loader had not."""
    if options.get("in_order", True) or not options.get("num_workers"):
        return options
    warnings.warn(
        "prepare: DataLoader(in_order=False) is read in order: a prepared loader counts the batches it yields to "
        "resume mid-epoch and to find the even_batches padding of the last round, and batches out of order would "
        "make a resume skip batches never trained on (and repeat others) and gather_for_metrics drop real items. "
        "Pass in_order=True (the default) to silence this warning",
        UserWarning, stacklevel=3,
    )
    return {**options, "in_order": True}


def _length(dataset: Any) -> int | None:
    """``len(dataset)``, or ``None`` when it has none."""
    try:
        return len(dataset)
    except TypeError:
        return None


def _prepare_iterable(loader: DataLoader, n: int, rank: int, config: DataLoaderConfiguration,
                      common: dict[str, Any]) -> PreparedDataLoader:
    """An IterableDataset loader: deal the items (whole items when the loader does not batch), batch per process."""
    batched = loader.batch_size is not None
    if config.split_batches and not batched:
        raise DataPrepareError(
            "split_batches=True slices each batch, but this DataLoader has batch_size=None: its dataset makes "
            "the batches. Use split_batches=False (each process then takes whole batches)."
        )
    size: int = loader.batch_size if loader.batch_size is not None else 1
    if config.split_batches and size % n:
        raise DataPrepareError(
            f"split_batches=True slices each batch into {n} pieces, but the DataLoader's batch_size={size} does "
            f"not divide by {n}; use a batch_size that is a multiple of {n}, or split_batches=False"
        )
    shard = ShardedIterableDataset(loader.dataset, size, n, rank, loader.drop_last, config.split_batches,
                                   config.even_batches, batched=batched, tag_padding=True)
    common["options"]["collate_fn"] = TaggingCollate(common["options"]["collate_fn"], batched)
    remainder = _remainder(_length(loader.dataset), shard.global_batch, loader.drop_last, config, n)
    return PreparedDataLoader(shard, batch_size=shard.per_process_batch if batched else None,
                              seed=config.data_seed or 0, total_batch_size=shard.global_batch if batched else None,
                              remainder=remainder, **common)


def _prepare_map(loader: DataLoader, n: int, rank: int, config: DataLoaderConfiguration,
                 common: dict[str, Any]) -> PreparedDataLoader:
    """A map-style loader: deal its batch sampler's batches (its sampler's keys when it does not batch)."""
    base: Any = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    plain = loader.batch_sampler is None or type(base) is BatchSampler
    sampler: Any = loader.sampler
    plain_shuffle = plain and type(sampler) is RandomSampler and sampler._num_samples is None
    seedable = config.use_seedable_sampler and plain_shuffle
    unknown = has_unknown_randomness(base)
    seed = _agree_randomness(config, generators_of(base, loader.generator),
                             need_seed=seedable or unknown or draws_from_global_rng(base),
                             seedable=seedable_parts(base))
    if seedable:
        shuffled = seedable_copy(sampler, seed)
        base = BatchSampler(shuffled, base.batch_size, base.drop_last) if loader.batch_sampler is not None \
            else shuffled
    attach_generators(base, seed)
    isolate = seed if unknown else None
    if loader.batch_sampler is None:
        keys = ShardedSampler(base, rank, n, config.split_batches, config.even_batches, isolate_seed=isolate)
        remainder = _remainder(_length(base), n, False, config, n)
        return PreparedDataLoader(loader.dataset, sampler=keys, seed=seed, total_batch_size=None,
                                  remainder=remainder, **common)
    sharded = ShardedBatchSampler(base, rank, n, config.split_batches, config.even_batches, isolate_seed=isolate)
    size = sharded.batch_size
    global_batch = None if size is None else (size if config.split_batches else size * n)
    remainder = _remainder(_length(loader.dataset), global_batch, sharded.drop_last, config, n)
    return PreparedDataLoader(loader.dataset, batch_sampler=sharded, seed=seed, total_batch_size=global_batch,
                              remainder=remainder, **common)
