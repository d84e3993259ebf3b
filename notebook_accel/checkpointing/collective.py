"""The load phase between validation and applying: objects whose state is read collectively (FSDP shards).

Such an object (a :class:`~notebook_accel.checkpointing.objects.Saved` with ``read``) is read by every rank at
once, so its read must not start before every rank has validated the checkpoint (a rank that failed alone would
leave the others waiting in the read), and it must end with an agreement before anything is applied.
"""

from __future__ import annotations

from typing import Any

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.objects import Saved
from notebook_accel.checkpointing.save import error_text

__all__ = ["read_collective"]


def read_collective(objects: list[Saved], payloads: list[Any], path: str, world: int) -> list[Any]:
    """``payloads`` with each collective object's state read from ``path`` (into fresh tensors: nothing in the
    live objects changes); every rank calls it after the validation agreement.

    Raises:
        CheckpointError: on every rank, when any rank's read failed.
    """
    error: str | None = None
    out = list(payloads)
    if not any(s.read is not None for s in objects):
        return out
    try:
        for i, saved in enumerate(objects):
            if saved.read is not None:
                out[i] = saved.read(path)
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    agree(error, world, f"load checkpoint {path!r}")
    return out
