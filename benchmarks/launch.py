"""Launch overhead: ``notebook_launcher`` against raw ``torch.multiprocessing.start_processes`` (fork).

Both run the same work in 2 processes: create the gloo process group (env:// rendezvous on 127.0.0.1) and
do one all-reduce. Runs alternate in the same process so both see the same machine state; the script
prints each median and the ratio (launcher / raw; below 1.0x the launcher is cheaper).

Usage: ``python benchmarks/launch.py [--quick] [--runs N]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import socket
import statistics
import time
from typing import Callable

import torch  # imported in the parent for both contenders, as in a notebook
import torch.distributed as dist
import torch.multiprocessing as tmp

from notebook_accel import notebook_launcher


def work() -> float:
    """The measured work: make the process group, all-reduce one tensor."""
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _raw_entry(local_rank: int, world_size: int, port: int) -> None:
    """What a hand-written fork launcher does in each child before the work."""
    os.environ.update(
        RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    work()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds() -> float:
    """CPU time of this process plus its reaped children (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measure(run: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of one run."""
    cpu, start = _cpu_seconds(), time.perf_counter()
    run()
    return time.perf_counter() - start, _cpu_seconds() - cpu


def time_raw() -> tuple[float, float]:
    """One raw start_processes run: (wall, CPU) seconds."""
    return _measure(
        lambda: tmp.start_processes(_raw_entry, args=(2, _free_port()), nprocs=2, join=True, start_method="fork")
    )


def time_launcher() -> tuple[float, float]:
    """One notebook_launcher run: (wall, CPU) seconds (its two console lines are swallowed)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return _measure(lambda: notebook_launcher(work, num_processes=2, dashboard=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 runs of each instead of 15")
    parser.add_argument("--runs", type=int, default=None, help="runs of each contender")
    options = parser.parse_args()
    runs = options.runs or (5 if options.quick else 15)
    env_before = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    time_raw(), time_launcher()  # warm-up: lazy imports, page cache
    raw: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    for i in range(runs):
        order = (time_raw, time_launcher) if i % 2 == 0 else (time_launcher, time_raw)
        for fn in order:
            (raw if fn is time_raw else ours).append(fn())
    if {k: os.environ.get(k) for k in env_before} != env_before:
        raise RuntimeError("the parent's environment changed during the benchmark")
    raw_wall, our_wall = (statistics.median(w for w, _ in rows) for rows in (raw, ours))
    raw_cpu, our_cpu = (statistics.median(c for _, c in rows) for rows in (raw, ours))
    print(f"raw torch.multiprocessing.start_processes(fork): median {raw_wall * 1000:.1f} ms over {runs} runs")
    print(f"notebook_launcher(num_processes=2, dashboard=False): median {our_wall * 1000:.1f} ms over {runs} runs")
    print(f"ratio notebook_launcher / raw fork: {our_wall / raw_wall:.2f}x")
    print(f"CPU time (kernel + workers), median: raw {raw_cpu * 1000:.1f} ms, notebook_launcher {our_cpu * 1000:.1f} ms, "
          f"ratio {our_cpu / raw_cpu:.2f}x")


if __name__ == "__main__":
    main()
