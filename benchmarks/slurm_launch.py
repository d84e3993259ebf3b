"""A run in a Slurm allocation: time from the call to the end of the first training step, against a local fork
launch in the same process (the goal: at most 1.5x).

Brings up the test suite's two-node Slurm (tests/launcher/slurm: n1 this host, n2 a network namespace; needs root and
Debian's slurm packages), holds a two-node allocation of one CPU a node, and puts this process inside it (its SLURM_*
variables), as a kernel started in the allocation. Each round, in rotating order: ``slurm`` and ``slurm_again``
(``cluster="slurm"``, one rank on each node; the latter an A/A control), ``login`` (the same from a login node: no
SLURM_* but SLURM_CONF, ``SlurmCluster(partition=..., nodes=2)`` asks for an allocation of the two CPUs left, waits
for it, runs in it and gives it back: what the queue adds when it is empty), ``local`` and ``local_again``
(``num_processes=2`` forked here; an A/A control). The function makes the process group, takes one DDP step on a
small MLP and returns the wall-clock time at its end; one warm-up launch of each kind comes first (torch's imports,
the kernel's warm-up).

Usage: ``python benchmarks/slurm_launch.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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


@contextmanager
def login_node(conf: dict[str, str]) -> Iterator[None]:
    """This process as a login node for the block: no SLURM_* but the cluster's SLURM_CONF."""
    inside = {k: v for k, v in os.environ.items() if k.startswith("SLURM")}
    for name in inside:
        del os.environ[name]
    os.environ.update(conf)
    try:
        yield
    finally:
        os.environ.update(inside)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    from notebook_accel.cluster.slurm import SlurmCluster
    from notebook_accel.launcher import notebook_launcher
    from tests.launcher.slurm.bringup import start_cluster

    from notebook_accel.launcher.placement.slurm import placement

    asking: list[float] = []  # how long each login run's allocation took: sinfo, sbatch, the queue, its nodes
    request = placement.request_allocation

    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        try:
            return request(*args)
        finally:
            asking.append(time.perf_counter() - start)

    placement.request_allocation = timed  # type: ignore[assignment]
    with start_cluster() as cluster:
        kinds: dict[str, dict[str, Any]] = {
            "slurm": {"cluster": "slurm"}, "slurm_again": {"cluster": "slurm"},
            "login": {"cluster": SlurmCluster(partition=cluster.partition, nodes=2)}, "local": {}, "local_again": {}}
        held = cluster.allocate(2, tasks_per_node=1)  # one CPU a node: the login run's job fits beside it at once
        os.environ.update({**cluster.env, **held.env})

        def launch(kind: str) -> float:
            with login_node(cluster.env) if kind == "login" else nullcontext():
                start = time.time()
                end: float = notebook_launcher(first_step, num_processes=2, dashboard=False, **kinds[kind])
                return end - start

        try:
            times: dict[str, list[float]] = {k: [] for k in kinds}
            for kind in ("slurm", "login", "local"):
                launch(kind)
            for round_ in range(options.rounds):
                shift = round_ % len(kinds)
                for kind in list(kinds)[shift:] + list(kinds)[:shift]:
                    times[kind].append(launch(kind))
            median = {k: statistics.median(v) for k, v in times.items()}
            for kind, values in times.items():
                print(f"{kind:12s} first step after {median[kind]:.2f} s (median of {len(values)}: "
                      f"{', '.join(f'{v:.2f}' for v in values)})")
            print(f"slurm / local: {median['slurm'] / median['local']:.2f}x; local_again / local (A/A): "
                  f"{median['local_again'] / median['local']:.2f}x")
            print(f"login / slurm: {median['login'] / median['slurm']:.2f}x, the queue (empty) adds "
                  f"{median['login'] - median['slurm']:+.2f} s; slurm_again / slurm (A/A): "
                  f"{median['slurm_again'] / median['slurm']:.2f}x")
            measured = asking[1:]  # less the warm-up's
            print(f"login: asking for the allocation took {statistics.median(measured):.2f} s (median of "
                  f"{len(measured)}: {', '.join(f'{v:.2f}' for v in measured)})")
        finally:
            cluster.release(held)


if __name__ == "__main__":
    main()
