"""Benchmark: the kernel's CPU while both workers log fast, in a real Jupyter kernel, dashboard on vs off.

What users get: one IPython kernel started with :mod:`jupyter_client` (so the dashboard's widget values really
leave the kernel as comm messages), ``notebook_launcher(train, num_processes=2)`` with the dashboard
(``dashboard=True``) and with the console (``dashboard=False``); in ``train`` each rank builds an ``Accelerator``
and calls ``accelerator.log({"train/loss": ..., "lr": ...}, step=i)`` at a paced rate (1,000 and 10,000 calls/s
per rank; the pacing sleeps, so the workers do not take the cores from the kernel).

The kernel's CPU is read from the kernel process's own counters (``psutil.Process(kernel_pid).cpu_times()``,
user + system of every thread, children excluded), sampled from this process every 50 ms, and taken over the
logging window of rank 0 (its first 0.5 s left out: the dashboard's first draw and the workers' start are launch
costs, not logging costs). Configurations run in rotating rounds in the same kernel, with an A/A control (the
dashboard configuration twice, "A" and "A'"); printed: the absolute % of one core per configuration (median over
rounds) and the ratios dashboard / console and A / A'.

``--cluster ADDRESS`` compares the same run with its workers on a Ray cluster (twice, the A/A control) against the
local fork, both with the dashboard: what the back channel costs the kernel.

Run: ``python benchmarks/kernel_cpu.py [--quick] [--rounds N] [--seconds S] [--cluster ADDRESS]``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]

SETUP = textwrap.dedent(
    """
    import json, time
    from notebook_accel import Accelerator, notebook_launcher

    def train(rate, seconds):
        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        start, i = time.time(), 0
        while True:
            now = time.time()
            if now - start >= seconds:
                break
            due = int((now - start) * rate)
            while i < due:
                accelerator.log({"train/loss": 1.0 / (i + 1), "lr": 1e-3}, step=i)
                i += 1
            time.sleep(0.001)
        end = time.time()
        accelerator.wait_for_everyone()
        return start, end, i
    """
)
RUN = ("print('WINDOW' + json.dumps(notebook_launcher(train, args=({rate}, {seconds}), num_processes=2, "
       "dashboard={dash}{where})))")
RAY_SETUP = textwrap.dedent(
    """
    import ray
    from notebook_accel import RayCluster
    where = {{"num_cpus": 2, "include_dashboard": False}} if {address!r} == "local" else {{"address": {address!r}}}
    ray.init(**where, log_to_driver=False, configure_logging=False,
             runtime_env={{"env_vars": {{"PYTHONPATH": {pythonpath!r}}}}})
    RAY = RayCluster(placement="spread")
    """
)
SKIP = 0.5  # seconds of each logging window left out (launch costs)
CONFIGS = (("dashboard A", "True", ""), ("dashboard A'", "True", ""), ("dashboard=False", "False", ""))
# --cluster: the workers on a Ray cluster (twice: the A/A control) against the same run forked here
RAY_CONFIGS = (("Ray, dashboard A", "True", ", cluster=RAY"), ("Ray, dashboard A'", "True", ", cluster=RAY"),
               ("local, dashboard", "True", ""))


class Sampler(threading.Thread):
    """Reads the kernel's CPU seconds (user + system, children excluded) every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            times = self.process.cpu_times()
            self.samples.append((time.time(), times.user + times.system))
            time.sleep(self.interval)

    def cpu_between(self, t0: float, t1: float) -> float:
        """CPU seconds the kernel used between ``t0`` and ``t1`` (linear between the nearest samples)."""
        return self._at(t1) - self._at(t0)

    def _at(self, t: float) -> float:
        samples = self.samples
        for (ta, ca), (tb, cb) in zip(samples, samples[1:]):
            if ta <= t <= tb:
                return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
        raise ValueError(f"no kernel CPU samples around {t}")


def _ratio(a: float, b: float) -> str:
    """``a / b`` as ``x1.23``; ``n/a`` when ``b`` read zero (a short run on an idle kernel)."""
    return f"x{a / b:.2f}" if b > 0 else "n/a"


