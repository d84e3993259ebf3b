"""One ordered output pipe per worker: stdout as it is, Python's stderr in frames, demultiplexed by the launcher.

The order in which a worker wrote to stdout and stderr is only known where both go through the same pipe:
two pipes are read whenever the launcher gets to them, so a warning and the print before it can swap. So a
worker's fd 1 *and* its ``sys.stderr`` write into the same pipe (the *ordered pipe*); stderr's text is wrapped in
frames so the launcher can tell it apart::

    MARK (8 bytes) | payload length (2 bytes, big-endian) | payload (at most FRAME_PAYLOAD bytes)

A frame is written with one ``write`` of at most ``PIPE_BUF`` bytes, which Linux and POSIX make atomic: a thread
printing at the same moment cannot split it. C code writing to fd 1 (``printf``) lands in the same pipe, in
order, unframed. Only C-level writes to fd 2 (the C++ runtime's warnings, ``faulthandler``, a subprocess's
stderr) keep a pipe of their own, read as stderr; their order relative to the ordered pipe is the order in
which the launcher reads them. The mark starts with ESC and holds NUL bytes, so text never contains it by
accident.

Example:
    >>> d = Demux()
    >>> d.feed(b"out 1\\n" + frame(b"err\\n")[:5]), d.feed(frame(b"err\\n")[5:] + b"out 2\\n")
    ([('stdout', b'out 1\\n')], [('stderr', b'err\\n'), ('stdout', b'out 2\\n')])
"""

from __future__ import annotations

import io
import os
import select
from typing import Any, Literal

__all__ = ["MARK", "FRAME_PAYLOAD", "frame", "FramedWriter", "Demux", "Segment"]

MARK = b"\x1b\x00NBA\x00e\x00"
_HEADER = len(MARK) + 2
_PIPE_BUF = getattr(select, "PIPE_BUF", 4096)  # writes up to this size are atomic on a pipe
FRAME_PAYLOAD = _PIPE_BUF - _HEADER

Segment = tuple[Literal["stdout", "stderr"], bytes]


def frame(payload: bytes) -> bytes:
    """One stderr frame (``payload`` must be at most :data:`FRAME_PAYLOAD` bytes)."""
    return MARK + len(payload).to_bytes(2, "big") + payload


class FramedWriter(io.RawIOBase):
    """The raw stream under a worker's ``sys.stderr``: every write goes to the ordered pipe as frames.

    Args:
        fd: the worker's private descriptor of its ordered pipe (a duplicate of fd 1, so a user's
            ``os.dup2(devnull, 1)`` cannot silence stderr).
        fileno: what :meth:`fileno` reports: 2, so code that writes to ``sys.stderr.fileno()`` from C
            (``faulthandler``, ``subprocess``) uses the real fd 2.
    """

    def __init__(self, fd: int, fileno: int = 2) -> None:
        super().__init__()
        self._fd = fd
        self._fileno = fileno

    def writable(self) -> bool:
        """Always writable."""
        return True

    def write(self, data: Any) -> int:  # any bytes-like object
        """Send ``data`` as frames of at most ``PIPE_BUF`` bytes each; returns ``len(data)``."""
        view = memoryview(data).cast("B")
        for start in range(0, len(view), FRAME_PAYLOAD):
            chunk = frame(bytes(view[start : start + FRAME_PAYLOAD]))
            written = 0
            while written < len(chunk):  # a blocking pipe takes a small write whole; loop for safety
                written += os.write(self._fd, chunk[written:])
        return len(view)

    def fileno(self) -> int:
        """The file descriptor C code should use for stderr (2)."""
        return self._fileno

    def isatty(self) -> bool:
        """A pipe, not a terminal."""
        return False


class Demux:
    """Splits the bytes of an ordered pipe back into stdout and stderr segments, in the order written.

    Bytes that may be the start of a frame cut by the read are held until the next :meth:`feed`.
    """

    def __init__(self) -> None:
        self._held = b""

    def feed(self, data: bytes) -> list[Segment]:
        """Add bytes read from the pipe; return the complete segments they make, adjacent ones of a stream merged."""
        buf = self._held + data if self._held else data
        out: list[Segment] = []
        pos = 0
        while True:
            at = buf.find(MARK, pos)
            if at < 0:
                keep = _mark_prefix_at_end(buf, pos)
                _add(out, "stdout", buf[pos : len(buf) - keep])
                self._held = buf[len(buf) - keep :]
                return out
            _add(out, "stdout", buf[pos:at])
            size = int.from_bytes(buf[at + len(MARK) : at + _HEADER], "big")
            end = at + _HEADER + size
            if at + _HEADER > len(buf) or end > len(buf):
                self._held = buf[at:]
                return out
            _add(out, "stderr", buf[at + _HEADER : end])
            pos = end

    def finish(self) -> list[Segment]:
        """End of the pipe: what is held is passed on as stdout (a frame cut short by a killed worker)."""
        held, self._held = self._held, b""
        if held.startswith(MARK) and len(held) >= _HEADER:
            return [("stderr", held[_HEADER:])] if len(held) > _HEADER else []
        return [("stdout", held)] if held else []


def _add(out: list[Segment], stream: Literal["stdout", "stderr"], data: bytes) -> None:
    """Append a segment, merged with the previous one when it is of the same stream."""
    if not data:
        return
    if out and out[-1][0] == stream:
        out[-1] = (stream, out[-1][1] + data)
    else:
        out.append((stream, data))


def _mark_prefix_at_end(buf: bytes, start: int) -> int:
    """How many bytes at the end of ``buf[start:]`` could be the beginning of :data:`MARK`."""
    for size in range(min(len(MARK) - 1, len(buf) - start), 0, -1):
        if buf.endswith(MARK[:size]):
            return size
    return 0
