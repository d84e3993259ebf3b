"""The process group a thread's checkpoint collectives run on: the default group, or a background writer's own.

A background save (:mod:`~notebook_accel.checkpointing.background`) agrees with the other ranks from its writer
thread while the training loop runs collectives of its own (DDP's all-reduce, a ``gather``) from the main thread.
Two threads issuing collectives on one process group would interleave them in a different order on each rank and
deadlock or mix their data, so the writer runs every collective of its save (the agreements, FSDP's DCP planning)
on a separate gloo group made for it. This module holds that choice per thread: :func:`using` sets it for the
writer thread, :func:`current` reads it (``None``: the default group) wherever a checkpoint collective is issued.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["current", "using"]

_LOCAL = threading.local()


def current() -> Any:
    """The process group this thread's checkpoint collectives use; ``None`` for the default group."""
    return getattr(_LOCAL, "group", None)


@contextlib.contextmanager
def using(group: Any) -> Iterator[None]:
    """Run this thread's checkpoint collectives on ``group`` inside the block."""
    before = current()
    _LOCAL.group = group
    try:
        yield
    finally:
        _LOCAL.group = before
