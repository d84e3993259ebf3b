"""The kernel's share in one command: the figures of the launch, the kernel's CPU, checkpoints and the loader.

Runs a short form of each benchmark below, one after the other, each in its own process with this interpreter, and
prints only the lines that carry its figures (each benchmark measures against its limit in the same run, with an
A/A control; read its docstring for what is measured):

- warm launch (a 3rd and later launch in a kernel) / the raw fork: ``warm_launch.py``;
- import cell + first launch, against the raw fork's (and accelerate's, when installed): ``cold_launch.py``;
- the kernel's CPU with the dashboard, 2 ranks logging 1,000 calls/s each, and logging nothing (idle):
  ``kernel_cpu.py``;
- ``save_state`` / the crash-safe limit (write, fsync every file, rename the folder) and ``load_state`` / a raw
  load: ``checkpoint.py``;
- a prepared DataLoader's epoch / a raw ``DistributedSampler``'s: ``loader.py``.

``--quick`` (what ``python3 dev.py bench --quick`` runs) takes a few minutes; ``--smoke`` is the smallest form (one
round of each, tiny sizes: the figures mean nothing, it only proves the command still runs; the test suite runs
it). Peers that are not installed (accelerate, Lightning: the ``bench`` extra) are left out by each benchmark, and
said so. Exits non-zero when a benchmark failed (its last lines are printed).

Usage: ``python benchmarks/summary.py [--quick | --smoke]``
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Part:
    """One benchmark: its script, its arguments in each form, and the start of each line that holds a figure."""

    title: str
    script: str
    quick: tuple[str, ...]
    smoke: tuple[str, ...]
    figures: tuple[str, ...]


PARTS = (
    Part("warm launch (3rd and later launch in a kernel)", "warm_launch.py", ("--quick",), ("--rounds", "1"),
         ("[warm-launch] ratio", "[warm-launch]   ")),
    Part("import cell + first launch", "cold_launch.py", ("--runs", "1", "--gap", "0"),
         ("--runs", "1", "--gap", "0", "--no-accelerate"), ("cold ratio", "notebook-accel ", "raw fork ")),
    Part("kernel CPU, dashboard on (1,000 calls/s per rank; 0: idle)", "kernel_cpu.py",
         ("--quick", "--rates", "1000,0"), ("--rounds", "1", "--seconds", "1.5", "--rates", "1000,0"),
         ("[kernel-cpu]   1000 calls/s per rank:", "[kernel-cpu]      0 calls/s per rank:")),
    Part("save_state / load_state (50M parameters + AdamW)", "checkpoint.py",
         ("--engine", "plain", "--size", "50M", "--rounds", "2"),
         ("--engine", "plain", "--rounds", "1", "--size", "1M"),
         ("  save ours", "  save safe2", "  load ours", "  load raw2", "  best-round ratio save ours",
          "  best-round ratio load ours")),
    Part("prepared DataLoader epoch", "loader.py", ("--quick", "--no-workers", "--no-parts"),
         ("--rounds", "1", "--items", "2000", "--no-workers", "--no-parts"), ("  ",)),
)

PEERS = ("accelerate", "lightning")


def missing_peers() -> list[str]:
    """The peers (the ``bench`` extra, and accelerate) that are not installed here."""
    return [name for name in PEERS if importlib.util.find_spec(name) is None]


def run_part(part: Part, form: str) -> tuple[list[str], int, float]:
    """Run one benchmark in ``form`` (``"quick"`` or ``"smoke"``); its figure lines, exit code and seconds."""
    args = part.quick if form == "quick" else part.smoke
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(HERE / part.script), *args], capture_output=True, text=True,
                          cwd=HERE.parent)
    seconds = time.monotonic() - start
    lines = done.stdout.splitlines()
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).splitlines()[-15:]
        return [f"  FAILED (exit {done.returncode}):", *(f"    {line}" for line in tail)], done.returncode, seconds
    return [line for line in lines if line.startswith(part.figures)], 0, seconds


def main(argv: list[str] | None = None) -> int:
    """Run every part, print its figures; the exit code is non-zero when one failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--quick", action="store_true", help="a few minutes (the default)")
    form.add_argument("--smoke", action="store_true", help="the smallest form: proves it runs, figures mean nothing")
    options = parser.parse_args(argv)
    kind = "smoke" if options.smoke else "quick"
    absent = missing_peers()
    if absent:
        print(f"[bench] peers not installed, left out: {', '.join(absent)} (python3 dev.py bench installs them)")
    code = 0
    for part in PARTS:
        lines, status, seconds = run_part(part, kind)
        print(f"[bench] {part.title}: {part.script} ({seconds:.0f} s)", flush=True)
        print("\n".join(lines), flush=True)
        code = code or status
    return code


if __name__ == "__main__":
    sys.exit(main())
