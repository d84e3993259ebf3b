"""The kernel's handle of one remote worker: a :class:`~notebook_accel.launcher.placement.spawn.WorkerHandle` whose
pipes are the rank's back-channel sockets (:mod:`.link`) and whose exit descriptor is a pipe that :mod:`.watch`
closes when the rank ends (its result arrived, its process died, or its node went silent). The Ray and the Slurm
placements both hand these to the supervisor, which reads them as it reads a forked worker's pipes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from notebook_accel.launcher.placement.remote.link import Dialed, detach_fd
from notebook_accel.launcher.placement.spawn import WorkerHandle

__all__ = ["RemoteWorkerHandle", "REAP_SECONDS", "DRAIN_SECONDS", "unset_connection", "accept_streams"]

REAP_SECONDS = 15.0  # the longest :meth:`RayWorkerHandle.reap` waits for the watch's verdict after a kill
DRAIN_SECONDS = 3.0  # the longest the supervisor waits for an ended worker's last bytes on its sockets


@dataclass
class RemoteWorkerHandle(WorkerHandle):
    """One remote rank, as the supervisor sees it.

    Attributes:
        ref: what the placement's results know the rank by (a Ray call's result, a Slurm task's rank).
        control: the control stream (heartbeats and samples in, stop signals out), read by :mod:`.watch`.
        node_id: the placement's id of the node it runs on (Ray's node id, Slurm's node name).
        exit_writer: the write end of the exit pipe (closed by :meth:`end`).
        signalled: the last stop signal the kernel sent it; ``signalled_at``: when it sent the first
            (``time.monotonic()``). A death the watch saw before that moment is the rank's own failure (often the
            cause of the others'), whatever the kernel sent afterwards; one after it is the kernel's stop.
    """

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

    @classmethod
    def create(cls: type[_Handle], rank: int, device: str, pid: int, node: str, **fields: Any) -> _Handle:
        """A handle with its exit pipe and no streams yet (:meth:`attach` gives them as they arrive)."""
        reader, writer = os.pipe()
        return cls(rank=rank, process=None, events=unset_connection(), stdout_fd=-1, stderr_fd=-1, device=device,
                   exit_fd=reader, pid=pid, node=node, drain_seconds=DRAIN_SECONDS, exit_writer=writer, **fields)

    @property
    def connected(self) -> bool:
        """Whether all four of the rank's streams arrived (a rank that ended after that ran; before, it could not
        start)."""
        return self.control is not None and self.stdout_fd >= 0 and self.stderr_fd >= 0 and not self.events.closed

    def attach(self, dialed: Dialed) -> None:
        """Take one of the rank's authenticated streams."""
        if dialed.kind == b"E":
            self.events = Connection(detach_fd(dialed.sock, blocking=True), writable=False)
        elif dialed.kind == b"O":
            self.stdout_fd = detach_fd(dialed.sock, blocking=False)
        elif dialed.kind == b"2":
            self.stderr_fd = detach_fd(dialed.sock, blocking=False)
        else:
            dialed.sock.setblocking(False)
            self.control = dialed.sock

    def close_streams(self) -> None:
        """Close the kernel's ends of the rank's streams."""
        if not self.events.closed:
            self.events.close()
        self.close_stream(self.stdout_fd)
        self.close_stream(self.stderr_fd)
        if self.control is not None:
            self.control.close()
            self.control = None


_Handle = TypeVar("_Handle", bound=RemoteWorkerHandle)


def unset_connection() -> Connection:
    """A placeholder events connection (closed), replaced when the rank's event stream arrives."""
    reader, writer = os.pipe()
    os.close(writer)
    conn = Connection(reader, writable=False)
    conn.close()
    return conn


def accept_streams(channel: Any, handles: Sequence[RemoteWorkerHandle], deadline: float,
                   alive: Callable[[], None]) -> None:
    """Give every handle its four streams from ``channel`` (a :class:`~.link.BackChannel` or one that accepts as it
    does) by ``deadline``; ``alive`` raises when a rank that is not :attr:`~RemoteWorkerHandle.connected` ended.

    Raises:
        TimeoutError: the deadline passed first; whatever ``alive`` raises.
    """
    by_rank = {h.rank: h for h in handles}
    for dialed in channel.accept(4 * len(handles), deadline, alive):
        by_rank[dialed.rank].attach(dialed)
