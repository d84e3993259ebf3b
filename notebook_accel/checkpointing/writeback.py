"""Start a checkpoint file's writeback while it is still being written, so that the fsync ending the write waits for
its last few MiB instead of the whole file.

A checkpoint file is written front to back and then fsync'd (:mod:`~notebook_accel.checkpointing.atomic`). Left
alone, the kernel keeps every written byte as a dirty page until that fsync (its own flusher wakes only after
seconds, or once dirty pages pile up, and then throttles the writer): the disk idles while torch serialises, and the
fsync then waits for the whole file. :class:`WritebackStream` asks the kernel to start writing out every
:data:`KICK_BYTES` as soon as they are written (Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which starts the
writeback of a range and does not wait for it), so the disk works while the rest is serialised, and the final fsync
only waits for the tail. Measured on this project's machine, 572 MiB of weights and AdamW state: the two files'
fsyncs took 0.26 s after a plain write, 0.02 s after one through this stream.

Durability is unchanged: the fsync still comes, and it alone makes the file durable. Where ``sync_file_range`` does
not exist (not Linux), or a file system refuses it, the stream only passes the bytes on.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable
from typing import IO, Any

__all__ = ["KICK_BYTES", "WritebackStream"]

KICK_BYTES = 8 << 20  # written bytes that start their writeback together: large enough to cost one call per 8 MiB
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start the writeback of dirty pages in the range, without waiting for it

Starter = Callable[[int, int, int, int], int]  # sync_file_range(fd, offset, nbytes, flags) -> 0 or -1


@functools.lru_cache(maxsize=1)
def _sync_file_range() -> Starter | None:
    """libc's ``sync_file_range`` (Linux), or ``None`` where there is none. ctypes drops the GIL for the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


class WritebackStream:
    """A write-only stream over a fresh file opened ``"wb"`` that starts each :data:`KICK_BYTES` on its way to disk
    as soon as it is written; the caller still flushes and fsyncs the file at the end.

    Example:
        >>> import os, tempfile
        >>> with tempfile.TemporaryFile() as f:
        ...     stream = WritebackStream(f)
        ...     _ = stream.write(b"x" * 100)
        ...     stream.flush()
        ...     os.fsync(f.fileno())
        ...     stream.written
        100
    """

    def __init__(self, file: IO[bytes], start: Starter | None = None) -> None:
        self.file = file
        self.written = 0
        self._fd = file.fileno()
        self._started = 0  # bytes whose writeback was asked for: [0, _started)
        self._start = start if start is not None else _sync_file_range()

    def write(self, data: Any) -> int:
        """Write ``data`` (bytes or any buffer), a kick at a time, starting the writeback of each kick's worth
        written (a tensor of a GiB goes to disk while it is being written, not after)."""
        view = memoryview(data).cast("B")
        for offset in range(0, view.nbytes, KICK_BYTES):
            self.written += self.file.write(view[offset:offset + KICK_BYTES])
            if self._start is not None and self.written - self._started >= KICK_BYTES:
                self._kick(self._start)
        return view.nbytes

    def _kick(self, start: Starter) -> None:
        """Ask the kernel to start writing ``[_started, written)`` out."""
        self.file.flush()  # bytes still in Python's buffer would be left out of the range
        if start(self._fd, self._started, self.written - self._started, _SYNC_FILE_RANGE_WRITE) != 0:
            self._start = None  # this file system refuses it: the final fsync does all the work, as without it
        self._started = self.written

    def flush(self) -> None:
        """Flush the file's Python buffer."""
        self.file.flush()
