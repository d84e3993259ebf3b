"""The back channel between a remote worker (a Ray actor's rank, a Slurm task's rank) and the kernel: four TCP
streams per rank, each opened by the worker and authenticated both ways with the run's secret.

The kernel listens on its address towards the cluster (:class:`BackChannel`); each worker dials in four times, all
at once (:mod:`.dial`), once per :data:`KINDS` (``E``: its events, ``O``: its ordered output, fd 1 and ``sys.stderr``
frames, ``2``: C-level stderr, ``C``: control, the worker's heartbeats and samples one way and the kernel's stop
signals the other). Before a stream carries anything, each side proves it holds the run's 32-byte secret with an HMAC
over the other's fresh nonce (:func:`_prove`), so no other cluster user can inject events into a run or receive its
output and signals. The secret reaches the workers through the placement (Ray's actor arguments, the Slurm step's
stdin). Everything after the handshake is what a pipe would carry, so the supervisor reads these sockets as it reads a
forked worker's pipes.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import pickle
import secrets
import selectors
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from notebook_accel.errors import LaunchError

__all__ = ["KINDS", "BackChannel", "Dialed", "send_frame", "FrameReader", "keep_alive"]

KINDS = (b"E", b"O", b"2", b"C")
_NONCE = 32
_HELLO = struct.Struct("!I1s32s")  # rank, kind, the worker's nonce
_FRAME = struct.Struct("!I")
_HANDSHAKE_SECONDS = 5.0  # for one dialler's whole handshake (a worker's takes one round trip)
_MAX_PENDING = 64  # handshakes in progress at once; more close the oldest
_ALIVE_SECONDS = 0.2
_MAX_FRAME = 1 << 20  # a control frame (a heartbeat, a sample) is tiny; anything bigger is not from our worker


def _prove(secret: bytes, role: bytes, nonce: bytes, rank: int, kind: bytes) -> bytes:
    """The HMAC that shows ``role`` holds ``secret``, bound to the other side's ``nonce`` and to the stream."""
    return hmac.new(secret, role + nonce + struct.pack("!I", rank) + kind, hashlib.sha256).digest()


