"""Checksums checked while a reader reads a file by byte ranges, so the check costs no pass of its own.

A reader that takes a file apart (DCP reads a shard file record by record) can check the file's checksum on the
way: :class:`RangeReader` serves ranges in increasing offset order, each with one ``pread``, hashes every range
as it is read, hashes the bytes between and after the ranges it skips (records another rank reads), and at the
end compares the digest of the whole file with the manifest's. The digest covers every byte of the file exactly
once, whatever the reader asked for.

Which files a load checks that way is said with :func:`verifying`: the load lists the files whose checksum this
rank owes (path -> algorithm and digest), a reader that checked one while reading it crosses it off
(:func:`verified_while_read`), and the load hashes what is left (files the reader never opened on this rank) the
usual way. A reader is told nothing outside a :func:`verifying` block, and then checks nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from notebook_accel.checkpointing.checksum import TITLES, Algorithm, new_hasher
from notebook_accel.checkpointing.errors import CheckpointError

__all__ = ["Expected", "verifying", "expected_digest", "verified_while_read", "RangeReader", "checksum_mismatch"]

#: ``(algorithm, hex digest, size)`` of a file, as the manifest records it
Expected = tuple[Algorithm, str, int]

_EXPECTED: contextvars.ContextVar[dict[str, Expected] | None] = contextvars.ContextVar("_EXPECTED", default=None)

_GAP_BLOCK = 4 << 20  # skipped bytes are hashed in blocks of this size
_OVERLAP = 1 << 20  # from this size on, a range is hashed on a helper thread while the caller parses it


def checksum_mismatch(name: str, algorithm: Algorithm) -> str:
    """The problem text of file ``name`` whose ``algorithm`` checksum differs from the manifest's."""
    return (f"{name}: its {TITLES[algorithm]} checksum differs from the manifest's (the file was changed or "
            "corrupted after the save); load an older checkpoint or restore the file")


@contextlib.contextmanager
def verifying(expected: dict[str, Expected]) -> Iterator[dict[str, Expected]]:
    """Within the block, readers may check the files of ``expected`` (absolute path -> :data:`Expected`) while they
    read them; each one checked is removed from the dict, which the block yields: what is left is unchecked.

    Example:
        >>> with verifying({"/ckpt/a.distcp": ("xxh3_128", "00" * 16, 3)}) as left:
        ...     pass
        >>> sorted(left)
        ['/ckpt/a.distcp']
    """
    token = _EXPECTED.set(expected)
    try:
        yield expected
    finally:
        _EXPECTED.reset(token)


def expected_digest(path: str | os.PathLike[str]) -> Expected | None:
    """What the active :func:`verifying` block expects of the file ``path`` (``None``: this reader need not check
    it)."""
    expected = _EXPECTED.get()
    return None if expected is None else expected.get(os.path.abspath(os.fspath(path)))


def verified_while_read(path: str | os.PathLike[str]) -> None:
    """Cross file ``path`` off the active :func:`verifying` block's list: its whole checksum was checked."""
    expected = _EXPECTED.get()
    if expected is not None:
        expected.pop(os.path.abspath(os.fspath(path)), None)


