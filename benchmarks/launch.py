"""Launch from a script: ``notebook_launcher`` against a raw fork and Lightning Fabric's ``ddp_notebook``.

Every contender runs the same work in 2 forked processes: create the gloo process group (rendezvous on
127.0.0.1), all-reduce one tensor, and hand rank 0's value (2.0) back to the caller, which checks it. The
contenders share this one process (each forks from the same parent, with torch and, when installed, Lightning
imported), and each round runs every contender once in an order that rotates from round to round, so each sees
the same machine state on average:

- ``raw``: ``torch.multiprocessing.start_processes`` (fork); the children make the group from ``MASTER_ADDR``/
  ``MASTER_PORT`` and rank 0 sends the value back through a pipe (the physical limit of a fork launcher);
- ``raw (A/A)``: the same again, a control: its ratio to ``raw`` says how much noise the machine adds;
- ``lightning``: ``Fabric(accelerator="cpu", devices=2, strategy="ddp_notebook").launch(work)`` (Fabric makes
  the group itself before calling ``work``; its construction is timed too and also shown apart, as a notebook may
  build it once in an earlier cell); skipped with a one-line reason when Lightning is not installed
  (``pip install notebook-accel[bench]``);
- ``notebook_launcher``: ``notebook_launcher(work, num_processes=2, dashboard=False)`` (its console lines are
  swallowed).

Prints each median, and each contender's ratio to ``raw`` (and ours to Lightning's) as the median of the per-round
ratios with their interquartile range in brackets; then the same ratios between each contender's best round (the
least disturbed one: on a shared machine, load lengthens runs but never shortens them, so minima move least), with
the A/A of the minima as their control.

Usage: ``python benchmarks/launch.py [--quick] [--rounds N]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import resource
import socket
import statistics
import sys
import time
from typing import Any, Callable

import torch  # imported in the parent for every contender, as in a notebook
import torch.distributed as dist
import torch.multiprocessing as tmp

from notebook_accel import notebook_launcher

_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_EXPECTED = 2.0


def work() -> float:
    """The measured work: make the process group, all-reduce one tensor, return its value."""
    dist.init_process_group("gloo")
    return _all_reduce()


def _all_reduce() -> float:
    """All-reduce a tensor of one 1.0 over the group: the world size."""
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _fabric_work(fabric: Any) -> float:
    """Lightning's version of :func:`work`: Fabric made the gloo group before calling it."""
    return _all_reduce()


