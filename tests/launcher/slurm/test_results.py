"""The shared watch's verdicts on a Slurm rank, in Slurm's words (no cluster needed): a rank whose control stream
closes with no exit line is ended with what may have stopped on its node (the rank's process, or that node's slurmd),
never with another placement's words; an exit line is the rank's exit code."""

from __future__ import annotations

import signal
import socket
from typing import Any

import pytest

from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle
from notebook_accel.launcher.placement.remote.watch import CLOSED_GRACE, RunWatch
from notebook_accel.launcher.placement.slurm.results import SlurmResults

pytestmark = pytest.mark.timeout(60)


class _Step:
    """A step whose tasks print the codes in ``codes`` (none: still running)."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}

    def code(self, rank: int) -> int | None:
        return self.codes.get(rank)


def _watched(step: Any) -> tuple[RemoteWorkerHandle, socket.socket, RunWatch]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    handle = RemoteWorkerHandle.create(1, "cpu", 4242, "n2", ref=1, node_id="n2", control=ours)
    watch = RunWatch(SlurmResults(step), [handle], node_timeout=30)
    watch.start()
    return handle, theirs, watch


def _end(handle: RemoteWorkerHandle, watch: RunWatch) -> None:
    watch.stop()
    handle.reap()
    handle.close_streams()


def test_a_closed_stream_with_no_exit_line_is_told_in_slurm_s_words() -> None:
    handle, theirs, watch = _watched(_Step())
    try:
        theirs.close()  # the rank's process (or slurmd) died: its control stream ends, no exit line follows
        assert handle.ended.wait(CLOSED_GRACE + 10)
    finally:
        _end(handle, watch)
    reason = handle.death_reason or ""
    assert handle.exit_code == -int(signal.SIGKILL)
    assert reason.startswith("its process on node n2 ended without a result (it was killed, or Slurm's slurmd on "
                             "that node stopped)"), reason
    assert "Ray" not in reason


def test_an_exit_line_is_the_ranks_exit_code() -> None:
    step = _Step()
    handle, theirs, watch = _watched(step)
    try:
        step.codes[1] = 3
        assert handle.ended.wait(10)
    finally:
        theirs.close()
        _end(handle, watch)
    assert handle.exit_code == 3 and handle.death_reason is None
