"""A tiny script for the CLI tests, run by ``notebook-accel launch``: a gloo all-reduce and one line per rank."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from notebook_accel.environment import LaunchEnvironment


def main(argv: list[str]) -> int:
    """All-reduce ``rank + 1``; print what the launch passed; with ``--fail`` rank 1 fails."""
    dist.init_process_group("gloo")
    try:
        env = LaunchEnvironment.from_environ()
        if "--fail" in argv and env.rank == 1:
            raise SystemExit(3)
        value = torch.tensor([float(env.rank + 1)])
        dist.all_reduce(value)
        sys.stdout.write(f"rank {env.rank}/{env.world_size} sum={value.item():g} device={env.device} "
                         f"precision={env.mixed_precision} accumulation={env.gradient_accumulation_steps} "
                         f"args={argv}\n")  # one write per line: the ranks share one pipe
        sys.stdout.flush()
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
