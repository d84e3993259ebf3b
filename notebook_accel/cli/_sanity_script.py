"""The script ``notebook-accel test`` runs on 2 processes: one gloo all-reduce, checked, one line per rank.

Run by torch.distributed.run, which sets the rank variables; not imported by the package.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist


def main() -> int:
    """All-reduce ``rank + 1`` over every process and check the sum."""
    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        expected = world * (world + 1) / 2
        ok = value.item() == expected
        verdict = "ok" if ok else "WRONG"
        # one write per line: the ranks share the launcher's output pipe
        sys.stdout.write(f"sanity rank {rank}/{world}: all_reduce gave {value.item():g}, expected {expected:g}: "
                         f"{verdict}\n")
        sys.stdout.flush()
        dist.barrier()
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
