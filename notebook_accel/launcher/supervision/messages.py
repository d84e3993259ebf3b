"""Reading the workers' event messages in the kernel without ever blocking on a partial one.

A worker sends each message with ``Connection.send_bytes`` (a 4-byte length, or ``-1`` and an 8-byte length
for messages over 2 GiB, then the bytes). ``Connection.recv_bytes`` would block until a whole message is in;
a worker killed in the middle of sending one (the out-of-memory killer, during a large result) leaves a
partial message, and when a process the worker forked still holds the pipe open, the rest never comes and
no end of file either: the cell would hang past any ``timeout=``. Here the pipe is read without blocking,
whatever is there is kept, and only complete messages come out; what remains when the worker is gone is
dropped (its exit is reported instead).
"""

from __future__ import annotations

import os
import struct

__all__ = ["MessageReader"]

_CHUNK = 1 << 20
_BUDGET = 16 << 20  # bytes read per call, so other workers' pipes are served while a large result arrives


class MessageReader:
    """Complete messages from the read end ``fd`` of a worker's event pipe (made non-blocking here).

    Attributes:
        eof: the pipe reached end of file (every write end is closed).
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.eof = False
        self._buffer = bytearray()
        self._needed: int | None = None  # length of the message being read, once its header is in

    @property
    def partial(self) -> bool:
        """Part of a message was read and the rest has not come."""
        return bool(self._buffer) or self._needed is not None

    def read(self, budget: int = _BUDGET) -> list[bytearray]:
        """The messages completed by what can be read now, reading at most about ``budget`` bytes."""
        messages: list[bytearray] = []
        while budget > 0 and not self.eof:
            try:
                chunk = os.read(self.fd, min(budget, _CHUNK))
            except BlockingIOError:
                break
            except OSError:  # the descriptor went bad: nothing more will come
                chunk = b""
            if not chunk:
                self.eof = True
                break
            budget -= len(chunk)
            self._buffer += chunk
            messages.extend(self._complete())
        return messages

    def _complete(self) -> list[bytearray]:
        """Cut every complete message off the front of the buffer."""
        out: list[bytearray] = []
        while True:
            if self._needed is None:
                if len(self._buffer) < 4:
                    break
                (size,) = struct.unpack("!i", self._buffer[:4])
                head = 4
                if size == -1:
                    if len(self._buffer) < 12:
                        break
                    (size,) = struct.unpack("!Q", self._buffer[4:12])
                    head = 12
                del self._buffer[:head]
                self._needed = size
            if len(self._buffer) < self._needed:
                break
            out.append(self._buffer[:self._needed])
            del self._buffer[:self._needed]
            self._needed = None
        return out
