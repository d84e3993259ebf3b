"""Prepared loaders read by DataLoader worker processes resume exactly mid-epoch.

torch's worker iterator asks the batch sampler for an iterator twice when it starts (once in its base class, once
in its ``_reset``), and a persistent-workers loader reuses its iterator from the second epoch on, so it draws its
workers' base seed from the DataLoader's generator only once. Neither may change which batches a resumed or
skipped epoch holds.
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator, notebook_launcher

pytestmark = pytest.mark.timeout(120)

_OPEN: list[Any] = []


@pytest.fixture(autouse=True)
def _workers_shut_down() -> Iterator[None]:
    """Drop the test's loaders, so that persistent workers end before the leak check looks."""
    yield
    _OPEN.clear()
    gc.collect()


def _loader(persistent: bool, generator: bool) -> Any:
    """A prepared, shuffled loader of 0..12 in batches of 3, read by two worker processes."""
    torch.manual_seed(0)  # every run of a notebook draws the same shuffle seed
    extra: dict[str, Any] = {"generator": torch.Generator().manual_seed(5)} if generator else {}
    plain = DataLoader(list(range(13)), batch_size=3, shuffle=True, num_workers=2,
                       persistent_workers=persistent, **extra)
    prepared = Accelerator(cpu=True).prepare(plain)
    _OPEN.append(prepared)
    return prepared


def _ids(batches: Any) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def _two_batches_then_state(loader: Any) -> tuple[list[Any], dict[str, Any]]:
    """The first two batches of the loader's next epoch, and its state_dict() right after them (a checkpoint)."""
    done = []
    for batch in loader:
        done.append(batch.tolist())
        if len(done) == 2:
            return done, loader.state_dict()
    raise AssertionError(f"the epoch had {len(done)} batches, fewer than 2")


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent-workers"])
@pytest.mark.parametrize("generator", [False, True], ids=["seeded", "own-generator"])
def test_a_resumed_or_skipped_epoch_with_workers_is_the_rest_of_that_epoch(persistent: bool,
                                                                           generator: bool) -> None:
    straight = _loader(persistent, generator)
    _ids(straight)  # epoch 0
    second = _ids(straight)  # epoch 1: what an uninterrupted run trains on
    interrupted = _loader(persistent, generator)
    _ids(interrupted)
    done, state = _two_batches_then_state(interrupted)
    assert done == second[:2]
    resumed = _loader(persistent, generator)
    resumed.load_state_dict(state)
    assert _ids(resumed) == second[2:]  # was the whole epoch again: the skip went to a discarded iterator
    skipped = _loader(persistent, generator)
    _ids(skipped)
    view = Accelerator(cpu=True).skip_first_batches(skipped, 2)
    _OPEN.append(view)
    assert _ids(view) == second[2:]


def test_a_dropped_loader_is_freed_at_once_so_its_persistent_workers_end_cleanly() -> None:
    # In a reference cycle (loader -> Accelerator -> loader) the garbage collector closed the worker queues
    # before the worker iterator's __del__ could send the workers their stop: each worker then took torch's
    # 5 s join timeout and a SIGTERM (10 s for two workers, in whichever cell the collector ran).
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(list(range(6)), batch_size=3, num_workers=2, persistent_workers=True))
    assert sum(len(batch) for batch in loader) == 6
    freed = weakref.ref(loader)
    del accelerator, loader
    assert freed() is None


class _SlowFirstBatch(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """0..8; the first batch's items take a while, so an out-of-order loader yields the second batch first."""

    def __len__(self) -> int:
        return 9

    def __getitem__(self, index: int) -> torch.Tensor:
        if index < 3:
            time.sleep(0.3)
        return torch.tensor(index)


def test_batches_stay_in_order_so_a_resume_and_the_padding_count_stay_exact() -> None:
    # With in_order=False batches arrive as workers finish them: a checkpoint's "2 batches done" then named
    # batches the run never trained on (items lost and repeated on resume), and the padded last round could be
    # yielded before the end, where gather_for_metrics does not look for it.
    plain = DataLoader(_SlowFirstBatch(), batch_size=3, num_workers=2, in_order=False)
    with pytest.warns(UserWarning, match=r"in_order=False.*in order"):
        prepared = Accelerator(cpu=True).prepare(plain)
    _OPEN.append(prepared)
    assert prepared.in_order is True
    assert _ids(prepared) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def _train(folder: str, stop_after: int | None, resume: bool) -> list[Any]:
    """Epochs 0-1 of a shuffled loader read by two persistent workers on each rank, the second epoch stopped and
    saved after ``stop_after`` batches, or resumed from ``folder``; every rank's batches of the second epoch."""
    accelerator = Accelerator()
    torch.manual_seed(0)
    plain = DataLoader(list(range(23)), batch_size=3, shuffle=True, num_workers=2, persistent_workers=True,
                       generator=torch.Generator().manual_seed(3))
    loader = accelerator.prepare(plain)
    if resume:
        accelerator.load_state(folder)
    seen: list[list[int]] = []
    for epoch in range(loader.epoch, 2):
        for batch in loader:
            if epoch == 1:
                seen.append(batch.tolist())
            if epoch == 1 and len(seen) == stop_after:
                accelerator.save_state(folder)
                return accelerator.gather_object([seen])
    return accelerator.gather_object([seen])


def test_a_launched_run_with_workers_resumed_mid_epoch_trains_on_every_item_once(tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    before = notebook_launcher(_train, args=(folder, 2, False), num_processes=2, dashboard=False)
    after = notebook_launcher(_train, args=(folder, None, True), num_processes=2, dashboard=False)
    items = sorted(i for rank in before + after for batch in rank for i in batch)
    padding = sorted(i for batch in [after[1][-1]] for i in batch[2:])  # 23 items: one repeat in the last round
    assert len(before[0]) == 2 and sorted(set(items)) == list(range(23))
    assert items == sorted(list(range(23)) + padding)


class _EpochStream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """0..11 in an order chosen by the epoch (``set_epoch``), split between DataLoader workers."""

    def __init__(self) -> None:
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        order = torch.randperm(12, generator=torch.Generator().manual_seed(self.epoch)).tolist()
        return iter(torch.tensor(order[i]) for i in range(info.id if info else 0, 12, info.num_workers if info else 1))


def _stream_loader() -> Any:
    prepared = Accelerator(cpu=True).prepare(DataLoader(_EpochStream(), batch_size=2, num_workers=2,
                                                        persistent_workers=True))
    _OPEN.append(prepared)
    return prepared


def test_persistent_workers_see_each_epoch_of_an_iterable_dataset_and_resume_exactly() -> None:
    straight = _stream_loader()
    first, second = _ids(straight), _ids(straight)
    assert first != second  # was the same: the workers' copies stayed at epoch 0
    interrupted = _stream_loader()
    _ids(interrupted)
    done, state = _two_batches_then_state(interrupted)
    resumed = _stream_loader()
    resumed.load_state_dict(state)
    rest = _ids(resumed)
    assert done + rest == second
    assert sorted(i for batch in done + rest for i in batch) == list(range(12))
