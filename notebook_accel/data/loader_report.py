"""What a prepared DataLoader reports when an epoch starts: the progress hook, the epoch's batches, its name.

The loader (:mod:`notebook_accel.data.loader`) then reports its position through the hook while it runs; here is
what it works out once per epoch, and only when someone listens (a launched run's channel installed the hook).
"""

from __future__ import annotations

from typing import Any

from notebook_accel import progress_hook
from notebook_accel.data.epoch_bar import epoch_loop_position
from notebook_accel.data.iterable import ShardedIterableDataset

__all__ = ["open_report", "batches_per_epoch"]


def open_report(loader: Any) -> tuple[progress_hook.ProgressHook | None, int | None, str]:
    """``(the progress hook or None, batches this epoch or None, the loader's progress name)`` for a
    :class:`~notebook_accel.data.loader.PreparedDataLoader` starting an epoch; on the main process, the epoch loop
    around it (a tqdm over epochs, :mod:`.epoch_bar`) is reported first.
    """
    report = progress_hook.current()  # every rank reports its position (the dashboard's ranks table)
    if report is None:
        return None, None, ""
    total = batches_per_epoch(loader)
    if loader.state.is_main_process:
        around = epoch_loop_position(loader, total, loader.epoch)
        if around is not None:
            report(loader.state.process_index, *around, None, "loop")
    return report, total, loader.progress_name()


def batches_per_epoch(loader: Any) -> int | None:
    """A prepared loader's batches per epoch (its skipped ones included), or ``None`` when unknown.

    Unknown also for a batching loader over an iterable dataset split between several DataLoader workers: each
    worker ends its share with its own partial batch, and how the dataset splits itself between workers is its
    own business, so ``len()`` (torch's ``ceil(items / batch_size)``) undercounts (a bar at 4/3).
    """
    dataset = loader.dataset
    if isinstance(dataset, ShardedIterableDataset) and loader.num_workers > 1 and dataset.batched:
        return None
    try:
        return int(loader._skip + len(loader))
    except TypeError:
        return None
