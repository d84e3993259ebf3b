"""num_processes=1: no fork, the same environment for the call only, events to the sink, exceptions as they are."""

from __future__ import annotations

import os
import threading
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


@pytest.mark.timeout(30)
def test_timeout() -> None:
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError, match="timeout=0.2"):
        notebook_launcher(slow, num_processes=1, timeout=0.2, dashboard=sink)
    assert sink.outcome is not None and sink.outcome.status == "timeout"


def test_timeout_off_the_main_thread_is_refused() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            notebook_launcher(slow, num_processes=1, timeout=0.2, dashboard=RecordingSink())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], LaunchError) and "main thread" in str(errors[0])


def interrupted() -> None:
    raise KeyboardInterrupt


def test_interrupt_outcome() -> None:
    sink = RecordingSink()
    with pytest.raises(KeyboardInterrupt):
        notebook_launcher(interrupted, num_processes=1, dashboard=sink)
    assert sink.outcome is not None and sink.outcome.status == "interrupted"