def _raw_entry(local_rank: int, world_size: int, port: int, conn: Any) -> None:
    """What a hand-written fork launcher does in each child: its rank's variables, the work, rank 0's value back."""
    os.environ.update(
        RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    value = work()
    if local_rank == 0:
        conn.send(value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_raw() -> float:
    """One raw ``start_processes`` run; rank 0's value (a few bytes: the pipe holds them until the join ends)."""
    receive, send = tmp.Pipe(duplex=False)
    try:
        tmp.start_processes(_raw_entry, args=(2, _free_port(), send), nprocs=2, join=True, start_method="fork")
        value = receive.recv()
    finally:
        receive.close()
        send.close()
    return float(value)


def run_ours() -> float:
    """One ``notebook_launcher`` run (its console lines swallowed); rank 0's value."""
    with contextlib.redirect_stdout(io.StringIO()):
        return float(notebook_launcher(work, num_processes=2, dashboard=False))


class _Lightning:
    """Lightning Fabric's ``ddp_notebook`` launch, or why it cannot run here (:attr:`missing`)."""

    def __init__(self) -> None:
        self.missing = ""
        self.construct_s: list[float] = []  # Fabric(...) alone, per run
        try:
            from lightning.fabric import Fabric
        except ImportError as e:
            self.missing = f"lightning is not installed ({e}); pip install 'notebook-accel[bench]' to compare with it"
            return
        self._fabric = Fabric
        for name in ("lightning.fabric", "lightning.pytorch"):  # its per-rank banners: not part of the work
            logging.getLogger(name).setLevel(logging.WARNING)

    def run(self) -> float:
        """Build a Fabric and launch; rank 0's value. Fabric leaves ``MASTER_PORT`` set: restored afterwards."""
        saved = {k: os.environ.get(k) for k in _ENV}
        try:
            start = time.perf_counter()
            fabric = self._fabric(accelerator="cpu", devices=2, strategy="ddp_notebook")
            self.construct_s.append(time.perf_counter() - start)
            return float(fabric.launch(_fabric_work))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _cpu_seconds() -> float:
    """CPU time of this process plus its reaped children (user + system)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(run: Callable[[], float]) -> tuple[float, float]:
    """Wall and CPU seconds of one run, whose value is checked."""
    cpu, start = _cpu_seconds(), time.perf_counter()
    value = run()
    wall = time.perf_counter() - start
    if value != _EXPECTED:
        raise RuntimeError(f"{getattr(run, '__qualname__', run)} returned {value!r}, expected {_EXPECTED}")
    return wall, _cpu_seconds() - cpu


def _spread(ratios: list[float]) -> str:
    """``median [q1-q3]`` of per-round ratios."""
    if len(ratios) < 2:
        return f"{ratios[0]:.2f}x"
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return f"{statistics.median(ratios):.2f}x [{q1:.2f}-{q3:.2f}]"


def _report(walls: dict[str, list[float]], cpus: dict[str, list[float]], construct: list[float]) -> None:
    """Print the medians and the per-round ratios."""
    rounds = len(walls["raw"])
    print(f"launch from a script: 2 forked gloo workers, one all-reduce, value returned; {rounds} rotating rounds "
          f"(python {sys.version_info.major}.{sys.version_info.minor}, torch {torch.__version__})")
    for name, values in walls.items():
        print(f"  {name:18s} median {statistics.median(values) * 1000:6.1f} ms   "
              f"CPU (parent + workers) {statistics.median(cpus[name]) * 1000:6.1f} ms")
    if construct:
        print(f"  {'':18s} of which Fabric(...) {statistics.median(construct) * 1000:.1f} ms; "
              f"launch() alone {statistics.median(w - c for w, c in zip(walls['lightning'], construct)) * 1000:.1f} ms")

    def ratios(name: str, base: list[float]) -> list[float]:
        return [a / b for a, b in zip(walls[name], base)]

    raw = walls["raw"]
    print(f"ratio raw (A/A) / raw:                 {_spread(ratios('raw (A/A)', raw))} (control: the noise)")
    print(f"ratio notebook_launcher / raw:         {_spread(ratios('notebook_launcher', raw))}")
    if construct:
        launch_only = [w - c for w, c in zip(walls["lightning"], construct)]
        print(f"ratio lightning / raw:                 {_spread(ratios('lightning', raw))} "
              f"(launch() alone {_spread([a / b for a, b in zip(launch_only, raw)])})")
        print(f"ratio notebook_launcher / lightning:   {_spread(ratios('notebook_launcher', walls['lightning']))} "
              f"(to launch() alone {_spread([a / b for a, b in zip(walls['notebook_launcher'], launch_only)])}; "
              "goal <= 1.0x)")
    _report_best(walls, construct)


def _report_best(walls: dict[str, list[float]], construct: list[float]) -> None:
    """Print the ratios between each contender's fastest round, with the minima's own A/A control."""
    best = {name: min(values) for name, values in walls.items()}
    print("best round of each (ms): " + ", ".join(f"{name} {value * 1000:.1f}" for name, value in best.items()))
    print(f"best-round ratio raw (A/A) / raw:      {best['raw (A/A)'] / best['raw']:.2f}x (control: the noise)")
    print(f"best-round ratio notebook_launcher / raw: {best['notebook_launcher'] / best['raw']:.2f}x")
    if construct:
        launch_only = min(w - c for w, c in zip(walls["lightning"], construct))
        print(f"best-round ratio notebook_launcher / lightning: {best['notebook_launcher'] / best['lightning']:.2f}x "
              f"(to launch() alone {best['notebook_launcher'] / launch_only:.2f}x; goal <= 1.0x)")


def main() -> None:
    """Warm every contender once, run the rotating rounds, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    parser.add_argument("--rounds", "--runs", type=int, default=None, help="rounds (each contender once per round)")
    options = parser.parse_args()
    rounds = options.rounds or (5 if options.quick else 15)
    lightning = _Lightning()
    contenders: dict[str, Callable[[], float]] = {"raw": run_raw, "raw (A/A)": run_raw, "notebook_launcher": run_ours}
    if lightning.missing:
        print(f"lightning: skipped, {lightning.missing}")
    else:
        contenders["lightning"] = lightning.run
    env_before = {k: os.environ.get(k) for k in _ENV}
    for run in contenders.values():
        _timed(run)  # warm-up: lazy imports, page cache
    lightning.construct_s.clear()
    names = list(contenders)
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            wall, cpu = _timed(contenders[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    if {k: os.environ.get(k) for k in _ENV} != env_before:
        raise RuntimeError("the parent's environment changed during the benchmark")
    _report(walls, cpus, lightning.construct_s)


if __name__ == "__main__":
    main()
