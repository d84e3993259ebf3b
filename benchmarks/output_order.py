"""Benchmark: keeping the order of a worker's stdout and stderr, and what it costs.

A forked writer prints numbered lines, alternating stdout and stderr (in bursts, as a training loop's prints,
warnings and tqdm redraws do), while the parent reads and turns the bytes into lines. Two designs, measured in
the same run, alternating:

- *two pipes* (the baseline, the launcher before): fd 1 and fd 2 on their own pipes, read whenever ``wait``
  reports them, split into lines at ``\\n``;
- *ordered pipe* (now): stdout and ``sys.stderr`` on one pipe, stderr in frames (:mod:`notebook_accel.launcher.
  streams`), read into :class:`~notebook_accel.launcher.supervision.output.RankOutput` (terminal replay, events, log file).

Printed: lines out of order (a line that arrives after a higher-numbered one), the writer's wall time, and the
reader's CPU time per line, with the ordered pipe's ratios to the two pipes.

Run: ``python benchmarks/output_order.py [--quick]``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

from notebook_accel.launcher.supervision.output import RankOutput
from notebook_accel.launcher.child.streams import FramedWriter


def _writer(lines: int, out_fd: int, err_fd: int, ordered: bool) -> None:
    """Child: print ``lines`` numbered lines, bursts of 1-3 on one stream then the other; exit."""
    os.dup2(out_fd, 1)
    if ordered:
        private = os.dup(out_fd)
        err = io.TextIOWrapper(io.BufferedWriter(FramedWriter(private)), encoding="utf-8", line_buffering=True)
    else:
        os.dup2(err_fd, 2)
        err = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    out = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
    i = 0
    while i < lines:
        for stream in (out, err):
            for _ in range(1 + i % 3):
                if i < lines:
                    stream.write(f"{i} some text a training loop would print\n")
                    i += 1
    out.flush()
    err.flush()
    os._exit(0)


def _run(lines: int, ordered: bool) -> tuple[int, float, float]:
    """One measurement: (lines out of order, writer wall seconds, reader CPU seconds)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _writer(lines, out_w, err_w, ordered)
    os.close(out_w)
    os.close(err_w)
    cpu = time.process_time()
    seen: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        output = RankOutput(0, Path(folder) / "rank0.log")
        partial = {out_r: b"", err_r: b""}
        open_fds = [out_r, err_r]
        while open_fds:
            for fd in wait(open_fds):
                data = os.read(fd, 1 << 16)  # type: ignore[arg-type]
                if not data:
                    open_fds.remove(fd)  # type: ignore[arg-type]
                    continue
                if ordered:
                    events = output.ordered(data, 0.0) if fd == out_r else output.stderr(data, 0.0)
                    seen += [int(line.split(" ", 1)[0]) for e in events for line in e.text.split("\n")]
                else:
                    *complete, partial[fd] = (partial[fd] + data).split(b"\n")  # type: ignore[index]
                    seen += [int(line.split(b" ", 1)[0]) for line in complete]
        output.close()
    cpu = time.process_time() - cpu
    os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    os.close(out_r)
    os.close(err_r)
    assert sorted(seen) == list(range(lines)), "lines were lost"
    late = sum(1 for a, b in zip(seen, seen[1:]) if b < a)
    return late, wall, cpu


def main() -> None:
    """Measure both designs, alternating, and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer lines and repeats")
    args = parser.parse_args()
    lines, repeats = (20_000, 3) if args.quick else (200_000, 5)
    results: dict[bool, list[tuple[int, float, float]]] = {False: [], True: []}
    for _ in range(repeats):
        for ordered in (False, True):
            results[ordered].append(_run(lines, ordered))
    print(f"{lines} lines, stdout and stderr alternating in bursts of 1-3, median of {repeats} runs")
    summary = {}
    for ordered, name in ((False, "two pipes (before)"), (True, "ordered pipe (now)")):
        late = statistics.median(r[0] for r in results[ordered])
        wall = statistics.median(r[1] for r in results[ordered])
        cpu = statistics.median(r[2] for r in results[ordered])
        summary[ordered] = (wall, cpu)
        print(f"  {name:20s} out of order: {late:8.0f} lines ({100 * late / lines:5.1f}%)   "
              f"writer+read wall: {wall:6.3f} s   reader CPU: {1e6 * cpu / lines:6.2f} us/line")
    (wall0, cpu0), (wall1, cpu1) = summary[False], summary[True]
    print(f"  ratio ordered/two pipes: wall {wall1 / wall0:.2f}x, reader CPU {cpu1 / cpu0:.2f}x "
          "(the reader now replays a terminal, makes events and writes the log file)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
