"""accelerate's free prepare_data_loader(...) and DataLoaderDispatcher over our loader preparation."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from notebook_accel import DataLoaderDispatcher, notebook_launcher, prepare_data_loader
from notebook_accel.data import DataPrepareError, PreparedDataLoader
from tests.helpers import import_accelerate
from tests.launcher.recording import RecordingSink


class Stream(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from range(8)


def batches(loader: DataLoader) -> list[list[int]]:  # type: ignore[type-arg]
    return [b.tolist() for b in loader]


def test_takes_accelerates_parameters_in_its_order() -> None:
    theirs = list(inspect.signature(import_accelerate().data_loader.prepare_data_loader).parameters)
    assert list(inspect.signature(prepare_data_loader).parameters)[: len(theirs)] == theirs


def test_shards_for_the_process_asked_for() -> None:
    loader = DataLoader(range(8), batch_size=2)
    assert batches(prepare_data_loader(loader, num_processes=2, process_index=0)) == [[0, 1], [4, 5]]
    assert batches(prepare_data_loader(loader, None, 2, 1)) == [[2, 3], [6, 7]]
    assert batches(prepare_data_loader(loader, None, 2, 1, split_batches=True)) == [[1], [3], [5], [7]]
    assert batches(prepare_data_loader(loader)) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_even_batches_and_device() -> None:
    loader = DataLoader(range(5), batch_size=2)
    assert batches(prepare_data_loader(loader, num_processes=2, process_index=1)) == [[2, 3], [1, 2]]
    assert batches(prepare_data_loader(loader, num_processes=2, process_index=1, even_batches=False)) == [[2, 3]]
    placed = prepare_data_loader(loader, torch.device("cpu"), put_on_device=True)
    assert isinstance(placed, PreparedDataLoader) and placed.device == torch.device("cpu")
    assert prepare_data_loader(loader).device is None  # accelerate's put_on_device=False default


def test_dispatching_gives_a_dispatcher_with_the_same_batches() -> None:
    loader = DataLoader(range(8), batch_size=2)
    dispatched = prepare_data_loader(loader, num_processes=2, process_index=1, dispatch_batches=True)
    assert isinstance(dispatched, DataLoaderDispatcher) and batches(dispatched) == [[2, 3], [6, 7]]
    assert not isinstance(prepare_data_loader(loader), DataLoaderDispatcher)
    stream = prepare_data_loader(DataLoader(Stream(), batch_size=2))  # accelerate dispatches iterables by default
    assert isinstance(stream, DataLoaderDispatcher) and batches(stream) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert not isinstance(prepare_data_loader(DataLoader(Stream(), batch_size=2), dispatch_batches=False),
                          DataLoaderDispatcher)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_processes": 2, "process_index": 2}, "process_index=2 is not one of the 2 processes"),
    ({"num_processes": 0, "process_index": 0}, "allowed: 0 to -1"),
    ({"slice_fn_for_dispatch": len}, "slice_fn_for_dispatch= is not supported"),
    ({"torch_device_mesh": object()}, "torch_device_mesh= is not supported"),
])
def test_refusals(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(DataPrepareError, match=match):
        prepare_data_loader(DataLoader(range(4), batch_size=2), **kwargs)  # type: ignore[arg-type]


def shard_in_a_run() -> list[list[int]]:
    """Each launched rank prepares with the defaults: its own rank of the run."""
    from notebook_accel.ops import gather_object

    return gather_object([batches(prepare_data_loader(DataLoader(range(6), batch_size=1)))])


def test_defaults_come_from_the_run() -> None:
    assert notebook_launcher(shard_in_a_run, num_processes=2, dashboard=RecordingSink()) == [[[0], [2], [4]],
                                                                                            [[1], [3], [5]]]


def test_the_accelerator_method_takes_accelerates_parameters() -> None:
    from notebook_accel import Accelerator

    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare_data_loader(data_loader=DataLoader(range(4), batch_size=2), device_placement=False)
    assert batches(prepared) == [[0, 1], [2, 3]]
    with pytest.raises(DataPrepareError, match="slice_fn_for_dispatch=.* is not supported"):
        accelerator.prepare_data_loader(DataLoader(range(4)), slice_fn_for_dispatch=len)


def test_the_accelerator_dispatches_as_accelerate_would() -> None:
    from notebook_accel import Accelerator, DataLoaderConfiguration

    plain = Accelerator(cpu=True)
    assert not isinstance(plain.prepare(DataLoader(range(4), batch_size=2)), DataLoaderDispatcher)
    assert isinstance(plain.prepare(DataLoader(Stream(), batch_size=2)), DataLoaderDispatcher)
    dispatching = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=True))
    prepared = dispatching.prepare(DataLoader(range(4), batch_size=2))
    assert isinstance(prepared, DataLoaderDispatcher) and batches(prepared) == [[0, 1], [2, 3]]
    assert dispatching.dispatch_batches is True
    never = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=False))
    assert not isinstance(never.prepare(DataLoader(Stream(), batch_size=2)), DataLoaderDispatcher)


def dispatched_in_a_run() -> list[list[list[int]]]:
    """dispatch_batches=True on 2 processes: each gets what rank 0 would have sent it."""
    from notebook_accel import Accelerator, DataLoaderConfiguration

    for split in (False, True):
        accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=True,
                                                                            split_batches=split))
        loader = accelerator.prepare(DataLoader(range(8), batch_size=2))
        if not split:
            whole = accelerator.gather_object([batches(loader)])
    return whole + accelerator.gather_object([batches(loader)])


def test_dispatching_in_two_processes() -> None:
    assert notebook_launcher(dispatched_in_a_run, num_processes=2, dashboard=RecordingSink()) == [
        [[0, 1], [4, 5]], [[2, 3], [6, 7]], [[0], [2], [4], [6]], [[1], [3], [5], [7]]]
