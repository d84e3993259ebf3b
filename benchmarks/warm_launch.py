"""Warm launch in a real Jupyter kernel: ``notebook_launcher`` (with and without the dashboard) against the physical
limit, a raw fork with ``torch._dynamo`` imported beforehand that returns the same value.

One kernel (started with :mod:`jupyter_client`, so the dashboard's widgets really send their comm-open and update
messages on iopub) imports torch, ``torch._dynamo`` and the launcher, and warms every contender once. Then each
round runs every contender once, in an order that rotates from round to round, so each sees the same machine
state on average:

- ``raw``: ``torch.multiprocessing.start_processes`` (fork) of 2 workers that make a gloo group, wrap a small
  model in DDP (what a training function does first), all-reduce one tensor and send the result back through a
  pipe (what the launcher returns);
- ``raw (A/A)``: the same again, a control: its ratio to ``raw`` says how much noise the machine adds;
- ``dashboard``: ``notebook_launcher(work, num_processes=2)`` with its live dashboard;
- ``dashboard=False``: the same with console output only.

Prints each median and the ratios to ``raw`` (issue 23's goal: dashboard / raw <= 1.2x).

Usage: ``python benchmarks/warm_launch.py [--rounds N]``
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

_SETUP = """
import json, os, socket, time
import torch, torch._dynamo, torch.distributed as dist, torch.multiprocessing as mp
from notebook_accel import notebook_launcher

def work():
    dist.init_process_group("gloo")
    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))  # what a training function does first
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()

def _entry(rank, port, conn):
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    value = work()
    if rank == 0:
        conn.send(value)

def raw():
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

CONTENDERS = {
    "raw": raw,
    "raw (A/A)": raw,
    "dashboard": lambda: notebook_launcher(work, num_processes=2),
    "dashboard=False": lambda: notebook_launcher(work, num_processes=2, dashboard=False),
}

def timed(name):
    start = time.perf_counter()
    value = CONTENDERS[name]()
    elapsed = time.perf_counter() - start
    if value != 2.0:
        raise RuntimeError(f"{name} returned {value!r}, expected 2.0")
    return elapsed
"""

_ROUNDS = """
names = list(CONTENDERS)
for name in names:
    timed(name)  # warm-up: lazy imports, the first dashboard, page cache
times = {name: [] for name in names}
for i in range({rounds}):
    order = names[i % len(names):] + names[:i % len(names)]
    for name in order:
        times[name].append(timed(name))
print("RESULT", json.dumps(times))
"""


def _run_cell(client: Any, code: str) -> str:
    """Execute ``code`` in the kernel; its stdout (raises with the kernel's error if the cell failed)."""
    out: list[dict[str, Any]] = []
    reply = client.execute_interactive(code, timeout=900, store_history=False, output_hook=out.append)
    if reply["content"]["status"] != "ok":
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        raise RuntimeError(f"benchmark cell failed: {errors or reply['content']}")
    return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")


def main() -> None:
    """Run the rounds in one kernel and print medians and ratios."""
    from jupyter_client.manager import start_new_kernel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="rounds (each contender once per round)")
    options = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=env)
    try:
        _run_cell(client, _SETUP)
        out = _run_cell(client, _ROUNDS.replace("{rounds}", str(options.rounds)))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    line = [row for row in out.splitlines() if row.startswith("RESULT ")][-1]
    times: dict[str, list[float]] = json.loads(line[len("RESULT "):])
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"warm launch of 2 gloo workers in a real Jupyter kernel, {options.rounds} rotating rounds (python "
          f"{sys.version_info.major}.{sys.version_info.minor}):")
    for name, median in medians.items():
        print(f"  {name:16s} median {median * 1000:7.1f} ms")
    raw = medians["raw"]
    print(f"ratio raw (A/A) / raw:              {medians['raw (A/A)'] / raw:.2f}x (control)")
    print(f"ratio dashboard / raw:              {medians['dashboard'] / raw:.2f}x (goal <= 1.2x)")
    print(f"ratio dashboard=False / raw:        {medians['dashboard=False'] / raw:.2f}x")


if __name__ == "__main__":
    main()
