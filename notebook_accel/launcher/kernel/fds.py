"""The launcher's own descriptors in the kernel, so that no run's worker keeps another run's open.

``fork`` copies every descriptor, close-on-exec or not (that flag only acts at ``exec``). A worker of run B
forked while run A is going would hold A's rendezvous listener (A's port stays taken after A ends, for as
long as B's worker lives), A's accepted store connections, A's output pipes and pidfds. So every run
registers what it holds open in the kernel (:class:`RunDescriptors`), and a new worker closes, first thing
after the fork, every registered descriptor of every run, its own run's included (:func:`snapshot` taken
just before each fork, :func:`close_inherited` in the child). Store connections are recognised by their
local port: any inherited TCP socket whose local port is a port a run of this kernel serves is closed.

A registered number is read at fork time from the live objects (a closed pipe reads as ``-1``), and the
child never closes the descriptors it was given for itself (``keep``), so a number reused in the kernel
between the snapshot and the fork cannot take a worker's own pipe from it.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

__all__ = ["RunDescriptors", "Inherited", "snapshot", "close_inherited", "shut_down"]

_LOCK = threading.Lock()
_RUNS: list[RunDescriptors] = []


@dataclass(frozen=True)
class Inherited:
    """What a worker must close right after its fork: descriptors by number, sockets by local port."""

    fds: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()


@dataclass(eq=False)
class RunDescriptors:
    """One run's descriptors in the kernel, registered from :meth:`open` to :meth:`close`.

    Attributes:
        sources: callables, each returning the descriptors something of the run holds open now (``-1`` and
            negative numbers are ignored).
        ports: the ports on which the run serves its rendezvous store (its listener and every connection
            it accepted have that local port).
    """

    sources: list[Callable[[], Collection[int]]] = field(default_factory=list)
    ports: set[int] = field(default_factory=set)

    def open(self) -> RunDescriptors:
        """Register the run (idempotent); returns ``self``."""
        with _LOCK:
            if self not in _RUNS:
                _RUNS.append(self)
        return self

    def close(self) -> None:
        """Forget the run (its descriptors are closed, or about to be). Idempotent."""
        with _LOCK:
            if self in _RUNS:
                _RUNS.remove(self)

    def current(self) -> set[int]:
        """The descriptors the run holds open now."""
        return {fd for source in self.sources for fd in source() if fd >= 0}


def snapshot() -> Inherited:
    """Every registered run's descriptors and store ports, as they are now (take it just before a fork)."""
    with _LOCK:
        runs = list(_RUNS)
    return Inherited(frozenset().union(*(run.current() for run in runs)),
                     frozenset().union(*(run.ports for run in runs)))


def _local_port(fd: int) -> int | None:
    """The local TCP port of socket ``fd`` (``None`` for anything else: a file, a pipe, a Unix socket)."""
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        return int(sock.getsockname()[1])
    except OSError:
        return None
    finally:
        sock.detach()  # the descriptor is not this object's to close


def _open_fds() -> list[int]:
    """This process's open descriptors (from ``/proc/self/fd``; empty where there is no ``/proc``)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return []


def close_inherited(inherited: Inherited, keep: Collection[int]) -> None:
    """In a freshly forked worker: close the registered descriptors and the store sockets, except ``keep``.

    Args:
        inherited: the :func:`snapshot` taken in the kernel just before the fork.
        keep: the worker's own descriptors (its pipe ends), never closed here.
    """
    for fd in inherited.fds.difference(keep):
        try:
            os.close(fd)
        except OSError:  # already closed in the kernel between the snapshot and the fork
            pass
    if not inherited.ports:
        return
    for fd in _open_fds():
        if fd > 2 and fd not in keep and _local_port(fd) in inherited.ports:
            try:
                os.close(fd)
            except OSError:
                pass


def shut_down(fd: int, how: int, inode: int | None = None) -> None:
    """Shut down the socket behind descriptor ``fd`` without closing ``fd`` (``socket.SHUT_WR``: the peer reads end
    of file; ``socket.SHUT_RDWR``: a thread blocked reading it also returns). Left alone: a closed descriptor, one
    that is no socket, and, with ``inode``, one now naming another file than the socket it named."""
    try:
        copy = os.dup(fd)
    except OSError:
        return
    try:
        sock = socket.socket(fileno=copy)
    except OSError:  # not a socket
        os.close(copy)
        return
    try:
        if inode is None or os.fstat(sock.fileno()).st_ino == inode:
            sock.shutdown(how)
    except OSError:  # not connected, or already shut down
        pass
    finally:
        sock.close()