def execute(client: Any, code: str, timeout: float) -> tuple[str, float, float]:
    """Run ``code`` in the kernel; return its stdout and when it was sent and ended (raise when it failed)."""
    sent = time.time()
    msg_id = client.execute(code)
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = client.get_iopub_msg(timeout=1.0)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            out.append(content["text"])
        elif kind == "error":
            raise SystemExit(f"the benchmark cell failed: {content['ename']}: {content['evalue']}")
        elif kind == "status" and content["execution_state"] == "idle":
            return "".join(out), sent, time.time()
    raise TimeoutError(f"the cell did not finish within {timeout} s")


def main() -> None:
    """Start a kernel, run the configurations in rotating rounds, print % of a core and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 4 s instead of 3 of 6 s")
    parser.add_argument("--rounds", type=int, default=0, help="rounds (default 3, 2 with --quick)")
    parser.add_argument("--seconds", type=float, default=0.0, help="logging seconds per launch (default 6)")
    parser.add_argument("--rates", default="1000,10000", help="log calls per second per rank, comma-separated")
    parser.add_argument("--cluster", default=None, metavar="ADDRESS",
                        help="compare a run on this Ray cluster with the local one (ray.init's address, or 'local' "
                        "for a 2-CPU Ray started in the kernel)")
    args = parser.parse_args()
    configs = RAY_CONFIGS if args.cluster else CONFIGS
    rounds = args.rounds or (2 if args.quick else 3)
    seconds = args.seconds or (4.0 if args.quick else 6.0)
    rates = [int(r) for r in args.rates.split(",")]
    from jupyter_client.manager import start_new_kernel

    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(ROOT)) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=env)
    sampler = Sampler(manager.provisioner.process.pid)
    sampler.start()
    results: dict[tuple[int, str], list[float]] = {}
    try:
        execute(client, SETUP, 120)
        if args.cluster:
            execute(client, RAY_SETUP.format(address=args.cluster, pythonpath=pythonpath), 300)
        for rate in rates:  # a warm-up launch per rate: the first launch imports and builds what later ones reuse
            for _, _, where in configs[1:]:
                execute(client, RUN.format(rate=rate, seconds=1.0, dash="True", where=where), 300)
        for round_ in range(rounds):
            for rate in rates:
                order = configs[round_ % len(configs):] + configs[: round_ % len(configs)]
                for name, dash, where in order:
                    cell = RUN.format(rate=rate, seconds=seconds, dash=dash, where=where)
                    out, sent, ended = execute(client, cell, 300 + seconds * 4)
                    start, end, calls = json.loads(out.split("WINDOW", 1)[1].splitlines()[0])
                    time.sleep(2 * sampler.interval)  # a sample after the window's end
                    share = sampler.cpu_between(start + SKIP, end) / (end - start - SKIP)
                    whole = sampler.cpu_between(sent, ended) / (end - start)
                    results.setdefault((rate, name), []).append(share)
                    results.setdefault((rate, name + " whole"), []).append(whole)
                    print(f"[kernel-cpu] round {round_ + 1} {rate:>6}/s per rank {name:16s} {share * 100:5.1f}% "
                          f"of a core while logging, {whole * 100:5.1f}% with the launch and the end counted "
                          f"({calls / (end - start):.0f} calls/s by rank 0)", flush=True)
    finally:
        sampler.done.set()
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    print(f"[kernel-cpu] real kernel, 2 ranks logging 2 values per call, {seconds:.0f} s x {rounds} rounds, "
          f"{psutil.cpu_count()} cores; median % of one core:")
    for rate in rates:
        a, a2, off = (statistics.median(results[(rate, name)]) for name, _, _ in configs)
        wa, _, woff = (statistics.median(results[(rate, name + " whole")]) for name, _, _ in configs)
        goal = 0.03 if rate <= 1000 else 0.06
        first, other = ("Ray", "local") if args.cluster else ("dashboard", "dashboard=False")
        print(f"[kernel-cpu] {rate:>6} calls/s per rank: {first} {a * 100:5.1f}%  {other} {off * 100:5.1f}%  "
              f"ratio {first}/{other} {_ratio(a, off)}  A/A {_ratio(a, a2)}  "
              f"goal <= {goal * 100:.0f}% {'ok' if a <= goal else 'MISSED'}")
        print(f"[kernel-cpu] {rate:>6} calls/s per rank, launch and end counted over the logging time: {first} "
              f"{wa * 100:5.1f}%  {other} {woff * 100:5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
