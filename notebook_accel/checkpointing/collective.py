"""The load phase between validation and applying: objects whose state is read collectively (FSDP shards).

Such an object (a :class:`~notebook_accel.checkpointing.objects.Saved` with ``read``) is read by every rank at
once, so its read must not start before every rank has validated the checkpoint (a rank that failed alone would
leave the others waiting in the read), and it must end with an agreement before anything is applied.

The checksums of its shard files are checked while they are read (:mod:`.verified_reads`), not before: a damaged
file is found by the read, which fills only fresh tensors, and the agreement then refuses the load on every rank
with nothing applied. A rank's owed file that its reader never opened (a shard other ranks read after a
resharding) is hashed here; so is every owed file left unchecked when a read fails, so that a damaged file is
reported as damaged rather than as whatever the reader made of its bytes.
"""

from __future__ import annotations

import os
from typing import Any

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.manifest import Manifest
from notebook_accel.checkpointing.objects import Saved
from notebook_accel.checkpointing.save import error_text
from notebook_accel.checkpointing.verified_reads import Expected, verifying

__all__ = ["read_collective"]


def read_collective(objects: list[Saved], payloads: list[Any], manifest: Manifest, path: str, world: int,
                    owed: dict[str, Expected]) -> list[Any]:
    """``payloads`` with each collective object's state read from ``path`` (into fresh tensors: nothing in the
    live objects changes); every rank calls it after the validation agreement.

    ``owed``: the files (absolute path -> the manifest's record) whose checksum this rank checks while reading.

    Raises:
        CheckpointError: on every rank, when any rank's read failed or found a damaged file.
    """
    error: str | None = None
    out = list(payloads)
    if not any(s.read is not None for s in objects):
        return out
    left = dict(owed)
    try:
        with verifying(left):
            for i, saved in enumerate(objects):
                if saved.read is not None:
                    out[i] = saved.read(path)
    except Exception as e:  # any failure must reach the other ranks, or they would wait forever
        error = error_text(e)
    damage = manifest.verify_files(path, sorted(os.path.basename(name) for name in left))
    if damage:
        error = f"checkpoint {path!r} is damaged: " + "; ".join(damage)
    agree(error, world, f"load checkpoint {path!r}")
    return out
