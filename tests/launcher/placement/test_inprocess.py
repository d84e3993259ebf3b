"""num_processes=1: no fork, the same environment for the call only, events to the sink, exceptions as they are."""

from __future__ import annotations

import os
import threading
import signal
import time

import pytest

from notebook_accel import channel
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import LaunchError
from notebook_accel.events import Finished, Metrics, Started
from notebook_accel.launcher import LaunchTimeoutError, notebook_launcher
from tests.launcher.recording import RecordingSink


def inside() -> tuple[int, LaunchEnvironment]:
    writer = channel.current()
    assert writer is not None
    writer.post(Metrics(0, 1, {"loss": 0.5}, time=0.0))
    return os.getpid(), LaunchEnvironment.from_environ()


def test_runs_here_with_the_launch_environment() -> None:
    sink = RecordingSink()
    before = dict(os.environ)
    pid, env = notebook_launcher(inside, num_processes=1, mixed_precision="bf16", dashboard=sink)
    assert pid == os.getpid()
    assert (env.rank, env.world_size, env.device, env.mixed_precision, env.launched) == (0, 1, "cpu", "bf16", True)
    assert env.master_addr == "127.0.0.1" and env.master_port is not None
    assert dict(os.environ) == before
    assert [type(e) for e in sink.events] == [Started, Metrics, Finished]
    assert sink.info is not None and sink.info.backend == "none"
    assert sink.outcome is not None and sink.outcome.status == "finished"
    assert channel.current() is None


class Boom(Exception):
    pass


def fails() -> None:
    raise Boom("as it is")


def test_exception_propagates_unchanged() -> None:
    sink = RecordingSink()
    with pytest.raises(Boom, match="as it is") as info:
        notebook_launcher(fails, num_processes=1, dashboard=sink)
    assert info.traceback[-1].name == "fails"
    assert sink.outcome is not None and sink.outcome.status == "failed" and "Boom: as it is" in sink.outcome.error


def test_previous_writer_is_restored() -> None:
    previous = object()
    channel.install(previous)  # type: ignore[arg-type]
    try:
        notebook_launcher(inside, num_processes=1, dashboard=RecordingSink())
        assert channel.current() is previous
    finally:
        channel.uninstall()


def slow() -> None:
    time.sleep(10)


@pytest.mark.timeout(60)
def test_timeout_runs_the_single_process_in_a_fork() -> None:
    """A timeout must never interrupt the kernel's own thread: the one process runs forked and is stopped there."""
    sink = RecordingSink()
    alarm = signal.getsignal(signal.SIGALRM)
    with pytest.raises(LaunchTimeoutError, match="timeout=0.5"):
        notebook_launcher(slow, num_processes=1, timeout=0.5, dashboard=sink)
    assert sink.outcome is not None and sink.outcome.status == "timeout"
    assert signal.getsignal(signal.SIGALRM) is alarm  # the kernel's thread was never armed


def own_pid() -> int:
    return os.getpid()


@pytest.mark.timeout(60)
def test_single_process_with_a_timeout_returns_from_the_fork() -> None:
    assert notebook_launcher(own_pid, num_processes=1, timeout=60, dashboard=RecordingSink()) != os.getpid()


def interrupted() -> None:
    raise KeyboardInterrupt


def test_interrupt_outcome() -> None:
    sink = RecordingSink()
    with pytest.raises(KeyboardInterrupt):
        notebook_launcher(interrupted, num_processes=1, dashboard=sink)
    assert sink.outcome is not None and sink.outcome.status == "interrupted"
