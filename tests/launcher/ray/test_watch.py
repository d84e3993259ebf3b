"""The watch's verdict on a Ray rank whose process died: its own failure when the death came before the kernel's first
stop signal (it is then the cause of its peers' lost connections), the kernel's stop when it came after (issue 43)."""

from __future__ import annotations

import signal
import socket
import time

import pytest

from notebook_accel.launcher.placement.ray.handles import RayWorkerHandle
from notebook_accel.launcher.placement.ray.watch import RayWatch
from notebook_accel.launcher.placement.remote.watch import CLOSED_GRACE
from tests.launcher.ray.test_parts import _FakeRay, _handle

pytestmark = pytest.mark.timeout(60)


class ActorDiedError(Exception):
    """Named as Ray's error for a dead actor."""


def _close_then_signal(how: str) -> RayWorkerHandle:
    """Rank 1's stream closes (its process died); the kernel's stop signals it a moment later, as when its peer's
    lost connection reached the kernel first; then (``how="died"``) Ray reports the actor dead."""
    ray = _FakeRay([])
    handle, theirs = _handle(1, "10.0.0.2", "ref1")
    watch = RayWatch(ray, [handle], node_timeout=30)
    watch.start()
    try:
        theirs.close()  # the process died: its control stream ends
        time.sleep(0.6)  # the watch has seen the end (it polls every 0.2 s)
        handle.send_signal(signal.SIGTERM)  # the stop, begun by the peer's "Connection reset by peer"
        if how == "died":
            ray.results["ref1"] = ActorDiedError("The actor died unexpectedly before finishing this task.")
        assert handle.ended.wait(CLOSED_GRACE + 10)
    finally:
        watch.stop()
        handle.reap()
        if handle.control is not None:
            handle.control.close()
    return handle


@pytest.mark.parametrize("how", ["closed", "died"])
def test_a_death_before_the_first_stop_signal_is_the_ranks_own_failure(how: str) -> None:
    handle = _close_then_signal(how)
    assert handle.exit_code == -int(signal.SIGKILL)
    reason = handle.death_reason or ""
    if how == "closed":
        assert reason.startswith("its process on node 10.0.0.2 ended without a result"), reason
    else:
        assert reason.startswith("its worker process on node 10.0.0.2 died (The actor died"), reason


def test_a_death_after_the_first_stop_signal_is_the_kernels_stop() -> None:
    ray = _FakeRay([])
    handle, theirs = _handle(1, "10.0.0.2", "ref1")
    handle.send_signal(signal.SIGTERM)
    assert theirs.recv(1) == b"T"
    watch = RayWatch(ray, [handle], node_timeout=30)
    watch.start()
    try:
        theirs.close()  # it obeyed: its process ended after the signal
        ray.results["ref1"] = ActorDiedError("The actor died because its worker process was killed.")
        assert handle.ended.wait(CLOSED_GRACE + 10)
        assert handle.exit_code == -int(signal.SIGTERM) and handle.death_reason is None
    finally:
        watch.stop()
        handle.reap()
        if handle.control is not None:
            handle.control.close()


def test_the_first_signal_is_the_moment_that_counts() -> None:
    ours, theirs = socket.socketpair()
    handle = RayWorkerHandle(rank=0, process=None, events=None, stdout_fd=-1, stderr_fd=-1,  # type: ignore[arg-type]
                             device="cpu", control=ours)
    assert not handle.stopped_by_kernel(time.monotonic())
    handle.send_signal(signal.SIGTERM)
    first = handle.signalled_at
    assert first is not None and handle.stopped_by_kernel(first) and not handle.stopped_by_kernel(first - 0.01)
    handle.send_signal(signal.SIGKILL)
    assert handle.signalled_at == first and handle.signalled == signal.SIGKILL
    ours.close()
    theirs.close()
