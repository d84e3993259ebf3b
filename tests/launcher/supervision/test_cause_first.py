"""The cause wins over its consequences, however the events race (issue 43 item 1).

A lost node or a killed worker reaches its peers first as their backend's "Connection reset by peer"; the run's stop
then signals the dead rank too. The error must still name the rank that died, with its own reason, and list the
peers' lost connections after it. A fake placement makes each ordering happen on purpose.
"""

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
from notebook_accel.events import Exited, Failed
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.supervision.failures import WorkerError
from notebook_accel.launcher.supervision.stopping import stopped_by_us
from notebook_accel.launcher.supervision.supervisor import supervise
from notebook_accel.display.sinks import GuardedSink
from notebook_accel.monitor.board import SystemBoard
from tests.launcher.placement.test_protocol import _envs, _Remote
from tests.launcher.recording import RecordingSink

_RESET = "[/gloo/transport/tcp/pair.cc:537] Read error [10.0.0.2]:30874: Connection reset by peer"


class _PeerDiesUnseen:
    """Rank 0 reports its peer's lost connection at once; rank 1 (the dead one) is only known to have ended when
    the stop's first signal reaches it: as a Ray node's raylet killed mid-run, whose verdict waits for its stream's
    grace. ``reason``: what the placement knows of rank 1's death (``None``: only its exit code, ``died_by``)."""

    def __init__(self, reason: str | None, died_by: signal.Signals = signal.SIGKILL) -> None:
        self.reason = reason
        self.died_by = died_by
        self.pending: dict[int, int] = {}
        self.signals: list[tuple[int, signal.Signals]] = []

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        handles = []
        for env in envs:
            events, sender = Pipe(duplex=False)
            out_r, err_r = _ended_pipe(), _ended_pipe()  # no output
            exit_r, exit_w = os.pipe()
            handle = WorkerHandle(env.rank, cast(BaseProcess, _Remote()), events, out_r, err_r, "cpu",
                                  exit_fd=exit_r, node=f"10.0.0.{env.rank + 1}")
            writer = EventWriter(sender)
            if env.rank == 0:
                writer.send(Failed(0, "RuntimeError", _RESET, ""))
                cast(_Remote, handle.process).exitcode = 1
                os.close(exit_w)
            else:
                self.pending[exit_r] = exit_w
            writer.close()
            handles.append(handle)
        return handles

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        self.signals.append((handle.rank, sig))
        exit_w = self.pending.pop(handle.exit_fd, None)
        if exit_w is not None:  # it had died already: only now does the placement say so
            cast(_Remote, handle.process).exitcode = -int(self.died_by)
            handle.death_reason = self.reason
            os.close(exit_w)

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        """Nothing was left."""

    def sampler(self, handles: Sequence[WorkerHandle]) -> None:
        return None

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        for handle in handles:
            handle.reap()
            handle.events.close()
            for fd in (handle.stdout_fd, handle.stderr_fd):
                handle.close_stream(fd)
            os.close(handle.exit_fd)


def _ended_pipe() -> int:
    """The read end of a pipe whose writer is closed."""
    reader, writer = os.pipe()
    os.close(writer)
    return reader


def _run(placement: _PeerDiesUnseen) -> WorkerError:
    handles = placement.start(_envs(2), print, (), None)
    sink = RecordingSink()
    with pytest.raises(WorkerError) as caught:
        supervise(handles, GuardedSink(sink), None, time.monotonic(), grace=0.5, placement=placement)
    exits = {e.rank: e.failure for e in sink.of_type(Exited) if isinstance(e, Exited)}
    own = [f for f in caught.value.failures if not f.lost_peer]
    assert exits[0] == "" and exits[1] == (own[0].message if own else "")  # the dashboard hears the same verdict
    return caught.value


@pytest.mark.timeout(30)
def test_a_rank_whose_placement_explains_its_death_is_the_cause_though_the_stop_signalled_it() -> None:
    placement = _PeerDiesUnseen("its process on node 10.0.0.2 ended without a result (it was killed, or Ray on "
                                "that node stopped)")
    error = _run(placement)
    assert (1, signal.SIGTERM) in placement.signals  # the stop did reach it, after it had died
    text = str(error)
    assert text.startswith("worker rank 1: its process on node 10.0.0.2 ended without a result"), text
    assert "then rank 0 lost the connection to the failed worker" in text and "Connection reset by peer" in text
    assert error.rank == 1 and [f.rank for f in error.failures] == [1, 0]


@pytest.mark.timeout(30)
def test_a_sigkill_when_the_stop_sent_only_sigterm_is_the_ranks_own_death() -> None:
    error = _run(_PeerDiesUnseen(None, signal.SIGKILL))
    assert str(error).startswith("worker rank 1: killed by SIGKILL"), str(error)
    assert [f.rank for f in error.failures] == [1, 0]


@pytest.mark.timeout(30)
def test_a_rank_that_died_by_the_stops_own_signal_is_no_failure() -> None:
    error = _run(_PeerDiesUnseen(None, signal.SIGTERM))
    assert [f.rank for f in error.failures] == [0]  # only the lost connection is left to report


@pytest.mark.parametrize(("sent", "died_by", "explained", "ours"), [
    (None, "SIGKILL", False, False), (signal.SIGTERM, "SIGTERM", False, True), (signal.SIGKILL, "SIGKILL", False, True),
    (signal.SIGTERM, "SIGKILL", False, False), (signal.SIGKILL, "SIGKILL", True, False),
    (signal.SIGTERM, None, False, False)])
def test_which_ends_are_the_stops_doing(sent: signal.Signals | None, died_by: str | None, explained: bool,
                                         ours: bool) -> None:
    assert stopped_by_us(sent, died_by, explained) is ours


def _killed_mid_collective() -> None:
    """Both ranks sum a tensor in a loop; rank 1 is SIGKILLed (as by another user or a node's OOM killer) while rank 0
    waits for it in the next sum, so rank 0's lost connection races rank 1's death to the kernel."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator(cpu=True)
    for step in range(1000):
        accelerator.reduce(torch.ones(1), reduction="sum")
        if step == 3 and accelerator.process_index == 1:
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(180)
def test_a_local_rank_killed_mid_collective_is_the_headline_every_time() -> None:
    from notebook_accel.launcher import notebook_launcher

    for attempt in range(5):
        with pytest.raises(WorkerError) as caught:
            notebook_launcher(_killed_mid_collective, num_processes=2, dashboard=RecordingSink())
        text = str(caught.value)
        assert text.startswith("worker rank 1: killed by SIGKILL"), f"attempt {attempt + 1}: {text}"
        assert caught.value.rank == 1
