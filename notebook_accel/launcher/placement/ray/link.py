"""The back channel between a Ray worker and the kernel: four TCP streams per rank, each opened by the worker and
authenticated both ways with the run's secret.

The kernel listens on its address towards the cluster (:class:`BackChannel`); each worker dials in four times, once
per :data:`KINDS` (``E``: its events, ``O``: its ordered output, fd 1 and ``sys.stderr`` frames, ``2``: C-level
stderr, ``C``: control, the worker's heartbeats and samples one way and the kernel's stop signals the other). Before
a stream carries anything, each side proves it holds the run's 32-byte secret with an HMAC over the other's fresh
nonce (:func:`_prove`), so no other cluster user can inject events into a run or receive its output and signals. The
secret reaches the workers through Ray with the actors' arguments. Everything after the handshake is what a pipe
would carry, so the supervisor reads these sockets as it reads a forked worker's pipes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import secrets
import select
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from notebook_accel.errors import LaunchError

__all__ = ["KINDS", "BackChannel", "Dialed", "connect_back", "send_frame", "FrameReader", "keep_alive"]

KINDS = (b"E", b"O", b"2", b"C")
_NONCE = 32
_HELLO = struct.Struct("!I1s32s")  # rank, kind, the worker's nonce
_FRAME = struct.Struct("!I")
_HANDSHAKE_SECONDS = 10.0
_MAX_FRAME = 1 << 20  # a control frame (a heartbeat, a sample) is tiny; anything bigger is not from our worker


def _prove(secret: bytes, role: bytes, nonce: bytes, rank: int, kind: bytes) -> bytes:
    """The HMAC that shows ``role`` holds ``secret``, bound to the other side's ``nonce`` and to the stream."""
    return hmac.new(secret, role + nonce + struct.pack("!I", rank) + kind, hashlib.sha256).digest()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock`` (its timeout applies); raises ``ConnectionError`` on an early end."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the other side closed the connection during the handshake")
        data += chunk
    return data


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
        host: the kernel's address as the cluster's nodes reach it.

    Example:
        >>> channel = BackChannel("127.0.0.1")
        >>> len(channel.secret), channel.address[0]
        (32, '127.0.0.1')
        >>> channel.close()
    """

    def __init__(self, host: str) -> None:
        self.secret = secrets.token_bytes(32)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.bind((host, 0))
            self._listener.listen(256)
        except OSError as e:
            self._listener.close()
            raise LaunchError(f"could not listen on {host} for the Ray workers' back channel ({e}); this kernel must "
                              "be reachable from the cluster's nodes (run the notebook on a node of the cluster, or "
                              "where the nodes can connect to it)") from e
        self._listener.setblocking(False)
        self.address: tuple[str, int] = (host, int(self._listener.getsockname()[1]))

    def accept(self, expected: int, deadline: float, alive: Any = None) -> Iterator[Dialed]:
        """Yield authenticated streams until ``expected`` arrived; a dialler that fails the handshake is dropped.

        Args:
            expected: how many streams to wait for.
            deadline: ``time.monotonic()`` by which they must have arrived.
            alive: called about every 0.2 s while waiting (it raises to end the wait: a worker died before dialling).

        Raises:
            TimeoutError: fewer arrived by the deadline.
        """
        got = 0
        while got < expected:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{got} of {expected} worker streams reached the kernel in time")
            ready, _, _ = select.select([self._listener], [], [], min(left, 0.2))
            if alive is not None:
                alive()
            if not ready:
                continue
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            dialed = self._handshake(sock)
            if dialed is not None:
                got += 1
                yield dialed

    def _handshake(self, sock: socket.socket) -> Dialed | None:
        """Check the dialler's proof and send ours; ``None`` (socket closed) when it fails."""
        try:
            sock.setblocking(True)
            sock.settimeout(_HANDSHAKE_SECONDS)
            nonce = secrets.token_bytes(_NONCE)
            sock.sendall(nonce)
            rank, kind, theirs = _HELLO.unpack(_read_exactly(sock, _HELLO.size))
            proof = _read_exactly(sock, 32)
            if kind not in KINDS or not hmac.compare_digest(proof, _prove(self.secret, b"worker", nonce, rank, kind)):
                raise ConnectionError("bad proof")
            sock.sendall(_prove(self.secret, b"kernel", theirs, rank, kind))
            sock.settimeout(None)
            keep_alive(sock)
            return Dialed(rank, kind, sock)
        except (OSError, ConnectionError, struct.error):
            sock.close()
            return None

    def close(self) -> None:
        """Stop listening (the accepted streams are their owners' to close). Idempotent."""
        self._listener.close()


def connect_back(address: tuple[str, int], secret: bytes, rank: int, kind: bytes,
                 timeout: float = 30.0) -> socket.socket:
    """In a worker: dial the kernel, prove the secret, check the kernel's proof; return the connected socket.

    Raises:
        ConnectionError: the kernel cannot be reached, or it could not prove the run's secret.
    """
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError as e:
        raise ConnectionError(f"rank {rank} could not reach the kernel at {address[0]}:{address[1]} ({e}); the "
                              "notebook's machine must accept connections from the cluster's nodes") from e
    try:
        nonce = _read_exactly(sock, _NONCE)
        mine = secrets.token_bytes(_NONCE)
        sock.sendall(_HELLO.pack(rank, kind, mine) + _prove(secret, b"worker", nonce, rank, kind))
        proof = _read_exactly(sock, 32)
        if not hmac.compare_digest(proof, _prove(secret, b"kernel", mine, rank, kind)):
            raise ConnectionError(f"the listener at {address[0]}:{address[1]} is not this run's kernel")
        sock.settimeout(None)
        return sock
    except BaseException:
        sock.close()
        raise


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
