"""The checksums of a checkpoint's files: XXH3-128, computed while the bytes are written, checked from a mapping.

A checksum here guards against a file changed or damaged after the save (a bad disk, a copy cut short, a byte
flipped by hand), not against an attacker, so it needs to be fast, not cryptographic. XXH3-128 (the ``xxhash``
package, a binding of the C library) runs at several GB/s on one core, about six times SHA-256 (``hashlib``):
a save no longer spends a second reading back every gigabyte it has just written.

- Saving: :class:`HashingWriter` sits between ``torch.save`` (or any writer) and the open file, so every byte is
  hashed as it is handed to the file: no second pass, no read back. The digest of every durable write made inside
  :func:`recording` lands in its ledger (``path -> (size, digest)``), which ``save_state`` sends to the folder's
  leader for the manifest (FSDP's DCP shards too: its writer streams them through a :class:`HashingWriter`); a
  file written by code that does not is hashed once after the write, by the rank that wrote it, from the page cache.
- Loading: :func:`file_checksum` hashes a file through a read-only memory mapping, which leaves its pages in the
  page cache for the ``torch.load(mmap=True)`` that follows: the check is the read, not a pass on top of it.

Checkpoints written before this module (formats 1 and 2) recorded SHA-256; they are still verified with it.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import mmap
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Literal, get_args

import xxhash

__all__ = ["ALGORITHM", "Algorithm", "HashingWriter", "recording", "record", "file_checksum", "new_hasher"]

Algorithm = Literal["xxh3_128", "sha256"]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
ALGORITHM: Algorithm = "xxh3_128"  # what a save records now

#: the name of each algorithm in messages
TITLES = {"xxh3_128": "XXH3-128", "sha256": "SHA-256"}

_BLOCK = 16 << 20  # a mapping is hashed in blocks, so a huge file never needs one huge buffer object


def new_hasher(algorithm: Algorithm) -> Any:
    """A fresh incremental hasher of ``algorithm`` (both kinds release the GIL on large buffers)."""
    return xxhash.xxh3_128() if algorithm == "xxh3_128" else hashlib.sha256()


_OVERLAP = 1 << 20  # from this size on, a buffer is hashed on a helper thread while it is being written


class HashingWriter:
    """A write-only stream that hashes every byte on its way into ``stream``: one pass over the data.

    ``torch.save`` writes a zip archive front to back (it never seeks on a stream without ``seek``), so the
    digest is that of the file. :attr:`size` counts the bytes written. A large buffer (a tensor's storage) is
    hashed on a helper thread while the calling thread writes it (both release the GIL), and ``write`` returns
    once both are done, so the buffer is never used after the call; :meth:`close` (or the ``with`` block's end)
    stops the helper.

    Example:
        >>> import io
        >>> with HashingWriter(io.BytesIO()) as w:
        ...     _ = w.write(b"abc")
        >>> w.size, len(w.hexdigest())
        (3, 32)
    """

    def __init__(self, stream: IO[bytes], algorithm: Algorithm = ALGORITHM) -> None:
        self.stream = stream
        self.size = 0
        self._hash = new_hasher(algorithm)
        self._helper: ThreadPoolExecutor | None = None

    def write(self, data: Any) -> int:
        """Hash ``data`` (bytes or any buffer) and write it; returns the number of bytes written."""
        view = memoryview(data).cast("B")
        if view.nbytes < _OVERLAP:
            self._hash.update(view)
            self.stream.write(view)
        else:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(1, thread_name_prefix="checkpoint-hash")
            hashed = self._helper.submit(self._hash.update, view)
            try:
                self.stream.write(view)
            finally:
                hashed.result()
        self.size += view.nbytes
        return view.nbytes

    def close(self) -> None:
        """Stop the helper thread (the underlying stream stays open)."""
        if self._helper is not None:
            self._helper.shutdown()
            self._helper = None

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self) -> None:
        """Flush the underlying stream."""
        self.stream.flush()

    def hexdigest(self) -> str:
        """The digest of everything written so far."""
        return str(self._hash.hexdigest())


_LEDGER: contextvars.ContextVar[dict[str, tuple[int, str]] | None] = contextvars.ContextVar("_LEDGER", default=None)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, tuple[int, str]]]:
    """Collect ``path -> (size, XXH3-128 digest)`` of every file :func:`record` is told about within the block.

    Example:
        >>> with recording() as ledger:
        ...     record("/tmp/x", 3, "ab")
        >>> ledger
        {'/tmp/x': (3, 'ab')}
    """
    ledger: dict[str, tuple[int, str]] = {}
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def record(path: str, size: int, digest: str) -> None:
    """Note a durably written file's size and digest in the active :func:`recording` ledger (if any)."""
    ledger = _LEDGER.get()
    if ledger is not None:
        ledger[os.path.abspath(path)] = (size, digest)


def file_checksum(path: str, algorithm: Algorithm = ALGORITHM) -> tuple[int, str]:
    """Size in bytes and hex digest of the file ``path``, read through a read-only memory mapping.

    Raises:
        OSError: the file cannot be opened or mapped (the caller names the file in its error).
    """
    h = new_hasher(algorithm)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                for start in range(0, size, _BLOCK):
                    h.update(view[start:start + _BLOCK])
    return size, str(h.hexdigest())
