"""Supervision that nothing escapes: what workers start ends with the run, and the run's end is seen at once.

Each test here failed before the worker had its own process group and the kernel watched a pidfd (issue 11).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from notebook_accel import Accelerator
from notebook_accel.events import Log
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from notebook_accel.launcher.placement import processes
from notebook_accel.launcher.child import main as worker
from tests.helpers import child_pids, is_running
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(90)


def _rank() -> int:
    return int(os.environ["RANK"])


_running = is_running  # a zombie waiting for init to reap it counts as ended


def _wait_ended(pids: list[int], seconds: float = 5.0) -> list[int]:
    """The pids still running after up to ``seconds`` (a killed process takes a moment to go)."""
    deadline = time.monotonic() + seconds
    while seconds and any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _running(p)]


# -- worker bodies ------------------------------------------------------------------------------------------
def fork_and_return(pid_file: str) -> str:
    """Rank 0 leaves an os.fork child and a fork-context Process holding every inherited pipe, then returns."""
    if _rank() == 0:
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        import multiprocessing

        helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        helper.start()
        Path(pid_file).write_text(f"{child} {helper.pid}")
    return f"rank {_rank()} done"


def start_subprocess(pid_file: str) -> int:
    """Each rank starts a long subprocess and returns without waiting for it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(f"{pid_file}.{_rank()}").write_text(str(proc.pid))
    return proc.pid


