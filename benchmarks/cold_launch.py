"""Cold and warm launch time: notebook-accel against accelerate's ``notebook_launcher`` and a raw fork.

Each measurement starts a fresh Jupyter kernel, runs a first cell that imports torch and the launcher and defines
a training function (2 processes that each build an Accelerator and wrap a small model in DDP, what a training
function does first), then a second cell that launches it twice: "cold" is the import cell (timed inside the
kernel) plus the first launch in that kernel, "warm" the second launch. The raw fork imports ``torch._dynamo`` in
its import cell (DDP needs it; left to the forked workers, both would import it at every launch). The launch cell runs right after the import cell, and again (in another fresh kernel) after a
gap of ``--gap`` seconds, as when the user reads or types between cells: notebook-accel starts torch's lazy
imports in the background when it is imported in a kernel, so the gap matters to it. Contenders alternate, so
each sees the same machine state; the script prints each median and the ratios:

    notebook-accel cold / accelerate cold    (goal: <= 0.5)
    notebook-accel warm / raw fork warm      (goal: <= 1.0)

and what the live dashboard adds to the cold and the warm launch (the same launch with ``dashboard=None``).

accelerate is optional (``pip install accelerate``); without it only our figures and the raw fork print.

Usage: ``python benchmarks/cold_launch.py [--runs N] [--gap SECONDS]``
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import textwrap
import time
from typing import Any

_OURS = """
import json, time, torch
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

_OURS_DASHBOARD = _OURS.replace("dashboard=False", "dashboard=None")  # the live dashboard a notebook shows

_ACCELERATE = """
import json, time, torch
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
import json, os, socket, time, torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch._dynamo  # DDP imports it: a raw fork that leaves it to the workers imports it in both, every launch
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


def _run_cell(kc: Any, code: str) -> str:
    """Execute ``code`` in the kernel; its stdout (raises with the error if the cell failed)."""
    reply = kc.execute_interactive(code, timeout=300, store_history=False,
                                   output_hook=lambda msg: _OUT.append(msg))
    text = "".join(m["content"].get("text", "") for m in _OUT if m["msg_type"] == "stream")
    errors = [m["content"] for m in _OUT if m["msg_type"] == "error"]
    _OUT.clear()
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"benchmark cell failed: {errors or reply['content']}")
    return text


_OUT: list[dict[str, Any]] = []


# The import cell is timed inside the kernel, from its first statement to its last: "cold" is that cell plus the
# first launch, so what one contender does in its import cell and another in its first launch counts for both.
_TIMED_CELL = "import time as _clock\n_cell_start = _clock.perf_counter()\n{body}\n" \
              "_import_cell = _clock.perf_counter() - _cell_start\n"


def _measure(body: str, gap: float) -> tuple[float, float]:
    """(cold, warm) seconds of one fresh Jupyter kernel: a first cell imports and defines (``body`` up to
    ``times = []``), ``gap`` seconds pass (the user reads or types the next cell), then the launch cell runs.
    ``cold`` is the import cell plus the first launch (the gap left out), ``warm`` the second launch."""
    import jupyter_client

    setup, launches = body.split("times = []", 1)
    km, kc = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        _run_cell(kc, _TIMED_CELL.format(body=textwrap.dedent(setup)))
        time.sleep(gap)
        out = _run_cell(kc, "times = []" + textwrap.dedent(launches)
                        + "\nprint('RESULT', json.dumps([_import_cell, *times]))")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    import_cell, first, warm = json.loads(lines[-1][7:])
    return import_cell + first, warm


def main() -> None:
    """Run the contenders alternately, in fresh kernels, and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gap", type=float, default=3.0,
                        help="seconds between the import cell and the launch cell (0: only back to back)")
    parser.add_argument("--no-accelerate", action="store_true", help="leave accelerate out (it takes ~5 s a launch)")
    options = parser.parse_args()
    contenders = {"notebook-accel": _OURS, "with dashboard": _OURS_DASHBOARD, "raw fork": _RAW}
    if importlib.util.find_spec("accelerate") is not None and not options.no_accelerate:
        contenders["accelerate"] = _ACCELERATE
    gaps = (0.0,) if options.gap == 0 else (0.0, options.gap)
    results: dict[tuple[str, float], list[tuple[float, float]]] = {(n, g): [] for n in contenders for g in gaps}
    for _ in range(options.runs):
        for gap in gaps:
            for name, body in contenders.items():
                results[(name, gap)].append(_measure(body, gap))
    medians = {key: (statistics.median(c for c, _ in r), statistics.median(w for _, w in r))
               for key, r in results.items()}
    for (name, gap), (cold, warm) in medians.items():
        when = "right after the import cell" if gap == 0 else f"{gap:g} s after the import cell"
        print(f"{name:15s} cold {cold:6.2f} s   warm {warm:6.2f} s   (launch cell {when}; median of {options.runs})")
    for gap in gaps:
        ours_cold, ours_warm = medians[("notebook-accel", gap)]
        label = "back to back" if gap == 0 else f"{gap:g} s gap"
        print(f"cold ratio notebook-accel / raw fork ({label}):   "
              f"{ours_cold / medians[('raw fork', gap)][0]:.2f}x (import cell + first launch; goal <= 1.1)")
        if "accelerate" in contenders:
            ratio = ours_cold / medians[("accelerate", gap)][0]
            print(f"cold ratio notebook-accel / accelerate ({label}): {ratio:.2f}x (goal <= 0.5)")
        print(f"warm ratio notebook-accel / raw fork ({label}):   {ours_warm / medians[('raw fork', gap)][1]:.2f}x "
              "(goal <= 1.0)")
        dash_cold, dash_warm = medians[("with dashboard", gap)]
        print(f"with the dashboard ({label}): cold {dash_cold - ours_cold:+.2f} s, warm {dash_warm - ours_warm:+.2f} s "
              "over dashboard=False")


if __name__ == "__main__":
    main()