class RangeReader:
    """Byte ranges of one file, read once each, in increasing offset order; with ``expected``, every byte of the
    file is hashed exactly once on the way and :meth:`finish` checks the digest.

    A range asked for again right after itself is served from memory (a record two targets take parts of). A
    large range is hashed on a helper thread while the caller parses it, so on a machine with a free core the check
    costs the load no time; :meth:`finish` waits for it, and leaving the ``with`` block stops the helper.

    Args:
        path: the file.
        expected: its manifest record, or ``None`` to read without checking.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     _ = f.write(b"header|data|tail"); f.flush()
        ...     with RangeReader(f.name, None) as reader:
        ...         reader.read(7, 4)
        b'data'
    """

    def __init__(self, path: str | os.PathLike[str], expected: Expected | None) -> None:
        self.path = os.fspath(path)
        self.expected = expected
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self._hash: Any = new_hasher(expected[0]) if expected is not None else None
        self._hashed = 0  # the bytes [0, _hashed) are in the hash (or being hashed, see _pending)
        self._last: tuple[int, int, bytes] | None = None
        self._helper: ThreadPoolExecutor | None = None
        self._pending: Future[None] | None = None  # the helper's hash of the last large range

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._helper is not None:
                self._helper.shutdown(wait=True)  # no thread outlives the reader, whatever happened
                self._helper = None
        finally:
            os.close(self._fd)

    def _update(self, data: Any) -> None:
        """Add ``data`` (the bytes right after those hashed so far) to the hash, in file order. A large range is
        hashed on a helper thread while the caller parses it (the hash releases the GIL); the one before it is
        waited for first, so at most one range is in flight and the order is kept."""
        self._wait()
        if memoryview(data).nbytes < _OVERLAP:
            self._hash.update(data)
            return
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-verify")
        self._pending = self._helper.submit(self._hash.update, data)

    def _wait(self) -> None:
        """Wait for the helper's hash in flight (if any)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def peek(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer where the file ends), read without hashing them: a look at a
        record's head before it is read, which changes nothing of what :meth:`read` may read next."""
        return os.pread(self._fd, length, offset)

    def read(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset``, hashed (with the bytes skipped before them) when checking.

        Raises:
            CheckpointError: the file ends before the range does.
        """
        if self._last is not None and self._last[:2] == (offset, length):
            return self._last[2]
        self._skip_to(offset)
        data = os.pread(self._fd, length, offset)
        while 0 < len(data) < length:  # Linux reads at most 2 GiB at once
            more = os.pread(self._fd, length - len(data), offset + len(data))
            if not more:
                break
            data += more
        self._take(offset, length, memoryview(data))
        self._last = (offset, length, data)
        return data

    def read_into(self, offset: int, buffer: memoryview) -> None:
        """Fill ``buffer`` (writable bytes) with the file's bytes at ``offset``, with one system call where the
        system has ``preadv``, hashed like :meth:`read`. The caller must not change ``buffer`` afterwards (it may
        still be being hashed).

        Raises:
            CheckpointError: the file ends before the range does.
        """
        self._skip_to(offset)
        done = 0
        while done < buffer.nbytes:
            if hasattr(os, "preadv"):
                got = os.preadv(self._fd, [buffer[done:]], offset + done)
            else:
                piece = os.pread(self._fd, buffer.nbytes - done, offset + done)
                buffer[done:done + len(piece)], got = piece, len(piece)
            if got == 0:
                break
            done += got
        self._take(offset, buffer.nbytes, buffer[:done])
        self._last = None

    def _skip_to(self, offset: int) -> None:
        """Hash the bytes skipped before a read at ``offset`` (when checking)."""
        if self._hash is not None and offset > self._hashed:
            self._hash_up_to(offset)

    def _take(self, offset: int, length: int, data: memoryview) -> None:
        """Hash ``data``, just read at ``offset`` for a range of ``length`` bytes (the part not hashed before).

        Raises:
            CheckpointError: it is shorter than the range (the file ends inside it).
        """
        if data.nbytes != length:
            raise CheckpointError(f"{os.path.basename(self.path)}: the file ends at byte {offset + data.nbytes}, "
                                  f"inside a record of bytes {offset}-{offset + length} (a truncated shard); "
                                  "load an older checkpoint or restore the file")
        if self._hash is not None and offset <= self._hashed < offset + length:
            self._update(data[self._hashed - offset:] if self._hashed > offset else data)
            self._hashed = offset + length

    def _hash_up_to(self, end: int) -> None:
        """Hash the bytes ``[_hashed, end)`` (ones the reader skips), block by block."""
        while self._hashed < end:
            block = os.pread(self._fd, min(_GAP_BLOCK, end - self._hashed), self._hashed)
            if not block:
                return  # the file is shorter: finish() reports the size
            self._update(block)
            self._hashed += len(block)

    def finish(self) -> None:
        """Hash the rest of the file and compare the whole digest with the manifest's; cross the file off the
        active :func:`verifying` list. Without ``expected``, nothing to do.

        Raises:
            CheckpointError: the file's checksum or size differs from the manifest's.
        """
        if self.expected is None:
            return
        algorithm, digest, size = self.expected
        self._hash_up_to(max(size, os.fstat(self._fd).st_size))
        self._wait()
        name = os.path.basename(self.path)
        if self._hashed != size:
            raise CheckpointError(f"{name}: {self._hashed} bytes, the manifest says {size}")
        if self._hash.hexdigest() != digest:
            raise CheckpointError(checksum_mismatch(name, algorithm))
        verified_while_read(self.path)
