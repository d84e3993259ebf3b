"""A forked worker uses the kernel's multiprocessing queues as a multiprocessing child does: every put lands."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import pytest

from notebook_accel import notebook_launcher
from notebook_accel.launcher.child import mp_child
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(180)


def take_and_put_back_one_less(queue: Any) -> Any:
    """Rank 0 takes the number and puts back one less (accelerate's test_fault_tolerant counts attempts so)."""
    if os.environ["RANK"] != "0":
        return None
    number = queue.get(timeout=30)
    while isinstance(number, tuple):  # the notes of the run before, then its number
        number = queue.get(timeout=30)
    for _ in range(PUTS):  # the last of many puts just before the end: what a worker's feeder writes last
        queue.put(("note", number))
    queue.put(number - 1)
    return number


PUTS = 300


def test_every_put_into_the_kernels_queue_lands_run_after_run(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "runs"))
    queue = mp.get_context("fork").Queue()
    queue.put(5)  # the kernel's own feeder thread starts: a child inherits it, but not the thread
    time.sleep(0.1)
    got = [notebook_launcher(take_and_put_back_one_less, (queue,), num_processes=2, dashboard=RecordingSink())
           for _ in range(4)]
    # before: a run found the queue empty or took a note for the number (puts of the run before were lost)
    assert got == [5, 4, 3, 2]
    left = [queue.get(timeout=5) for _ in range(PUTS + 1)]
    assert left == [("note", 2)] * PUTS + [1]


def put_into_a_queue_nobody_reads(queue: Any) -> str:
    queue.put(b"x" * (4 << 20))  # far more than a pipe holds: its feeder can never finish
    return "returned"


def test_a_queue_that_cannot_be_written_delays_the_end_only_boundedly(tmp_path: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(mp_child, "FLUSH_SECONDS", 1.0)
    monkeypatch.setattr(mp_child.end, "__defaults__", (1.0,))
    sink = RecordingSink()
    start = time.monotonic()
    queue = mp.get_context("fork").Queue()
    assert notebook_launcher(put_into_a_queue_nobody_reads, (queue,), num_processes=2, dashboard=sink) == "returned"
    assert time.monotonic() - start < 60  # a generous hang guard: without the bound it never ends
    said = "\n".join(sink.lines(0, "stderr") + sink.lines(1, "stderr"))
    assert "did not finish within 1 s of its function's end" in said and "items still buffered" in said, said[-2000:]
