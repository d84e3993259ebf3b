"""A run in a Slurm allocation: time from the call to the end of the first training step, against a local fork
launch in the same process (the goal: at most 1.5x).

Brings up the test suite's two-node Slurm (tests/launcher/slurm: n1 this host, n2 a network namespace; needs root and
Debian's slurm packages), holds a two-node allocation, and puts this process inside it (its SLURM_* variables), as a
kernel started in the allocation. Two phases, each of rounds in rotating order with ``local`` and ``local_again``
(``num_processes=2`` forked here; the latter an A/A control): ``slurm_cold`` (``SlurmCluster(keep_warm=0)``: a new
srun step each launch, one rank on each node), then ``slurm_warm`` (``cluster="slurm"``, whose step is kept warm: the
3rd and later launches of the phase; a cold launch would end the kept step, hence the phases). The function makes the
process group, takes one DDP step on a small MLP and returns the wall-clock time at its end; one warm-up launch of
each kind comes first (torch's imports, the kernel's warm-up; the warm phase has two).

Usage: ``python benchmarks/slurm_launch.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def first_step() -> float:
    """Make the group, take one DDP step; the wall-clock time at its end."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
    loss = model(torch.randn(64, 256)).square().mean()
    loss.backward()
    dist.barrier()
    return time.time()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    from notebook_accel import SlurmCluster
    from notebook_accel.launcher import notebook_launcher
    from notebook_accel.launcher.placement.slurm.warm import release_slurm_steps
    from tests.launcher.slurm.bringup import start_cluster

    kinds: dict[str, dict[str, Any]] = {"slurm_cold": {"cluster": SlurmCluster(keep_warm=0)},
                                        "slurm_warm": {"cluster": "slurm"}, "local": {}, "local_again": {}}
    times: dict[str, dict[str, list[float]]] = {}

    def launch(kind: str) -> float:
        start = time.time()
        end: float = notebook_launcher(first_step, num_processes=2, dashboard=False, **kinds[kind])
        return end - start

    with start_cluster() as cluster:
        held = cluster.allocate(2)
        os.environ.update({**cluster.env, **held.env})
        try:
            launch("local")
            for slurm in ("slurm_cold", "slurm_warm"):
                for _ in range(1 if slurm == "slurm_cold" else 2):
                    launch(slurm)
                rotation = [slurm, "local", "local_again"]
                phase: dict[str, list[float]] = {k: [] for k in rotation}
                times[slurm] = phase
                for round_ in range(options.rounds):
                    for kind in rotation[round_ % 3:] + rotation[:round_ % 3]:
                        phase[kind].append(launch(kind))
            for slurm, measured in times.items():  # each contender against the local launches of its own phase
                median = {k: statistics.median(v) for k, v in measured.items()}
                for kind, values in measured.items():
                    print(f"{slurm[6:]:4s} {kind:12s} first step after {median[kind]:.2f} s (median of {len(values)}: "
                          f"{', '.join(f'{v:.2f}' for v in values)})")
                print(f"{slurm} / local: {median[slurm] / median['local']:.2f}x; local_again / local (A/A): "
                      f"{median['local_again'] / median['local']:.2f}x")
        finally:
            release_slurm_steps()
            cluster.release(held)


if __name__ == "__main__":
    main()
