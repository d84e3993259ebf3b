"""Run by ``notebook-accel launch`` in the exposure test: once the gloo group is up, rank 0 writes (pid, address,
port) of every listening socket that torchrun's agent and both workers hold to the file named by ``argv[1]``."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from tests.launcher.rendezvous.test_store import listening_sockets


def main(out: str) -> None:
    """Form the group, gather the workers' pids, and (rank 0) record the listeners with the agent's pid."""
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    pids = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(pids, torch.tensor([os.getpid()]))
    if dist.get_rank() == 0:
        found = listening_sockets([os.getppid(), *(int(p.item()) for p in pids)])
        with open(out, "w") as f:
            json.dump({"sockets": found, "agent": os.getppid(), "port": int(os.environ["MASTER_PORT"])}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
