"""A background launch in a real kernel: other cells run while it trains, the dashboard keeps updating, the
handle gives the outcome, and shutting the kernel down mid-run leaves nothing running."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import is_running
from tests.kernel.test_launcher_kernel import execute, running_kernel

pytestmark = pytest.mark.timeout(240)

SETUP = """
import os, subprocess, sys, time
from pathlib import Path
from notebook_accel import Accelerator, notebook_launcher

def train(steps, pid_file=None):
    accelerator = Accelerator()
    if pid_file:  # the worker and a subprocess it started (in its process group)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(f"{pid_file}.{accelerator.process_index}").write_text(f"{os.getpid()} {child.pid}")
    for step in range(steps):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.05)
    return "trained"

def broken():
    raise ValueError("broken in the background")
"""


def _start_with_pid_files(kc: Any, pid_file: Path) -> list[int]:
    """Launch ``train`` in the background with pid files; the pids of both workers and their subprocesses."""
    assert execute(kc, SETUP, timeout=120).status == "ok"
    cell = execute(kc, f"run = notebook_launcher(train, args=(100_000, {str(pid_file)!r}), num_processes=2, "
                       "block=False, dashboard=False)", timeout=120)
    assert cell.status == "ok", cell.evalue
    deadline = time.monotonic() + 60
    while not all(Path(f"{pid_file}.{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [int(p) for r in (0, 1) for p in Path(f"{pid_file}.{r}").read_text().split()]


def _drain_comm_messages(kc: Any, seconds: float) -> int:
    """Read iopub for ``seconds``; count widget updates (comm messages), whatever cell they belong to."""
    count = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - queue.Empty at the end of the window
            break
        count += msg["msg_type"] == "comm_msg"
    return count


def _latencies(kc: Any, cells: int = 5) -> list[float]:
    """Seconds from sending each of ``cells`` quick cells to its reply."""
    out = []
    for i in range(cells):
        started = time.monotonic()
        cell = execute(kc, f"{i} * 2", timeout=30)
        out.append(time.monotonic() - started)
        assert cell.status == "ok" and cell.result == str(i * 2)
    return out


def test_cells_run_while_the_background_run_trains() -> None:
    with running_kernel() as (_, kc):
        assert execute(kc, SETUP, timeout=120).status == "ok"
        idle = _latencies(kc)
        launch = execute(kc, "run = notebook_launcher(train, args=(200,), num_processes=2, block=False, "
                             "dashboard=True)\nrun.status", timeout=120)
        assert launch.status == "ok", launch.evalue
        assert launch.result == "'running'"
        assert any(o["type"] == "display_data" for o in launch.outputs), "no dashboard under the launching cell"
        latencies = _latencies(kc)
        updates = _drain_comm_messages(kc, 2.0)
        print(f"cell latency while training: median {statistics.median(latencies) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms (idle kernel: median {statistics.median(idle) * 1000:.0f} ms, "
              f"max {max(idle) * 1000:.0f} ms); {updates} widget updates in 2 s")
        assert updates >= 2, "the dashboard stopped updating while other cells ran"
        done = execute(kc, "run.result(timeout=120), len(run.metrics), run.status", timeout=150)
        assert done.status == "ok", done.evalue
        assert done.result == "('trained', 200, 'finished')"
        failed = execute(kc, "bad = notebook_launcher(broken, num_processes=2, block=False, dashboard=False)\n"
                             "bad.result(timeout=60)", timeout=90)
        assert failed.status == "error" and failed.ename == "WorkerError"
        assert "broken in the background" in failed.evalue


@pytest.mark.parametrize("now", [False, True], ids=["shutdown", "killed"])
def test_kernel_shutdown_mid_run_leaves_nothing(tmp_path: Path, now: bool) -> None:
    pid_file = tmp_path / "pid"
    with running_kernel() as (km, kc):
        pids = _start_with_pid_files(kc, pid_file)
        assert all(is_running(p) for p in pids)
        kc.stop_channels()
        km.shutdown_kernel(now=now)
    deadline = time.monotonic() + 15
    while any(is_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if is_running(p)], "workers, or the subprocesses they started, outlived the kernel"


def test_the_stop_button_interrupts_the_cell_and_the_handle_stops_and_times_out() -> None:
    with running_kernel() as (km, kc):
        assert execute(kc, SETUP, timeout=120).status == "ok"
        launch = execute(kc, "run = notebook_launcher(train, args=(100_000,), num_processes=2, block=False, "
                             "dashboard=False)", timeout=120)
        assert launch.status == "ok", launch.evalue
        interrupted: list[bool] = []

        def interrupt_when_sleeping(cell: Any) -> None:
            if not interrupted and "sleeping" in cell.stdout:
                interrupted.append(True)
                km.interrupt_kernel()  # the notebook's stop button

        cell = execute(kc, "print('sleeping', flush=True); time.sleep(60)", timeout=90,
                       on_output=interrupt_when_sleeping)
        assert interrupted and cell.status == "error" and cell.ename == "KeyboardInterrupt"
        # the run goes on: it is still running and its values keep arriving (the first may come after the interrupt
        # on a loaded machine, so wait for it, up to a hang guard)
        still = execute(kc, "for _ in range(600):\n    if run.metrics or run.status != 'running':\n        break\n"
                            "    time.sleep(0.1)\nrun.status, len(run.metrics) > 0", timeout=90)
        assert still.result == "('running', True)", "the stop button reached the background run"
        stopped = execute(kc, "run.stop(); print(run.status); run.result()", timeout=60)
        assert stopped.stdout == "stopped\n" and stopped.ename == "RunStoppedError"
        late = execute(kc, "late = notebook_launcher(train, args=(100_000,), num_processes=2, block=False, "
                           "dashboard=False, timeout=3)\nlate.result(timeout=90)", timeout=120)
        assert late.ename == "LaunchTimeoutError", late.evalue
        assert execute(kc, "late.status", timeout=30).result == "'timeout'"


def test_kernel_restart_mid_run_leaves_nothing(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with running_kernel() as (km, kc):
        pids = _start_with_pid_files(kc, pid_file)
        km.restart_kernel(now=False)  # the menu's "Restart Kernel"
        deadline = time.monotonic() + 15
        while any(is_running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in pids if is_running(p)], "workers, or the subprocesses they started, outlived the kernel restart"
        kc.wait_for_ready(timeout=120)
        assert execute(kc, "1 + 1", timeout=30).result == "2"
