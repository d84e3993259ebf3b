"""A worker's process tree is found from its own ``/proc`` entries, not by reading every process of the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from notebook_accel.monitor.host import TreeMeter, child_pids

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{os.getpid()}/children"),
                                reason="needs Linux /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN)")

# a child that starts a grandchild and prints its pid, then both sleep
_TREE = ("import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
         "print(g.pid, flush=True); time.sleep(30)")


def _tree() -> tuple[subprocess.Popen[str], int]:
    child = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def test_child_pids_finds_children_and_grandchildren_parents_first() -> None:
    child, grandchild = _tree()
    try:
        found = child_pids(os.getpid())
        assert found is not None
        assert child.pid in found and grandchild in found
        assert found.index(child.pid) < found.index(grandchild)
    finally:
        psutil.Process(grandchild).kill()
        child.kill()
        child.wait()


def test_tree_meter_never_walks_every_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def everything(*args: object, **kwargs: object) -> None:
        raise AssertionError("psutil read every process of the machine to find a tree")

    monkeypatch.setattr(psutil.Process, "children", everything)
    monkeypatch.setattr(psutil, "process_iter", everything)
    child, grandchild = _tree()
    try:
        meter = TreeMeter(child.pid)
        time.sleep(0.05)
        one = psutil.Process(child.pid).memory_info().rss
        reading = meter.read()
        assert reading.rss_bytes > one  # the grandchild's bytes count too
        assert set(meter._members) == {grandchild}
        assert meter.read().rss_bytes > 0 and set(meter._members) == {grandchild}  # its Process object kept
    finally:
        psutil.Process(grandchild).kill()
        child.kill()
        child.wait()