def keep_alive(sock: socket.socket, idle: int = 5, interval: int = 2, count: int = 3) -> None:
    """Ask the kernel's TCP to probe an idle peer, so a vanished host ends a blocked read instead of hanging it."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count)):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


@dataclass
class Dialed:
    """One authenticated stream the kernel accepted: who dialled (``rank``, ``kind``) and the socket."""

    rank: int
    kind: bytes
    sock: socket.socket


class BackChannel:
    """The kernel's listener for one run's workers.

    Args:
        host: the kernel's address as the cluster's nodes reach it (or the Ray relay's on the cluster,
            :mod:`notebook_accel.launcher.placement.ray.relay`).
        secret: the run's secret; a fresh one when not given.

    Example:
        >>> channel = BackChannel("127.0.0.1")
        >>> len(channel.secret), channel.address[0]
        (32, '127.0.0.1')
        >>> channel.close()
    """

    def __init__(self, host: str, secret: bytes | None = None) -> None:
        self.secret = secrets.token_bytes(32) if secret is None else secret
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.bind((host, 0))
            self._listener.listen(256)
        except OSError as e:
            self._listener.close()
            raise LaunchError(f"could not listen on {host} for the workers' back channel ({e}); this kernel must "
                              "be reachable from the cluster's nodes (run the notebook on a node of the cluster, or "
                              "where the nodes can connect to it)") from e
        self._listener.setblocking(False)
        self.address: tuple[str, int] = (host, int(self._listener.getsockname()[1]))

    def accept(self, expected: int, deadline: float, alive: Any = None) -> Iterator[Dialed]:
        """Yield authenticated streams until ``expected`` arrived; a dialler that fails the handshake is dropped.

        The handshakes progress together in one ``selectors`` loop (no threads): each pending dialler has
        :data:`_HANDSHAKE_SECONDS` to finish its own and is closed at its first bad byte, and at most
        :data:`_MAX_PENDING` are pending at once (a flood closes the oldest), so silent or garbage connections from
        elsewhere on the cluster's network cannot hold up the workers' streams. A stream yielded is blocking, has
        no timeout and has TCP keep-alive set; diallers still pending when this ends are closed.

        Args:
            expected: how many streams to wait for.
            deadline: ``time.monotonic()`` by which they must have arrived.
            alive: called about every 0.2 s while waiting (it raises to end the wait: a worker died before dialling).

        Raises:
            TimeoutError: fewer arrived by the deadline.
        """
        got = 0
        pending: dict[socket.socket, _Pending] = {}  # in the order they were accepted: the first is the oldest
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        next_alive = time.monotonic() + _ALIVE_SECONDS
        try:
            while got < expected:
                now = time.monotonic()
                if now >= deadline:
                    raise TimeoutError(f"{got} of {expected} worker streams reached the kernel in time")
                wait = min(deadline, next_alive, *(p.deadline for p in pending.values())) - now
                ready: list[Dialed] = []
                for key, events in selector.select(max(0.0, wait)):
                    if key.fileobj is self._listener:
                        self._take_new(selector, pending)
                        continue
                    handshake: _Pending = key.data
                    if pending.get(handshake.sock) is not handshake:
                        continue  # dropped earlier in this round (a flood pushed it out)
                    if not handshake.advance(events):
                        self._drop(selector, pending, handshake.sock)
                    elif handshake.done:
                        selector.unregister(handshake.sock)
                        del pending[handshake.sock]
                        ready.append(handshake.stream())
                    elif handshake.wants() != key.events:
                        selector.modify(handshake.sock, handshake.wants(), handshake)
                now = time.monotonic()
                for sock in [s for s, p in pending.items() if p.deadline <= now]:
                    self._drop(selector, pending, sock)  # silent or slow: its time is up
                for dialed in ready:
                    if got < expected:
                        got += 1
                        yield dialed
                    else:
                        dialed.sock.close()
                if time.monotonic() >= next_alive:
                    next_alive = time.monotonic() + _ALIVE_SECONDS
                    if alive is not None:
                        alive()
        finally:
            for sock in list(pending):
                self._drop(selector, pending, sock)
            selector.close()

    def _take_new(self, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending]) -> None:
        """Accept every dialler waiting at the listener and start its handshake (send our nonce)."""
        for _ in range(_MAX_PENDING):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # the dialler gave up before we took it (ECONNABORTED), or no descriptor left
                if e.errno in (errno.EMFILE, errno.ENFILE) and pending:
                    self._drop(selector, pending, next(iter(pending)))  # free one for the next try
                return
            if len(pending) >= _MAX_PENDING:
                self._drop(selector, pending, next(iter(pending)))  # a flood: the oldest pending one goes
            handshake = _Pending(sock, self.secret, time.monotonic() + _HANDSHAKE_SECONDS)
            if handshake.advance(selectors.EVENT_WRITE):
                pending[sock] = handshake
                selector.register(sock, handshake.wants(), handshake)
            else:
                sock.close()

    @staticmethod
    def _drop(selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending], sock: socket.socket) -> None:
        """Forget a pending dialler and close its socket."""
        pending.pop(sock, None)
        try:
            selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()

    def close(self) -> None:
        """Stop listening (the accepted streams are their owners' to close). Idempotent."""
        self._listener.close()


class _Pending:
    """One dialler's handshake, driven by readiness events on its non-blocking socket.

    The kernel sends its nonce, reads the worker's hello and proof (the kind is checked as soon as its byte arrives,
    the proof once complete), then sends its own proof; any bad byte, an early end or an error ends it.
    """

    def __init__(self, sock: socket.socket, secret: bytes, deadline: float) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.deadline = deadline
        self._secret = secret
        self._nonce = secrets.token_bytes(_NONCE)
        self._outbox = self._nonce
        self._inbox = b""
        self._hello: tuple[int, bytes] | None = None  # (rank, kind) once the proof checked out

    @property
    def done(self) -> bool:
        """Whether both proofs went through: the stream can be handed out."""
        return self._hello is not None and not self._outbox

    def wants(self) -> int:
        """The events to wait for: writable while something is left to send, else readable."""
        return selectors.EVENT_WRITE if self._outbox else selectors.EVENT_READ

    def advance(self, events: int) -> bool:
        """Send and read what the socket allows now; ``False`` when the dialler failed (the caller closes it)."""
        try:
            if not self._outbox and self._hello is None and events & selectors.EVENT_READ:
                chunk = self.sock.recv(_HELLO.size + 32 - len(self._inbox))
                if not chunk:
                    return False
                self._inbox += chunk
                if not self._check():
                    return False
            if self._outbox:  # the nonce at first; the proof, at once, when the worker's checked out
                sent = self.sock.send(self._outbox)
                self._outbox = self._outbox[sent:]
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return True

    def _check(self) -> bool:
        """Whether what arrived so far can still be a worker's hello; sets the reply once it is complete."""
        if len(self._inbox) > 4 and self._inbox[4:5] not in KINDS:
            return False
        if len(self._inbox) < _HELLO.size + 32:
            return True
        rank, kind, theirs = _HELLO.unpack(self._inbox[:_HELLO.size])
        if not hmac.compare_digest(self._inbox[_HELLO.size:], _prove(self._secret, b"worker", self._nonce, rank, kind)):
            return False
        self._hello = (rank, kind)
        self._outbox = _prove(self._secret, b"kernel", theirs, rank, kind)
        return True

    def stream(self) -> Dialed:
        """The authenticated stream, blocking with no timeout and with keep-alive set, as its owner expects."""
        assert self._hello is not None
        self.sock.setblocking(True)
        keep_alive(self.sock)
        return Dialed(self._hello[0], self._hello[1], self.sock)


def send_frame(sock: socket.socket, payload: Any) -> None:
    """Send one pickled control frame (length first)."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_FRAME.pack(len(data)) + data)


class FrameReader:
    """Reassembles the control frames of one stream from what arrives (never blocks)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""
        self.eof = False

    def read(self) -> list[Any]:
        """The frames completed by what the socket holds now; sets :attr:`eof` when the stream ended."""
        try:
            data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return []
        self._buffer += data
        frames: list[Any] = []
        while len(self._buffer) >= _FRAME.size:
            (size,) = _FRAME.unpack_from(self._buffer)
            if size > _MAX_FRAME:
                self.eof = True
                return frames
            if len(self._buffer) < _FRAME.size + size:
                break
            frames.append(pickle.loads(self._buffer[_FRAME.size:_FRAME.size + size]))
            self._buffer = self._buffer[_FRAME.size + size:]
        return frames


def detach_fd(sock: socket.socket, blocking: bool) -> int:
    """The socket's descriptor, owned by the caller from now on (closed with ``os.close``)."""
    sock.setblocking(blocking)
    fd = sock.detach()
    os.set_blocking(fd, blocking)
    return fd
