"""HYBRID_SHARD on a real 2-D mesh: 4 processes that present themselves as 2 machines of 2 processes each."""

from __future__ import annotations

import os
from typing import Any

from notebook_accel.environment import patched_environ
from tests.engines.fsdp import workers


def two_machines_of_two(strategy: str | None) -> dict[str, Any]:
    """``workers.train`` with ``LOCAL_WORLD_SIZE=2`` (and the matching ``LOCAL_RANK``) on every rank, so
    HYBRID_SHARD builds a (replicate=2, shard=2) mesh; also returns that mesh's shape."""
    rank = int(os.environ["RANK"])
    with patched_environ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": str(rank % 2)}):
        out = workers.train(strategy)
    return out
