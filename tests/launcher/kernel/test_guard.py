"""The guard that ends the workers' process groups when the launching process (the kernel) is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notebook_accel.launcher import notebook_launcher
from notebook_accel.launcher.kernel.guard import KernelDeathGuard
from notebook_accel.launcher.kernel import guard as guard_module
from tests.launcher.recording import RecordingSink
from tests.launcher.supervision.test_supervisor import _children, _wait_ended

pytestmark = pytest.mark.timeout(90)

_KERNEL = """
import sys
from tests.launcher.supervision.test_supervisor import start_children_then
from notebook_accel import notebook_launcher
notebook_launcher(start_children_then, args=(sys.argv[1], "wait"), num_processes=2, dashboard=False)
"""


def test_a_killed_kernel_takes_what_the_workers_started_with_it(tmp_path: Path) -> None:
    """SIGKILL to the launching process (a crashed or killed kernel): the workers die with it (PDEATHSIG) and the
    guard ends their process groups. Before the guard, their subprocesses lived on as orphans."""
    import glob
    import tempfile

    pattern = os.path.join(tempfile.gettempdir(), "notebook-accel-store-*")
    before = set(glob.glob(pattern))
    pid_file = tmp_path / "children"
    kernel = subprocess.Popen([sys.executable, "-c", _KERNEL, str(pid_file)], cwd=Path(__file__).parents[3],
                              env={**os.environ, "NOTEBOOK_ACCEL_LOG_DIR": "off"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not all(Path(f"{pid_file}.{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        kernel.kill()
        kernel.wait()
    kept, away = _children(pid_file)
    for pid in away:
        os.kill(pid, signal.SIGKILL)
    assert _wait_ended(kept) == [], "the workers' subprocesses outlived the killed kernel"
    deadline = time.monotonic() + 30
    while set(glob.glob(pattern)) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(glob.glob(pattern)) - before, "the run's store folder outlived the killed kernel"


def test_a_guard_removes_the_runs_store_folder_when_the_kernel_dies(tmp_path: Path) -> None:
    store, other = tmp_path / "notebook-accel-store-abc", tmp_path / "precious"
    for folder in (store, other):
        folder.mkdir()
        (folder / "store").write_text("keys")
    guard = KernelDeathGuard()
    guard.remove_on_death(str(store))
    guard.remove_on_death(str(other))  # not a store folder: never removed
    proc = guard._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what the kernel's death does to the pipe
    proc.wait(timeout=30)
    assert not store.exists() and (other / "store").exists()


def test_a_guard_that_cannot_start_leaves_the_run_unguarded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_module, "_SH", "/nonexistent/sh")
    guard = KernelDeathGuard()
    assert guard.fd == -1
    guard.watch([os.getpid()])
    guard.close()
    assert notebook_launcher(sum, args=([1, 2],), num_processes=2, dashboard=RecordingSink()) == 3


def test_a_closed_guard_ends_nothing() -> None:
    """The normal end: the guard is killed before its pipe closes, so the groups it watched are left alone."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        guard = KernelDeathGuard()
        guard.watch([sleeper.pid])
        guard.close()
        guard.close()  # idempotent
        time.sleep(0.5)
        assert sleeper.poll() is None, "closing the guard ended a group it watched"
    finally:
        sleeper.kill()
        sleeper.wait()
