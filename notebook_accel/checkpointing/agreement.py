"""How the ranks agree on the outcome of a save or a load before anyone acts on it.

Each rank contributes ``None`` (fine) or an error message; every rank gets the full list (one all-gather, which is
also a barrier) and, when any rank failed, every rank raises the same :class:`CheckpointError` naming the ranks
and their errors. So one rank's full disk fails all ranks cleanly instead of leaving the others at a barrier.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from notebook_accel.checkpointing import writer_group
from notebook_accel.checkpointing.errors import CheckpointError

__all__ = ["is_distributed", "exchange", "agree"]


def is_distributed(world_size: int) -> bool:
    """True when a process group is up and more than one process takes part."""
    return world_size > 1 and dist.is_available() and dist.is_initialized()


def exchange(value: Any, world_size: int) -> list[Any]:
    """Every rank's ``value`` (picklable), in rank order; ``[value]`` in a single process. Runs on this thread's
    checkpoint group (:func:`~notebook_accel.checkpointing.writer_group.current`: a background writer's own)."""
    if not is_distributed(world_size):
        return [value]
    group = writer_group.current()
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


def agree(error: str | None, world_size: int, action: str, payload: Any = None) -> list[Any]:
    """Share this rank's error (or None) with all ranks; raise on every rank when any rank failed.

    Args:
        error: this rank's error message, or None.
        world_size: number of processes.
        action: what was being done, for the message (``"save checkpoint to '/x'"``).
        payload: a small picklable value to share along (e.g. the main process's temporary directory).

    Returns:
        Every rank's ``payload``, in rank order.

    Raises:
        CheckpointError: on every rank, listing each failed rank and its error.
    """
    shared = exchange((error, payload), world_size)
    failed = [(rank, msg) for rank, (msg, _) in enumerate(shared) if msg is not None]
    if failed:
        if len(failed) == 1 and world_size == 1:
            raise CheckpointError(f"could not {action}: {failed[0][1]}")
        detail = "; ".join(f"rank {rank}: {msg}" for rank, msg in failed)
        raise CheckpointError(f"could not {action} ({len(failed)} of {world_size} ranks failed): {detail}")
    return [value for _, value in shared]
