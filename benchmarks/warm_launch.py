"""Warm launch in real Jupyter kernels: ``notebook_launcher`` (with and without the dashboard) against the physical
limit, a raw fork with ``torch._dynamo`` imported beforehand that returns the same value.

**One kernel per contender** (started with :mod:`jupyter_client`, so the dashboard's widgets really send their
messages on iopub), as a user has it: a kernel that runs raw forks never holds the launcher's state (its dashboards,
its threads, a larger heap to fork), and a kernel that launches never ran raw forks. Measured in one kernel, the
raw fork paid the launcher's leftovers too and the ratio hid the launcher's cost (issue 48).

- ``raw``: ``torch.multiprocessing.start_processes`` (fork) of 2 workers that make a gloo group, wrap a small
  model in DDP (what a training function does first), all-reduce one tensor and send the result back through a
  pipe (what the launcher returns), in a kernel that imported torch and ``torch._dynamo``;
- ``raw (A/A)``: the same in a second kernel, a control: its ratio to ``raw`` says how much noise the machine adds;
- ``dashboard``: ``notebook_launcher(work, num_processes=2)`` with its live dashboard, in a kernel that imported
  torch and the launcher (as a notebook does);
- ``dashboard=False``: the same with console output only, in a kernel of its own;
- ``--compare PATH`` adds ``dashboard @before``: the dashboard contender with the package imported from another
  checkout (``PYTHONPATH=PATH``), for a before/after in the same run.

Every kernel first launches twice (the first launch imports and warms; the issue's figure is the 3rd and later
launch), then each round launches once in every kernel, each launch its own cell timed inside the kernel, in an
order that rotates from round to round. Printed: each median, and the median of the per-round ratios to ``raw``
with their interquartile range (goal: dashboard / raw <= 1.2x).

Usage: ``python benchmarks/warm_launch.py [--rounds N] [--quick] [--compare PATH]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

_WORK = """
import json, os, socket, time
import torch, torch.distributed as dist

def work():
    dist.init_process_group("gloo")
    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))  # what a training function does first
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()

def timed(call):
    start = time.perf_counter()
    value = call()
    elapsed = time.perf_counter() - start
    if value != 2.0:
        raise RuntimeError(f"the launch returned {value!r}, expected 2.0")
    print("TIME", elapsed)
"""

_RAW = _WORK + """
import torch._dynamo, torch.multiprocessing as mp

def _entry(rank, port, conn):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    value = work()
    if rank == 0:
        conn.send(value)

def launch():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    receive, send = mp.Pipe(duplex=False)
    mp.start_processes(_entry, args=(port, send), nprocs=2, start_method="fork")
    value = receive.recv()
    receive.close(); send.close()
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(k, None)
    return value
"""

_LAUNCHER = _WORK + """
from notebook_accel import notebook_launcher

def launch():
    return notebook_launcher(work, num_processes=2, dashboard={dashboard})
"""

WARM_LAUNCHES = 2  # every kernel launches this often before the rounds: the figure is a 3rd and later launch


def _run_cell(client: Any, code: str) -> str:
    """Execute ``code`` in the kernel; its stdout (raises with the kernel's error if the cell failed)."""
    out: list[dict[str, Any]] = []
    reply = client.execute_interactive(code, timeout=900, store_history=False, output_hook=out.append)
    if reply["content"]["status"] != "ok":
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        raise RuntimeError(f"benchmark cell failed: {errors or reply['content']}")
    return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")


def _launch(client: Any) -> float:
    """One launch in its own cell; the seconds it took, timed inside the kernel."""
    out = _run_cell(client, "timed(launch)")
    return float([row for row in out.splitlines() if row.startswith("TIME ")][-1].split()[1])


def contenders(compare: str | None) -> dict[str, tuple[str, str]]:
    """Each contender's set-up cell and the ``PYTHONPATH`` of its kernel."""
    ours = str(REPO)
    table = {
        "raw": (_RAW, ours),
        "raw (A/A)": (_RAW, ours),
        "dashboard": (_LAUNCHER.replace("{dashboard}", "None"), ours),
        "dashboard=False": (_LAUNCHER.replace("{dashboard}", "False"), ours),
    }
    if compare:
        table["dashboard @before"] = (_LAUNCHER.replace("{dashboard}", "None"), str(Path(compare).resolve()))
    return table


def measure(rounds: int, compare: str | None = None) -> dict[str, list[float]]:
    """Start one kernel per contender, warm each, run the rotating rounds; the seconds of each launch by contender."""
    from jupyter_client.manager import start_new_kernel

    table = contenders(compare)
    kernels: dict[str, tuple[Any, Any]] = {}
    try:
        for name, (setup, path) in table.items():
            env = {**os.environ, "PYTHONPATH": path}
            kernels[name] = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=env)
            _run_cell(kernels[name][1], setup)
        names = list(table)
        for name in names:
            for _ in range(WARM_LAUNCHES):
                _launch(kernels[name][1])
        times: dict[str, list[float]] = {name: [] for name in names}
        for i in range(rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                times[name].append(_launch(kernels[name][1]))
        return times
    finally:
        for manager, client in kernels.values():
            client.stop_channels()
            manager.shutdown_kernel(now=True)


def _quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles (the values themselves when there are fewer than 4)."""
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def report(times: dict[str, list[float]]) -> list[str]:
    """The printed lines: medians, then per-round ratios to ``raw`` (median [IQR])."""
    rounds = len(times["raw"])
    lines = [f"[warm-launch] 2 gloo workers, one real Jupyter kernel per contender, launches {WARM_LAUNCHES + 1}-"
             f"{WARM_LAUNCHES + rounds} of each, {rounds} rotating rounds (python {sys.version_info.major}."
             f"{sys.version_info.minor}):"]
    for name, values in times.items():
        lines.append(f"[warm-launch]   {name:18s} median {statistics.median(values) * 1000:7.1f} ms")
    for name, values in times.items():
        if name == "raw":
            continue
        ratios = [v / r for v, r in zip(values, times["raw"])]
        low, high = _quartiles(ratios)
        goal = " (goal <= 1.2x)" if name == "dashboard" else " (control)" if name == "raw (A/A)" else ""
        lines.append(f"[warm-launch] ratio {name + ' / raw:':26s} {statistics.median(ratios):.2f}x "
                     f"[{low:.2f}-{high:.2f}]{goal}")
    return lines


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=0, help="rounds (each contender once per round; default 12)")
    parser.add_argument("--quick", action="store_true", help="5 rounds (a smoke run; default 12)")
    parser.add_argument("--compare", default=None, metavar="PATH",
                        help="also measure the dashboard with the package of another checkout (before/after)")
    options = parser.parse_args()
    rounds = options.rounds or (5 if options.quick else 12)
    print("\n".join(report(measure(rounds, options.compare))), flush=True)


if __name__ == "__main__":
    main()
