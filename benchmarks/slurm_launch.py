"""A run in a Slurm allocation: time from the call to the end of the first training step, against a local fork
launch in the same process (the goal: at most 1.5x).

Brings up the test suite's two-node Slurm (tests/launcher/slurm: n1 this host, n2 a network namespace; needs root and
Debian's slurm packages), holds a two-node allocation of one CPU a node, and puts this process inside it (its SLURM_*
variables), as a kernel started in the allocation. Two phases, each of rounds in rotating order with ``local`` and
``local_again`` (``num_processes=2`` forked here; the latter an A/A control):

- cold: ``slurm_cold`` (``SlurmCluster(keep_warm=0)``: a new srun step each launch, one rank on each node) and
  ``login`` (the same from a login node: no SLURM_* but SLURM_CONF, ``SlurmCluster(partition=..., nodes=2)`` asks for
  an allocation of the two CPUs left, waits for it, runs in it and gives it back: what the queue adds when it is
  empty);
- warm: ``slurm_warm`` (``cluster="slurm"``, whose step is kept warm: the 3rd and later launches of the phase; a cold
  launch would end the kept step, hence the phases).

The function makes the process group, takes one DDP step on a small MLP and returns the wall-clock time at its end;
one warm-up launch of each kind comes first (torch's imports, the kernel's warm-up; the warm phase has two).

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
    from notebook_accel import SlurmCluster
    from notebook_accel.launcher import notebook_launcher
    from notebook_accel.launcher.placement.slurm.warm import release_slurm_steps
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
            "slurm_cold": {"cluster": SlurmCluster(keep_warm=0)}, "slurm_warm": {"cluster": "slurm"},
            "login": {"cluster": SlurmCluster(partition=cluster.partition, nodes=2, keep_warm=0)},
            "local": {}, "local_again": {}}
        held = cluster.allocate(2, tasks_per_node=1)  # one CPU a node: the login run's job fits beside it at once
        os.environ.update({**cluster.env, **held.env})

        def launch(kind: str) -> float:
            with login_node(cluster.env) if kind == "login" else nullcontext():
                start = time.time()
                end: float = notebook_launcher(first_step, num_processes=2, dashboard=False, **kinds[kind])
                return end - start

        phases = {"cold": ["slurm_cold", "login", "local", "local_again"],
                  "warm": ["slurm_warm", "local", "local_again"]}
        try:
            times: dict[str, dict[str, list[float]]] = {}
            launch("local")
            for name, rotation in phases.items():
                for kind in rotation[:-2]:  # the warm-ups; the warm phase's second launch is its first warm one
                    for _ in range(2 if kind == "slurm_warm" else 1):
                        launch(kind)
                phase: dict[str, list[float]] = {k: [] for k in rotation}
                times[name] = phase
                for round_ in range(options.rounds):
                    shift = round_ % len(rotation)
                    for kind in rotation[shift:] + rotation[:shift]:
                        phase[kind].append(launch(kind))
            for name, measured in times.items():  # each contender against the local launches of its own phase
                median = {k: statistics.median(v) for k, v in measured.items()}
                for kind, values in measured.items():
                    print(f"{name:4s} {kind:12s} first step after {median[kind]:.2f} s (median of {len(values)}: "
                          f"{', '.join(f'{v:.2f}' for v in values)})")
                slurm = phases[name][0]
                print(f"{slurm} / local: {median[slurm] / median['local']:.2f}x; local_again / local (A/A): "
                      f"{median['local_again'] / median['local']:.2f}x")
                if "login" in measured:
                    print(f"login / slurm_cold: {median['login'] / median['slurm_cold']:.2f}x, the queue (empty) "
                          f"adds {median['login'] - median['slurm_cold']:+.2f} s")
            measured_asks = asking[1:]  # less the warm-up's
            print(f"login: asking for the allocation took {statistics.median(measured_asks):.2f} s (median of "
                  f"{len(measured_asks)}: {', '.join(f'{v:.2f}' for v in measured_asks)})")
        finally:
            release_slurm_steps()
            cluster.release(held)


if __name__ == "__main__":
    main()
