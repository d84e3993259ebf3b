"""The kernel's handle of one Ray worker: a :class:`~notebook_accel.launcher.placement.spawn.WorkerHandle` whose
pipes are the actor's back-channel sockets and whose exit descriptor is a pipe that :mod:`.watch` closes when the
actor's run ends (its result arrived, its process died, or its node went silent)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from notebook_accel.launcher.placement.spawn import WorkerHandle

__all__ = ["RayWorkerHandle", "REAP_SECONDS", "DRAIN_SECONDS"]

REAP_SECONDS = 15.0  # the longest :meth:`RayWorkerHandle.reap` waits for the watch's verdict after a kill
DRAIN_SECONDS = 3.0  # the longest the supervisor waits for an ended worker's last bytes on its sockets


@dataclass
class RayWorkerHandle(WorkerHandle):
    """One rank's actor, as the supervisor sees it.

    Attributes:
        actor: the Ray actor handle; ``ref``: its ``run`` call's result.
        control: the control stream (heartbeats and samples in, stop signals out), read by :mod:`.watch`.
        node_id: Ray's id of the node it runs on.
        exit_writer: the write end of the exit pipe (closed by :meth:`end`).
        signalled: the last stop signal the kernel sent it; ``signalled_at``: when it sent the first
            (``time.monotonic()``). A death the watch saw before that moment is the rank's own failure (often the
            cause of the others'), whatever the kernel sent afterwards; one after it is the kernel's stop.
    """

    actor: Any = None
    ref: Any = None
    control: socket.socket | None = None
    node_id: str = ""
    exit_writer: int = -1
    signalled: signal.Signals | None = None
    signalled_at: float | None = None
    ended: threading.Event = field(default_factory=threading.Event)

    def end(self, code: int, reason: str | None = None) -> None:
        """Record how the worker ended and wake the supervisor (its exit descriptor becomes readable). Once."""
        if self.ended.is_set():
            return
        self.exit_code = code
        self.death_reason = reason
        self.ended.set()
        if self.exit_writer >= 0:
            os.close(self.exit_writer)
            self.exit_writer = -1

    def stopped_by_kernel(self, died_at: float) -> bool:
        """Whether a death seen at ``died_at`` (``time.monotonic()``) came after the kernel's first stop signal."""
        return self.signalled_at is not None and died_at >= self.signalled_at

    def reap(self) -> int:
        """The exit code the watch recorded (waiting at most :data:`REAP_SECONDS` after a kill: a worker that
        still has none counts as killed); closes the exit descriptor."""
        if not self.ended.wait(REAP_SECONDS):
            self.end(-int(self.signalled or signal.SIGKILL), f"rank {self.rank} on node {self.node} did not confirm "
                     f"its end within {REAP_SECONDS:.0f} s of being stopped")
        if self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1
        return -1 if self.exit_code is None else self.exit_code

    def open_fds(self) -> list[int]:
        """The kernel's descriptors of this worker that are still open (later forks close them)."""
        control = self.control.fileno() if self.control is not None else -1
        return [*super().open_fds(), self.exit_writer, control]

    def send_signal(self, sig: signal.Signals) -> None:
        """Ask the worker to send ``sig`` to its process group (over the control stream; gone already is fine)."""
        self.signalled = sig
        if self.signalled_at is None:
            self.signalled_at = time.monotonic()
        if self.control is None or self.ended.is_set():
            return
        try:
            self.control.send(b"K" if sig == signal.SIGKILL else b"T", socket.MSG_DONTWAIT)
        except OSError:
            pass
