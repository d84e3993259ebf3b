"""Cold and warm launch time: notebook-accel against accelerate's ``notebook_launcher`` and a raw fork.

Each measurement runs in a fresh interpreter (a fresh kernel) that has imported torch, as a notebook has,
and launches 2 processes that each build an Accelerator and wrap a small model in DDP (what a training
function does first), then returns. "cold" is the first launch in that interpreter, "warm" the second.
Contenders alternate, so each sees the same machine state; the script prints each median and the ratios:

    notebook-accel cold / accelerate cold    (goal: <= 0.5)
    notebook-accel warm / raw fork warm      (goal: <= 1.0)

accelerate is optional (``pip install accelerate``); without it only our figures and the raw fork print.

Usage: ``python benchmarks/cold_launch.py [--runs N]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import textwrap

_OURS = """
import time, torch
from notebook_accel import Accelerator, notebook_launcher
def train():
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(8, 8))
    return 0
times = []
for _ in range(2):
    start = time.perf_counter()
    notebook_launcher(train, num_processes=2, dashboard=False)
    times.append(time.perf_counter() - start)
"""

_ACCELERATE = """
import time, torch
from accelerate import Accelerator, notebook_launcher
def train():
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(8, 8))
times = []
for port in (29611, 29612):
    start = time.perf_counter()
    notebook_launcher(train, num_processes=2, use_port=str(port))
    times.append(time.perf_counter() - start)
"""

_RAW = """
import os, socket, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
def entry(rank, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo")
    torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    dist.destroy_process_group()
times = []
for _ in range(2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    start = time.perf_counter()
    mp.start_processes(entry, args=(port,), nprocs=2, start_method="fork")
    times.append(time.perf_counter() - start)
"""


def _measure(body: str) -> tuple[float, float]:
    """(cold, warm) seconds of one fresh interpreter running ``body``."""
    code = textwrap.dedent(body) + "\nimport json, sys\nsys.__stdout__.write('RESULT ' + json.dumps(times) + '\\n')\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark child failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    cold, warm = json.loads(lines[-1][7:])
    return cold, warm


def main() -> None:
    """Run the contenders alternately and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    contenders = {"notebook-accel": _OURS, "raw fork": _RAW}
    if importlib.util.find_spec("accelerate") is not None:
        contenders["accelerate"] = _ACCELERATE
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    for _ in range(options.runs):
        for name, body in contenders.items():
            results[name].append(_measure(body))
    medians = {name: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r)) for name, r in results.items()}
    for name, (cold, warm) in medians.items():
        print(f"{name:15s} cold {cold:6.2f} s   warm {warm:6.2f} s   (median of {options.runs})")
    ours_cold, ours_warm = medians["notebook-accel"]
    if "accelerate" in medians:
        print(f"cold ratio notebook-accel / accelerate: {ours_cold / medians['accelerate'][0]:.2f}x (goal <= 0.5)")
    else:
        print("accelerate is not installed: pip install accelerate to compare with it")
    print(f"warm ratio notebook-accel / raw fork:   {ours_warm / medians['raw fork'][1]:.2f}x (goal <= 1.0)")


if __name__ == "__main__":
    main()