def loader_forever(pid_file: str) -> None:
    """Iterate a DataLoader with worker processes until stopped."""
    data = torch.utils.data.TensorDataset(torch.arange(10_000.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
    while True:
        for _ in loader:
            if not Path(f"{pid_file}.{_rank()}").exists():
                pids = [w.pid for w in loader._iterator._workers]  # type: ignore[union-attr]
                Path(f"{pid_file}.{_rank()}").write_text(" ".join(map(str, pids)))
            time.sleep(0.01)


def return_prepared_model() -> torch.nn.Module:
    """Return the DDP-wrapped model, with the mixed-precision forward installed."""
    accelerator = Accelerator(mixed_precision="bf16")
    torch.manual_seed(0)
    return accelerator.prepare(torch.nn.Linear(3, 2))


class NeedsWorker:
    """An object that can be pickled in a worker but not loaded in the kernel."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_load_only_in_worker, ("payload",))


def _load_only_in_worker(value: str) -> str:
    if "RANK" not in os.environ:
        raise RuntimeError("Default process group has not been initialized")
    return value


def return_unloadable() -> object:
    return NeedsWorker() if _rank() == 0 else None


# -- tests ------------------------------------------------------------------------------------------------
def test_a_forked_grandchild_does_not_hold_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    value = notebook_launcher(fork_and_return, args=(str(pid_file),), num_processes=2, dashboard=RecordingSink(),
                              timeout=45)
    elapsed = time.monotonic() - started
    assert value == "rank 0 done"
    assert elapsed < 30, f"the launch waited {elapsed:.1f} s for the worker's children (hang guard)"
    pids = [int(p) for p in pid_file.read_text().split()]
    assert _wait_ended(pids) == [], "the worker's children outlived the run"


def test_processes_a_worker_starts_end_with_the_run(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    values = notebook_launcher(start_subprocess, args=(str(pid_file),), num_processes=2, dashboard=RecordingSink())
    pids = [int((tmp_path / f"pid.{rank}").read_text()) for rank in (0, 1)]
    assert values == pids[0]
    assert _wait_ended(pids, seconds=0) == [], "subprocesses started by the workers are still running"


def test_stop_button_ends_dataloader_workers(tmp_path: Path) -> None:
    pid_file = tmp_path / "loader"

    def interrupt_when_ready() -> None:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"loader.{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt_when_ready, daemon=True)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        notebook_launcher(loader_forever, args=(str(pid_file),), num_processes=2, dashboard=RecordingSink())
    timer.join()
    pids = [int(p) for r in (0, 1) for p in (tmp_path / f"loader.{r}").read_text().split()]
    assert len(pids) == 4
    assert _wait_ended(pids, seconds=0) == [], "DataLoader workers outlived the stop"


def test_an_interrupt_while_forking_leaks_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    real_fork = os.fork
    forks: list[int] = []

    def fork_then_interrupt() -> int:
        pid = real_fork()
        if pid:  # in the kernel, right after the fork: the stop button at the worst moment
            forks.append(pid)
            os.kill(os.getpid(), signal.SIGINT)
        return pid

    monkeypatch.setattr(os, "fork", fork_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        notebook_launcher(time.sleep, args=(30,), num_processes=2, dashboard=RecordingSink())
    monkeypatch.undo()
    assert forks, "the test did not fork"
    assert child_pids() == []
    assert _wait_ended(forks) == []


def test_a_worker_whose_kernel_is_gone_leaves_at_once() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            worker._die_with_parent(kernel_pid=1)  # not our parent: as if the kernel died before prctl
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == worker._ORPHANED


def test_end_groups_terminates_a_group_and_reports_it() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert processes.group_members(proc.pid) == [proc.pid]
        assert processes.end_groups([proc.pid], grace=2.0) == [proc.pid]
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert processes.end_groups([proc.pid], grace=2.0) == []
    finally:
        proc.kill()
        proc.wait()


def test_exit_fd_is_readable_once_the_process_exits() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    fd = processes.exit_fd(proc.pid)
    if fd is None:
        proc.wait()
        pytest.skip("this kernel has no pidfd_open (Linux < 5.3): the sentinel is used instead")
    try:
        from multiprocessing.connection import wait

        assert wait([fd], 30) == [fd]
    finally:
        os.close(fd)
        proc.wait()


def test_a_returned_prepared_model_arrives_unwrapped() -> None:
    model = notebook_launcher(return_prepared_model, num_processes=2, dashboard=RecordingSink())
    assert type(model) is torch.nn.Linear
    assert "forward" not in model.__dict__  # the mixed-precision forward stayed in the worker
    torch.manual_seed(0)
    assert torch.equal(model.weight, torch.nn.Linear(3, 2).weight)


def test_a_value_the_kernel_cannot_load_is_a_clear_worker_error() -> None:
    with pytest.raises(WorkerError, match="cannot be loaded in the kernel") as info:
        notebook_launcher(return_unloadable, num_processes=2, dashboard=RecordingSink())
    assert [f.rank for f in info.value.failures] == [0]
    assert "Default process group has not been initialized" in str(info.value)
    assert "state_dict()" in str(info.value)



# -- every teardown path ends the workers' process groups ------------------------------------------------------
def start_children_then(pid_file: str, then: str) -> str:
    """Each rank starts a subprocess in its group and, in a new session, one that leaves it (documented as not
    followed); then returns, fails on rank 1, or waits to be stopped."""
    rank = _rank()
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    away = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    Path(f"{pid_file}.{rank}").write_text(f"{kept.pid} {away.pid}")
    if then == "fail" and rank == 1:
        raise ValueError("rank one failed")
    if then != "return":
        time.sleep(60)
    return "done"


def _children(pid_file: Path) -> tuple[list[int], list[int]]:
    """(pids in the workers' groups, pids that left them) from the files each rank wrote."""
    pairs = [[int(p) for p in Path(f"{pid_file}.{rank}").read_text().split()] for rank in (0, 1)]
    return [kept for kept, _ in pairs], [away for _, away in pairs]


def _when_children_started(pid_file: Path, action: Callable[[], None]) -> threading.Thread:
    """A thread that runs ``action`` once both ranks have written their pid files."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 60
        while not all(Path(f"{pid_file}.{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("path", ["success", "failure", "timeout", "interrupt", "background-stop"])
def test_every_teardown_path_ends_what_the_workers_started(tmp_path: Path, path: str) -> None:
    pid_file = tmp_path / "children"
    launch = functools.partial(notebook_launcher, start_children_then, num_processes=2, dashboard=RecordingSink())
    if path == "success":
        assert launch(args=(str(pid_file), "return")) == "done"
    elif path == "failure":
        with pytest.raises(WorkerError, match="rank one failed"):
            launch(args=(str(pid_file), "fail"))
    elif path == "timeout":
        thread = _when_children_started(pid_file, lambda: None)
        with pytest.raises(LaunchTimeoutError):
            launch(args=(str(pid_file), "wait"), timeout=8)
        thread.join()
    elif path == "interrupt":
        thread = _when_children_started(pid_file, lambda: os.kill(os.getpid(), signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):
            launch(args=(str(pid_file), "wait"))
        thread.join()
    else:
        run = launch(args=(str(pid_file), "wait"), block=False)
        _when_children_started(pid_file, run.stop).join()
        assert run.status == "stopped"
    kept, away = _children(pid_file)
    try:
        assert _wait_ended(kept, seconds=0) == [], f"{path}: processes started by the workers outlived the run"
        assert all(_running(p) for p in away), "a process in a session of its own is not followed (documented)"
    finally:
        for pid in away:
            os.kill(pid, signal.SIGKILL)
    assert child_pids() == []


def test_a_failed_fork_ends_the_started_workers_with_their_children(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The second fork fails (EAGAIN: out of processes) once rank 0 runs and has started a subprocess: rank 0's
    whole group goes (before, only rank 0 itself was killed and its subprocess lived on)."""
    from multiprocessing.context import ForkProcess

    pid_file = tmp_path / "children"
    real_start = ForkProcess.start
    started: list[int] = []

    def start_or_fail(self: ForkProcess) -> None:
        if started:
            deadline = time.monotonic() + 60
            while not Path(f"{pid_file}.0").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            raise OSError(11, "Resource temporarily unavailable")
        real_start(self)
        started.append(self.pid or 0)

    monkeypatch.setattr(ForkProcess, "start", start_or_fail)
    with pytest.raises(OSError, match="temporarily unavailable"):
        notebook_launcher(start_children_then, args=(str(pid_file), "wait"), num_processes=2,
                          dashboard=RecordingSink())
    monkeypatch.undo()
    kept, away = [int(p) for p in Path(f"{pid_file}.0").read_text().split()]
    os.kill(away, signal.SIGKILL)
    assert _wait_ended([kept], seconds=0) == [], "rank 0's subprocess outlived the failed launch"
    assert child_pids() == []


@pytest.mark.timeout(60)
def test_draining_a_dead_worker_is_bounded_however_fast_a_grandchild_writes() -> None:
    """A dead worker's output pipe that never runs dry (a grandchild writing without pause; here /dev/zero, which
    is always readable): the drain reads a bounded amount and closes it. Before, it read until the pipe was
    empty, which a fast enough writer never lets happen (the cell hung, past timeout=)."""
    from multiprocessing import Pipe

    from notebook_accel.launcher.placement.spawn import WorkerHandle
    from notebook_accel.launcher.supervision.supervisor import _DRAIN_BYTES, _Supervisor

    events, sender = Pipe(duplex=False)
    sender.close()
    endless = os.open("/dev/zero", os.O_RDONLY)
    quiet_r, quiet_w = os.pipe()
    os.close(quiet_w)
    handle = WorkerHandle(0, None, events, endless, quiet_r, "cpu", exit_fd=-1)  # type: ignore[arg-type]
    sink = RecordingSink()
    state = _Supervisor([handle], sink, grace=1.0, log_dir=None)
    state.drain(handle)
    assert handle.stdout_fd == -1 and handle.stderr_fd == -1 and events.closed
    assert state.fds == {}
    assert sum(len(e.text) for e in sink.of_type(Log)) <= 2 * _DRAIN_BYTES  # type: ignore[attr-defined]
