"""The kernel's end of a relayed run (:mod:`.relay`): the workers' streams as local sockets, fed by Ray calls.

:class:`RelayChannel` stands where a :class:`~notebook_accel.launcher.placement.remote.link.BackChannel` stands on the
direct path and yields the same :class:`~notebook_accel.launcher.placement.remote.link.Dialed` streams, so the
placement, the handles, the watch and the supervisor do not know the difference: each stream the relay reports is
one end of a local socket pair, and a pump thread writes into the other end what the relay's long polls return (an
end of file as an end of file). A second thread sends what the kernel writes on a rank's control stream (its stop
signals) to the relay at once. When the relay fails or cannot be reached, :attr:`RelayChannel.error` says so and
every stream ends, so the watch ends the run with that reason instead of guessing at the nodes.
"""

from __future__ import annotations

import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from queue import Empty, Queue
from typing import Any

from notebook_accel.launcher.placement.remote.link import Dialed

__all__ = ["RelayChannel", "POLL_SECONDS", "start_relay"]

POLL_SECONDS = 0.5  # the longest one pull waits in the relay when nothing comes
_CALL_SECONDS = 30.0  # a pull or a push that takes longer than this (plus the poll) means the relay is lost
_BUFFER = 1 << 20


def start_relay(ray: Any, secret: bytes, expected: int, connect_seconds: float) -> Any:
    """Start the run's relay actor on the cluster's head node (no CPU reserved: it only moves bytes); returns the
    actor handle at once (its address comes with :class:`RelayChannel`)."""
    from notebook_accel.launcher.placement.ray.relay import RunRelay

    remote = ray.remote(RunRelay).options(num_cpus=0, max_concurrency=4, max_restarts=0,
                                          resources={"node:__internal_head__": 0.001})
    return remote.remote(secret, expected, connect_seconds)


class RelayChannel:
    """The run's streams through the relay actor ``actor`` (made by :func:`start_relay` with ``secret``).

    Attributes:
        address: where the workers dial (the relay's listener); ``secret``: the run's secret.
        error: why the relay's streams ended early (``None`` while it works).
    """

    def __init__(self, ray: Any, actor: Any, secret: bytes, address_timeout: float = 120.0) -> None:
        self.ray = ray
        self.actor = actor
        self.secret = secret
        host, port = ray.get(actor.address.remote(), timeout=address_timeout)
        self.address: tuple[str, int] = (str(host), int(port))
        self.error: str | None = None
        self._opened: Queue[Dialed] = Queue()
        self._ours: dict[tuple[int, bytes], socket.socket] = {}  # our end of each stream's socket pair
        self._controls = selectors.DefaultSelector()
        self._halt = threading.Event()
        self._pump = threading.Thread(target=self._pull_loop, name="notebook-accel-relay-in", daemon=True)
        self._out = threading.Thread(target=self._push_loop, name="notebook-accel-relay-out", daemon=True)
        self._pump.start()
        self._out.start()

    def accept(self, expected: int, deadline: float, alive: Callable[[], None] | None = None) -> Iterator[Dialed]:
        """Yield the streams as the relay reports them, until ``expected`` came (``alive`` called about every 0.2 s).

        Raises:
            TimeoutError: fewer came by the deadline, or the relay failed (its reason).
        """
        got = 0
        while got < expected:
            if self.error is not None:
                raise TimeoutError(f"{got} of {expected} worker streams reached the relay: {self.error}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{got} of {expected} worker streams reached the relay in time")
            try:
                dialed = self._opened.get(timeout=0.2)
            except Empty:
                if alive is not None:
                    alive()
                continue
            got += 1
            yield dialed

    def close(self) -> None:
        """Nothing: on the direct path this stops listening; here the relay stops at :meth:`end`."""

    def end(self) -> None:
        """Stop the pumps, close our ends and the relay's streams, and kill the relay actor. Idempotent."""
        if self._halt.is_set():
            return
        self._halt.set()
        try:
            self.actor.close.remote()
        except Exception:  # noqa: BLE001 - the relay may be gone already
            pass
        for thread in (self._pump, self._out):
            if thread is not threading.current_thread():
                thread.join(timeout=POLL_SECONDS + 2.0)
        for sock in list(self._ours.values()):
            sock.close()
        self._ours.clear()
        self._controls.close()
        try:
            self.ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass

    def _pull_loop(self) -> None:
        """Write what the relay's pulls return into the streams' socket pairs, until :meth:`end` or a failure."""
        while not self._halt.is_set():
            try:
                chunks = self.ray.get(self.actor.pull.remote(POLL_SECONDS), timeout=POLL_SECONDS + _CALL_SECONDS)
            except Exception as e:  # noqa: BLE001 - the relay died, or this kernel lost the cluster
                if not self._halt.is_set():
                    self._fail(f"the relay of this run's streams through the cluster failed ({type(e).__name__}: "
                               f"{_first_line(e)})")
                return
            for what, rank, kind, data in chunks:
                if what == "open":
                    self._open(rank, kind)
                elif what == "data":
                    self._write(rank, kind, data or b"")
                elif what == "end":
                    self._end_ours(rank, kind)
                else:
                    self._fail((data or b"").decode(errors="replace"))
                    return

    def _open(self, rank: int, kind: bytes) -> None:
        theirs, ours = socket.socketpair()
        for sock in (theirs, ours):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER)
        self._ours[(rank, kind)] = ours
        if kind == b"C":
            ours.setblocking(False)
            self._controls.register(ours, selectors.EVENT_READ, rank)
        self._opened.put(Dialed(rank, kind, theirs))

    def _write(self, rank: int, kind: bytes, data: bytes) -> None:
        ours = self._ours.get((rank, kind))
        if ours is None:
            return
        try:
            if kind == b"C":  # non-blocking (the out pump reads it): wait for room here
                _send_waiting(ours, data)
            else:
                ours.sendall(data)
        except OSError:  # the kernel closed its end: nothing more goes there
            self._end_ours(rank, kind)

    def _end_ours(self, rank: int, kind: bytes) -> None:
        ours = self._ours.get((rank, kind))
        if ours is None:
            return
        try:
            ours.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _fail(self, reason: str) -> None:
        """Record why the relay ended and end every stream (the watch then ends the run with the reason)."""
        if self.error is None:
            self.error = reason
        for key in list(self._ours):
            self._end_ours(*key)

    def _push_loop(self) -> None:
        """Send what the kernel writes on each control stream to the relay, at once and in order."""
        while not self._halt.is_set():
            try:
                events = self._controls.select(0.2) if self._controls.get_map() else []
            except (OSError, ValueError):
                events = []
            if not events:
                if not self._controls.get_map():
                    time.sleep(0.05)
                continue
            for key, _ in events:
                sock, rank = key.fileobj, int(key.data)
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                try:
                    if data:
                        self.ray.get(self.actor.push.remote(rank, data), timeout=_CALL_SECONDS)
                    else:  # the kernel closed the rank's control stream
                        self._controls.unregister(sock)
                        self.actor.end_stream.remote(rank, b"C")
                except Exception:  # noqa: BLE001 - the pull loop reports a lost relay
                    if (rank, b"C") in self._ours:
                        try:
                            self._controls.unregister(sock)
                        except (KeyError, ValueError):
                            pass


def _send_waiting(sock: socket.socket, data: bytes) -> None:
    """Send all of ``data`` on a non-blocking socket, waiting for room as needed."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except (BlockingIOError, InterruptedError):
            select.select([], [sock], [], 1.0)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
