"""Crash-safe files and directories: write + fsync, a temporary sibling directory, and the rename that commits it.

A checkpoint is built in ``<parent>/.tmp-<name>-<owner>-<nonce>`` and renamed to ``<parent>/<name>`` only once every
file in it is written and flushed to disk, so a reader sees either the old checkpoint or the complete new one,
never a mix. Anything whose name starts with :data:`TEMP_PREFIX` is unfinished (or being deleted) and is
ignored by automatic loading.

Every OS error becomes a :class:`CheckpointError` naming the path and the error (``[Errno 28] No space left on
device``), so "disk full" or "read-only directory" reads as such in the notebook.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable
from typing import IO, Any, Literal, cast

import torch

from notebook_accel.checkpointing.checksum import ALGORITHM, Algorithm, HashingWriter, file_checksum, record
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing import serialize
from notebook_accel.checkpointing.writeback import WritebackStream

__all__ = [
    "TEMP_PREFIX",
    "owner",
    "is_temporary",
    "temp_target",
    "temp_sibling",
    "make_dir",
    "write_file",
    "write_torch",
    "write_bytes",
    "read_torch",
    "file_digest",
    "fsync_dir",
    "commit_dir",
    "remove_dir",
]

TEMP_PREFIX = ".tmp-"
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def owner() -> str:
    """``p<pid>h<host>``: the calling process and machine, as a temporary directory's name records its owner.

    Read at each call, never at import: a worker forked from a kernel that imported this module is its own
    process, and the directories it leaves when killed must name it (not the live kernel) to be recognised as
    dead saves.
    """
    return f"p{os.getpid()}h{_HOST}"

# what follows the target's name in a temporary directory's name: owner, nonce, and the tag of a renamed one
_OWNER_RE = re.compile(r"-p(\d+)h([0-9a-f]{8})-[0-9a-f]{8}(?:\.(old|del))?$")


def owner_alive(name: str) -> bool:
    """Whether the process that made the temporary directory ``name`` may still be writing it: True when it
    runs here, or when it runs on another machine (never deleted then); False for a dead process of this
    machine and for a name without an owner (left by an older version)."""
    match = _OWNER_RE.search(name)
    if match is None:
        return False
    if match.group(2) != _HOST:
        return True
    pid = int(match.group(1))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def temp_target(name: str) -> tuple[str, str] | None:
    """``(target name, tag)`` of the temporary directory ``name`` made by :func:`temp_sibling` (tag ``""``,
    ``"old"`` or ``"del"``); ``None`` for any other name.

    The target's name is read exactly (everything between the prefix and the owner), so the leftovers of
    ``run-pretrain`` are never taken for those of ``run``.
    """
    match = _OWNER_RE.search(name)
    if not name.startswith(TEMP_PREFIX) or match is None or match.start() <= len(TEMP_PREFIX):
        return None
    return name[len(TEMP_PREFIX):match.start()], match.group(3) or ""


def is_temporary(name: str) -> bool:
    """True for the name of an unfinished or half-deleted checkpoint directory."""
    return name.startswith(TEMP_PREFIX)


def temp_sibling(path: str, tag: Literal["", "old", "del"] = "") -> str:
    """A fresh, unused path next to ``path``: ``<parent>/.tmp-<name>-<owner>-<nonce>[.<tag>]``, where ``<owner>``
    (:func:`owner`) names this process and machine, so a later save can tell a dead save's debris from a live one,
    and the tag (``old``: a previous checkpoint moved aside; ``del``: one being deleted) comes last, so the
    target's name can be read back exactly (:func:`temp_target`).

    The nonce comes from ``os.urandom`` (via :mod:`secrets`), never from the global ``random``/``torch`` RNGs,
    so saving a checkpoint does not change the random streams being saved.
    """
    parent, name = os.path.split(os.path.abspath(path))
    suffix = f".{tag}" if tag else ""
    return os.path.join(parent, f"{TEMP_PREFIX}{name}-{owner()}-{secrets.token_hex(4)}{suffix}")


def _os_error(action: str, path: str, e: OSError) -> CheckpointError:
    """A CheckpointError for a failed file-system call, with a hint for the usual causes."""
    hint = ""
    if e.errno == errno.ENOSPC:
        hint = " The disk is full: free space or save to another directory."
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = " The directory is not writable: choose a writable output_dir / project_dir."
    return CheckpointError(f"could not {action} {path!r}: {e}.{hint}")


def make_dir(path: str, exist_ok: bool = False) -> None:
    """Create ``path`` and its missing parents; raise CheckpointError on an OS error."""
    try:
        os.makedirs(path, exist_ok=exist_ok)
    except OSError as e:
        raise _os_error("create directory", path, e) from e


def write_file(path: str, writer: Callable[[IO[bytes]], None]) -> None:
    """Open ``path`` for writing, let ``writer`` fill it (hashing every byte on the way, and starting the disk's
    writeback of every few MiB as they are written: :mod:`~notebook_accel.checkpointing.writeback`), flush and
    fsync, and :func:`~notebook_accel.checkpointing.checksum.record` its size and digest; OS errors become
    CheckpointError."""
    try:
        with open(path, "wb") as f, HashingWriter(cast(IO[bytes], WritebackStream(f))) as stream:
            writer(cast(IO[bytes], stream))
            f.flush()
            os.fsync(f.fileno())
        record(path, stream.size, stream.hexdigest())
    except OSError as e:
        raise _os_error("write", path, e) from e
    except RuntimeError as e:  # torch's writer reports a full disk as a RuntimeError ("unexpected pos ...")
        raise CheckpointError(f"could not write {path!r}: {_writer_cause(path, e)}") from e


_LOW_SPACE = 64 << 20  # below this much free space, a failed write is taken to be a full disk


def _writer_cause(path: str, error: RuntimeError) -> str:
    """What a RuntimeError from torch's writer most likely means, with the free space measured now."""
    try:
        usage = shutil.disk_usage(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return f"{error}. Check free disk space and permissions."
    free = usage.free
    if free < _LOW_SPACE or free < usage.total // 1000:
        return (f"the disk is full ({free} bytes free of {usage.total} on the file system holding it; torch said: "
                f"{str(error).strip()}). Free space or save to another directory; the previous checkpoint is intact.")
    return f"{error}. {free} bytes are free there; check permissions and the file system."


def write_torch(path: str, obj: Any, zip_crcs: bool = False) -> None:
    """``torch.save(obj)`` into ``path``, durably (flushed and fsynced before returning), its digest computed
    while it is written. The zip's own CRC-32s are left out (a checkpoint's manifest checks every byte,
    :mod:`.serialize`) unless ``zip_crcs`` (a file other programs read without a manifest)."""
    write_file(path, lambda f: torch.save(obj, f) if zip_crcs else serialize.save_without_crc(obj, f))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` into ``path``, durably."""

    def write(f: IO[bytes]) -> None:
        f.write(data)

    write_file(path, write)


def read_torch(path: str) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True, mmap=True)``; a failure becomes CheckpointError.

    ``weights_only=True`` means the file can hold tensors, numbers, strings, lists, tuples and dicts only, so a
    checkpoint from elsewhere cannot run code when loaded. ``mmap=True`` maps tensor data instead of allocating it,
    so shapes are checked before any memory is spent; a file with compressed tensor data (which ``torch.save``
    never writes) cannot be mapped and is refused.
    """
    try:
        # mmap: tensors are views of the file, so nothing is allocated before the shapes are checked (a small
        # hostile file cannot claim gigabytes); torch.save's uncompressed zip entries are what mmap accepts
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except OSError as e:
        raise _os_error("read", path, e) from e
    except Exception as e:  # unpickling errors: corrupt file, or an object weights_only refuses
        raise CheckpointError(
            f"could not load {path!r} with torch.load(weights_only=True): {type(e).__name__}: {e}. The file is "
            "corrupt, was rewritten with compressed tensor data (torch.save never writes that; it cannot be mapped "
            "without unpacking it whole), or holds Python objects other than tensors, numbers, strings, lists, "
            "tuples and dicts (a custom object's state_dict must return only those)."
        ) from e


def file_digest(path: str, algorithm: Algorithm = ALGORITHM) -> tuple[int, str]:
    """Size in bytes and hex digest (XXH3-128 unless ``algorithm`` says otherwise) of ``path``; an OS error
    becomes a CheckpointError naming the file."""
    try:
        return file_checksum(path, algorithm)
    except OSError as e:
        raise _os_error("read", path, e) from e


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (new names, renames) to disk (a no-op on Windows, which cannot open one)."""
    if os.name == "nt":
        return
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise _os_error("open directory", path, e) from e
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):  # some file systems cannot fsync directories
            raise _os_error("fsync directory", path, e) from e
    finally:
        os.close(fd)


def commit_dir(temp: str, final: str) -> None:
    """Rename the finished directory ``temp`` to ``final``, durably.

    An existing ``final`` (a previous checkpoint or an empty directory) is first renamed aside to a temporary
    name and deleted only after the new one is in place. Between the two renames ``final`` briefly does not exist;
    the old copy survives under its ``.tmp-<name>-...old`` name until the end. When anything interrupts the renames
    (an OS error, or the notebook's stop button: a KeyboardInterrupt landing between them), the old copy is put back
    before the exception goes on, so ``final`` is never left empty by a process that lives on.
    """
    parent = os.path.dirname(os.path.abspath(final))
    fsync_dir(temp)
    old: str | None = None
    action = "move aside the existing"
    try:
        if os.path.lexists(final):
            old = temp_sibling(final, tag="old")
            os.rename(final, old)
        action = "rename the finished checkpoint into"
        os.rename(temp, final)
    except BaseException as e:
        _put_back(old, final)
        if isinstance(e, OSError):
            raise _os_error(action, final, e) from e
        raise
    fsync_dir(parent)
    if old is not None:
        remove_dir(old)


def _put_back(old: str | None, final: str) -> None:
    """Move the previous checkpoint back to ``final`` when a commit stopped after moving it aside."""
    if old is not None and os.path.lexists(old) and not os.path.lexists(final):
        os.rename(old, final)


def remove_dir(path: str) -> None:
    """Delete a checkpoint directory: renamed to a temporary name first, so a crash mid-delete leaves no half
    checkpoint under a real name. Errors while deleting are ignored (the leftover is a ``.tmp-`` directory)."""
    if not os.path.lexists(path):
        return
    target = path
    if not is_temporary(os.path.basename(path)):
        target = temp_sibling(path, tag="del")
        try:
            os.rename(path, target)
        except OSError:
            target = path
    shutil.rmtree(target, ignore_errors=True)
