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

Run: ``python benchmarks/kernel_cpu.py [--quick] [--rounds N] [--seconds S]``.
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
RUN = "print('WINDOW' + json.dumps(notebook_launcher(train, args=({rate}, {seconds}), num_processes=2, dashboard={dash})))"
SKIP = 0.5  # seconds of each logging window left out (launch costs)
CONFIGS = (("dashboard A", "True"), ("dashboard A'", "True"), ("dashboard=False", "False"))


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
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    seconds = args.seconds or (4.0 if args.quick else 6.0)
    rates = [int(r) for r in args.rates.split(",")]
    from jupyter_client.manager import start_new_kernel

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=env)
    sampler = Sampler(manager.provisioner.process.pid)
    sampler.start()
    results: dict[tuple[int, str], list[float]] = {}
    try:
        execute(client, SETUP, 120)
        for rate in rates:  # a warm-up launch per rate: the first launch imports and builds what later ones reuse
            execute(client, RUN.format(rate=rate, seconds=1.0, dash="True"), 120)
        for round_ in range(rounds):
            for rate in rates:
                order = CONFIGS[round_ % len(CONFIGS):] + CONFIGS[: round_ % len(CONFIGS)]
                for name, dash in order:
                    cell = RUN.format(rate=rate, seconds=seconds, dash=dash)
                    out, sent, ended = execute(client, cell, 120 + seconds * 4)
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
        a, a2, off = (statistics.median(results[(rate, name)]) for name, _ in CONFIGS)
        wa, _, woff = (statistics.median(results[(rate, name + " whole")]) for name, _ in CONFIGS)
        goal = 0.03 if rate <= 1000 else 0.06
        print(f"[kernel-cpu] {rate:>6} calls/s per rank: dashboard {a * 100:5.1f}%  dashboard=False {off * 100:5.1f}%  "
              f"ratio dashboard/console x{a / off:.2f}  A/A x{a / a2:.2f}  "
              f"goal <= {goal * 100:.0f}% {'ok' if a <= goal else 'MISSED'}")
        print(f"[kernel-cpu] {rate:>6} calls/s per rank, launch and end counted over the logging time: dashboard "
              f"{wa * 100:5.1f}%  dashboard=False {woff * 100:5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
