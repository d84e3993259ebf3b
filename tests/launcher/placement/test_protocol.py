"""The Placement seam: ``supervise`` drives workers it did not fork, only through their handles and a placement."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from multiprocessing import Pipe
from multiprocessing.process import BaseProcess
from typing import Any, Callable, cast

import pytest

from notebook_accel.channel import EventWriter
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import Exited, Finished, RunOutcome, Started
from notebook_accel.launcher.placement.protocol import Placement
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.supervision.failures import LaunchTimeoutError
from notebook_accel.launcher.supervision.supervisor import supervise
from notebook_accel.monitor.board import SystemBoard
from notebook_accel.display.sinks import GuardedSink
from tests.launcher.recording import RecordingSink


class _Remote:
    """Stands for a worker placed elsewhere: an exit code, set when it ends."""

    pid = 0

    def __init__(self) -> None:
        self.exitcode: int | None = None

    def join(self) -> None:
        """Nothing to wait for: the placement ended it."""

    def close(self) -> None:
        """Nothing to free."""


class _Threadless:
    """A placement whose workers are pipes written by the test: each returns its rank times 10 at once, unless
    ``hang`` (then it ends only when signalled)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang
        self.signals: list[tuple[int, signal.Signals]] = []
        self.exits: dict[int, int] = {}
        self.released = False
        self.leftovers_ended = False

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        handles = []
        for env in envs:
            events, sender = Pipe(duplex=False)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            exit_r, exit_w = os.pipe()
            os.write(out_w, f"hello from {env.rank}\n".encode())
            for fd in (out_w, err_w):
                os.close(fd)
            writer = EventWriter(sender)
            handle = WorkerHandle(env.rank, cast(BaseProcess, _Remote()), events, out_r, err_r, "cpu", exit_fd=exit_r)
            if self.hang:
                self.exits[exit_r] = exit_w
            else:
                writer.send(Finished(env.rank, env.rank * 10))
                self._end(handle, exit_w, 0)
            writer.close()
            handles.append(handle)
        return handles

    def _end(self, handle: WorkerHandle, exit_w: int, code: int) -> None:
        cast(_Remote, handle.process).exitcode = code
        os.close(exit_w)  # its exit descriptor becomes readable

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        self.signals.append((handle.rank, sig))
        exit_w = self.exits.pop(handle.exit_fd, None)
        if exit_w is not None:
            self._end(handle, exit_w, -sig)

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        self.leftovers_ended = True

    def sampler(self, handles: Sequence[WorkerHandle]) -> None:
        return None  # no figures: the supervisor runs without a system panel

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        self.released = True
        for handle in handles:
            handle.reap()
            handle.events.close()
            for fd in (handle.stdout_fd, handle.stderr_fd):
                handle.close_stream(fd)


def _envs(n: int) -> list[LaunchEnvironment]:
    return [LaunchEnvironment(rank=r, local_rank=r, world_size=n, local_world_size=n, master_addr="127.0.0.1",
                              master_port=1, device="cpu", launched=True) for r in range(n)]


def _close_exit_fds(handles: Sequence[WorkerHandle]) -> None:
    for handle in handles:
        os.close(handle.exit_fd)  # not a pidfd: the placement's own, closed by its owner


@pytest.mark.timeout(30)
def test_supervise_runs_a_placement_it_did_not_fork() -> None:
    placement = _Threadless()
    typed: Placement = placement  # the fake satisfies the protocol (mypy checks it)
    handles = typed.start(_envs(2), print, (), None)
    sink = RecordingSink()
    assert supervise(handles, GuardedSink(sink), None, time.monotonic(), placement=placement) == 0
    _close_exit_fds(handles)
    assert placement.released and placement.leftovers_ended and placement.signals == []
    assert [cast(Exited, e).exit_code for e in sink.of_type(Exited)] == [0, 0]
    assert sink.lines(1) == ["hello from 1"]
    assert sink.outcome is not None and sink.outcome.status == "finished"


@pytest.mark.timeout(30)
def test_a_timeout_stops_the_workers_through_the_placement() -> None:
    placement = _Threadless(hang=True)
    handles = placement.start(_envs(2), print, (), None)
    sink = RecordingSink()
    with pytest.raises(LaunchTimeoutError, match="ranks still running: \\[0, 1\\]"):
        supervise(handles, GuardedSink(sink), 0.2, time.monotonic(), grace=0.5, placement=placement)
    _close_exit_fds(handles)
    assert placement.signals == [(0, signal.SIGTERM), (1, signal.SIGTERM)]
    assert placement.released and placement.leftovers_ended
    assert isinstance(sink.outcome, RunOutcome) and sink.outcome.status == "timeout"


@pytest.mark.timeout(30)
def test_each_ranks_start_names_the_node_its_placement_put_it_on() -> None:
    placement = _Threadless()
    handles = placement.start(_envs(2), print, (), None)
    handles[0].node, handles[1].node = "10.0.0.1", "10.0.0.2"  # as a Ray placement fills them in
    sink = RecordingSink()
    assert supervise(handles, GuardedSink(sink), None, time.monotonic(), placement=placement) == 0
    _close_exit_fds(handles)
    assert [(e.rank, e.node) for e in sink.of_type(Started) if isinstance(e, Started)] == [
        (0, "10.0.0.1"), (1, "10.0.0.2")]
