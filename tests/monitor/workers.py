"""Worker bodies for the monitor's real launches."""

from __future__ import annotations

import os
import time

import torch


def busy(seconds: float) -> int:
    """Keep a core busy for ``seconds`` with a tensor held (so CPU % and memory are both above zero)."""
    held = torch.ones(4_000_000)  # 16 MB
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        held.mul_(1.0)
    return int(held.numel())


def grow_in_cgroup(procs_file: str) -> None:
    """Rank 1 moves into the memory cgroup ``procs_file`` belongs to and allocates until the kernel kills it;
    rank 0 waits to be stopped."""
    if int(os.environ["RANK"]) != 1:
        time.sleep(60)
        return
    with open(procs_file, "w") as f:
        f.write(str(os.getpid()))
    chunks = []
    while True:  # 8 MB every 0.1 s: a sample (every second) sees the group fill up
        chunk = bytearray(8 << 20)
        chunk[::4096] = b"\x01" * len(chunk[::4096])
        chunks.append(chunk)
        time.sleep(0.1)
