"""The worker's side of the back channel (:mod:`.link`): a rank dials the kernel once per stream kind and proves the
run's secret on each, all its streams at once.

The streams connect and shake hands together in one ``selectors`` loop in the calling thread (no thread is started:
the rank is a process just forked), so the kernel's accept loop, which drives every pending handshake together, serves
a rank's four streams in the round trips of one. On a busy machine each round trip waits for the kernel's loop to be
scheduled: one after another, those waits were what a warm launch spent here.
"""

from __future__ import annotations

import errno
import hmac
import os
import secrets
import selectors
import socket
import time

from notebook_accel.launcher.placement.remote.link import _HELLO, _NONCE, KINDS, _prove

__all__ = ["connect_all", "connect_back"]

_PROOF = 32  # an HMAC-SHA256


def _unreachable(rank: int, address: tuple[str, int], error: OSError) -> ConnectionError:
    """The error of a kernel that cannot be reached, naming the rank, the address and the fix."""
    return ConnectionError(f"rank {rank} could not reach the kernel at {address[0]}:{address[1]} ({error}); the "
                           "notebook's machine must accept connections from the cluster's nodes")


class _Dialling:
    """One stream on its way to authenticated: connecting, then reading the kernel's nonce, sending our hello and
    proof, reading the kernel's proof (never a byte more: what follows is the stream's)."""

    def __init__(self, address: tuple[str, int], secret: bytes, rank: int, kind: bytes) -> None:
        self.address, self.kind, self._secret, self._rank = address, kind, secret, rank
        try:
            family, _, proto, _, target = socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM)[0]
        except OSError as e:
            raise _unreachable(rank, address, e) from e
        self.sock = socket.socket(family, socket.SOCK_STREAM, proto)
        self.sock.setblocking(False)
        code = self.sock.connect_ex(target)
        if code not in (0, errno.EINPROGRESS):
            self.sock.close()
            error = OSError(code, os.strerror(code))
            raise _unreachable(rank, address, error) from error
        self.connected = False
        self.done = False
        self._inbox = b""
        self._mine = b""  # our nonce, once our hello went out

    def advance(self) -> None:
        """Go on as far as the socket allows now.

        Raises:
            ConnectionError: the kernel cannot be reached, closed the stream, or could not prove the run's secret.
        """
        if not self.connected:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                error = OSError(code, os.strerror(code))
                raise _unreachable(self._rank, self.address, error) from error
            self.connected = True
            return
        try:
            chunk = self.sock.recv((_NONCE if not self._mine else _PROOF) - len(self._inbox))
        except (BlockingIOError, InterruptedError):
            return
        if not chunk:
            raise ConnectionError("the other side closed the connection during the handshake")
        self._inbox += chunk
        if not self._mine and len(self._inbox) == _NONCE:
            self._mine = secrets.token_bytes(_NONCE)
            hello = _HELLO.pack(self._rank, self.kind, self._mine)
            self.sock.sendall(hello + _prove(self._secret, b"worker", self._inbox, self._rank, self.kind))  # 101 bytes
            self._inbox = b""
        elif self._mine and len(self._inbox) == _PROOF:
            if not hmac.compare_digest(self._inbox, _prove(self._secret, b"kernel", self._mine, self._rank, self.kind)):
                raise ConnectionError(f"the listener at {self.address[0]}:{self.address[1]} is not this run's kernel")
            self.done = True


def connect_all(address: tuple[str, int], secret: bytes, rank: int, kinds: tuple[bytes, ...] = KINDS,
                timeout: float = 30.0) -> dict[bytes, socket.socket]:
    """In a worker: dial the kernel once per kind, prove the secret, check the kernel's proof, all streams at once;
    the connected sockets (blocking, no timeout) by kind.

    Raises:
        ConnectionError: the kernel cannot be reached (within ``timeout``), or it could not prove the run's secret;
        TimeoutError: connected, the handshakes did not end within ``timeout``. Whatever failed, every stream opened
        is closed first.
    """
    deadline = time.monotonic() + timeout
    dialling: list[_Dialling] = []
    selector = selectors.DefaultSelector()
    try:
        for kind in kinds:
            dialling.append(_Dialling(address, secret, rank, kind))
            selector.register(dialling[-1].sock, selectors.EVENT_WRITE, dialling[-1])
        waiting = len(dialling)
        while waiting:
            ready = selector.select(max(0.0, deadline - time.monotonic()))
            if not ready and time.monotonic() >= deadline:
                if not all(one.connected for one in dialling):
                    raise _unreachable(rank, address, TimeoutError("timed out"))
                raise TimeoutError(f"rank {rank}'s handshake with the kernel at {address[0]}:{address[1]} did not "
                                   f"end within {timeout:g} s")
            for key, _ in ready:
                one: _Dialling = key.data
                was_connected = one.connected
                one.advance()
                if one.done:
                    selector.unregister(one.sock)
                    waiting -= 1
                elif one.connected and not was_connected:
                    selector.modify(one.sock, selectors.EVENT_READ, one)
        for one in dialling:
            one.sock.settimeout(None)
        return {one.kind: one.sock for one in dialling}
    except BaseException:
        for one in dialling:
            one.sock.close()
        raise
    finally:
        selector.close()


def connect_back(address: tuple[str, int], secret: bytes, rank: int, kind: bytes,
                 timeout: float = 30.0) -> socket.socket:
    """In a worker: one stream of :func:`connect_all`.

    Raises:
        ConnectionError: the kernel cannot be reached, or it could not prove the run's secret.
    """
    return connect_all(address, secret, rank, (kind,), timeout)[kind]
