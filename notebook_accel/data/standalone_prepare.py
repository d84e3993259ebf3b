"""accelerate's free ``prepare_data_loader(...)`` and its ``DataLoaderDispatcher``, over our loader preparation.

accelerate's tests and some user code shard a DataLoader without an Accelerator:
``prepare_data_loader(dl, device, num_processes, process_index, put_on_device=True)``. This module takes that
signature and hands the work to :func:`notebook_accel.data.prepare.prepare_data_loader`, so the result is the same
sharded, resumable loader ``accelerator.prepare`` gives.

Dispatching (accelerate's ``dispatch_batches=True``: process 0 reads every batch and sends each process its
slice) is not a separate code path here: every process reads its own share, which yields the same batches on
each process without sending data between them. A loader asked for with dispatching is a
:class:`DataLoaderDispatcher`, so code that checks the type keeps working.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from notebook_accel.argument_checks import checked_device, checked_int, checked_loader
from notebook_accel.data import loader as _loader
from notebook_accel.data import prepare as _prepare
from notebook_accel.data.sharding import DataPrepareError
from notebook_accel.errors import shown
from notebook_accel.plugins import DataLoaderConfiguration
from notebook_accel.state import GradientState, ProcessState

__all__ = ["DataLoaderDispatcher", "mark_dispatching", "prepare_data_loader"]


class DataLoaderDispatcher(_loader.PreparedDataLoader):
    """accelerate's dispatching loader type: here a prepared loader that reads this process's own share.

    Built by :func:`prepare_data_loader` with ``dispatch_batches=True`` (or ``None`` for an iterable dataset,
    accelerate's default); it yields exactly what process 0 would have dispatched to this process.
    """


def _state_for(device: torch.device | str | None, num_processes: int | None,
               process_index: int | None) -> ProcessState:
    """This process's state, seen as ``process_index`` of ``num_processes`` on ``device`` where those are given.

    Raises:
        DataPrepareError: ``process_index`` is not in ``range(num_processes)``.
    """
    if device is not None:
        device = checked_device(device, "prepare_data_loader(device=...)")
    if num_processes is not None:
        num_processes = checked_int(num_processes, "prepare_data_loader(num_processes=...)", 0)  # 0: said below
    if process_index is not None:
        process_index = checked_int(process_index, "prepare_data_loader(process_index=...)", 0)
    cpu = device is not None and torch.device(device).type == "cpu"
    state = ProcessState(cpu=cpu)
    if device is None and num_processes is None and process_index is None:
        return state
    view = copy.copy(state)
    view.num_processes = state.num_processes if num_processes is None else int(num_processes)
    view.process_index = state.process_index if process_index is None else int(process_index)
    view.device = state.device if device is None else torch.device(device)
    if view.num_processes < 1 or not 0 <= view.process_index < view.num_processes:
        raise DataPrepareError(
            f"prepare_data_loader: process_index={shown(view.process_index)} is not one of the "
            f"{shown(view.num_processes)} processes (allowed: 0 to {shown(view.num_processes - 1)}); pass "
            "num_processes >= 1 and a process_index below it, or leave both out to use this process's own"
        )
    return view


def prepare_data_loader(
    dataloader: DataLoader[Any],
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: list[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Any = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> _loader.PreparedDataLoader:
    """Shard ``dataloader`` for one process, with accelerate's signature (no Accelerator needed).

    Args:
        dataloader: the loader to shard.
        device: where batches go when ``put_on_device`` (default: this process's device).
        num_processes: how many processes share the data (default: the run's).
        process_index: which share this is (default: this process's rank).
        split_batches: slice each batch into ``num_processes`` pieces instead of dealing out whole batches.
        put_on_device: move each batch to ``device``.
        rng_types: accepted for compatibility: shuffles agree across processes by themselves here.
        dispatch_batches: return a :class:`DataLoaderDispatcher` (same batches; see the module docstring).
        even_batches: pad the last round by cycling from the start so every process gets as many batches.
        slice_fn_for_dispatch: not supported (each process reads its own share; there is nothing to slice).
        use_seedable_sampler: a plain shuffle becomes a pure function of (seed, epoch).
        data_seed: the base seed of shuffles.
        non_blocking: move batches with ``non_blocking=True``.
        use_stateful_dataloader: accepted with either value: the prepared loader always has ``state_dict()``.
        torch_device_mesh: not supported (data parallelism only).

    Returns:
        The prepared loader (a :class:`DataLoaderDispatcher` when dispatching was asked for).

    Raises:
        DataPrepareError: ``slice_fn_for_dispatch`` or ``torch_device_mesh`` given, a bad ``process_index``,
            or a loader that cannot be sharded as asked.

    Example:
        >>> dl = prepare_data_loader(DataLoader(range(8), batch_size=2), num_processes=2, process_index=1)
        >>> [b.tolist() for b in dl]
        [[2, 3], [6, 7]]
    """
    for name, value, why in (("slice_fn_for_dispatch", slice_fn_for_dispatch, "each process reads its own share"),
                             ("torch_device_mesh", torch_device_mesh, "only data parallelism is supported")):
        if value is not None:
            raise DataPrepareError(f"prepare_data_loader: {name}= is not supported ({why}); got {shown(value)}, "
                                   "allowed: None")
    checked_loader(dataloader, "prepare_data_loader(dataloader=...)")
    state = _state_for(device, num_processes, process_index)
    config = DataLoaderConfiguration(split_batches=split_batches, even_batches=even_batches,
                                     use_seedable_sampler=use_seedable_sampler, data_seed=data_seed,
                                     non_blocking=non_blocking)
    prepared = _prepare.prepare_data_loader(dataloader, state, GradientState(), config,
                                           device_placement=put_on_device)
    return mark_dispatching(prepared, dispatch_batches)


def mark_dispatching(prepared: _loader.PreparedDataLoader, dispatch_batches: bool | None) -> _loader.PreparedDataLoader:
    """``prepared`` as a :class:`DataLoaderDispatcher` when accelerate would dispatch it, else unchanged.

    accelerate dispatches with ``dispatch_batches=True``, and with ``None`` for an iterable dataset. Only the
    type changes (the subclass adds nothing), so the loader's batches and state are the same either way.
    """
    iterable = isinstance(prepared.dataset, IterableDataset)  # a prepared iterable's shard is one too
    dispatch = dispatch_batches if dispatch_batches is not None else iterable
    if dispatch and type(prepared) is _loader.PreparedDataLoader:
        prepared.__class__ = DataLoaderDispatcher
    return prepared
