"""The one reader for every file a config names: the config itself and the DeepSpeed JSON it points at.

A path in a config can name anything: ``/dev/zero`` (never ends), a FIFO without a writer (``open`` would wait
forever), a folder, a multi-gigabyte file. The file is therefore opened without blocking, checked on the open
descriptor (a regular file, at most :data:`MAX_CONFIG_BYTES`; no swap between check and read) and read with a
bound, so every such path ends at once with a clear error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from notebook_accel.config.errors import ConfigError
from notebook_accel.errors import shown

__all__ = ["MAX_CONFIG_BYTES", "MAX_PATH_CHARS", "read_regular_file", "config_file_path"]

MAX_CONFIG_BYTES = 1 << 20  # a config file is a few hundred bytes (a DeepSpeed JSON a few KiB); 1 MiB is none
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: no longer path can be opened


def config_file_path(value: object, name: str = "path") -> Path:
    """``value``, given as the parameter ``name``, as the path of a config file (``~`` expanded).

    Raises:
        ConfigError: ``value`` is not a ``str`` or ``os.PathLike`` path, is empty, holds a NUL character or is
            longer than any path can be.

    Example:
        >>> config_file_path(None)
        Traceback (most recent call last):
        ...
        notebook_accel.config.errors.ConfigError: invalid notebook-accel config: 1 problem
          - path: got None (NoneType); allowed: the path of a config file, as a str or os.PathLike
    """
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise ConfigError([f"{name}: got {shown(value)} ({type(value).__name__}); allowed: the path of a config "
                           "file, as a str or os.PathLike"])
    why = ("is empty" if not text.strip() else "holds a NUL character" if "\x00" in text
           else f"has {len(text)} characters (at most {MAX_PATH_CHARS})" if len(text) > MAX_PATH_CHARS else "")
    if why:
        raise ConfigError([f"{name}: {shown(text)} {why}; give the path of a config file"])
    return Path(os.path.expanduser(text))


def read_regular_file(file: str | os.PathLike[str], what: str = "a config file") -> bytes:
    """The bytes of ``file``, which must be a regular file of at most :data:`MAX_CONFIG_BYTES`.

    Args:
        file: the path (``~`` is not expanded here).
        what: what the file should be, for the error (``"a config file"``, ``"a DeepSpeed JSON file"``).

    Raises:
        FileNotFoundError: nothing at ``file``.
        IsADirectoryError: ``file`` is a folder.
        OSError: a device, pipe or socket (``EINVAL``), a file past the bound (``EFBIG``), or an OS error.

    Example:
        >>> read_regular_file("/dev/zero")
        Traceback (most recent call last):
        ...
        OSError: [Errno 22] not a regular file (a device, pipe or socket); give the path of a config file
    """
    fd = os.open(Path(file), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", str(file))
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file (a device, pipe or socket); give the path of {what}")
        if info.st_size > MAX_CONFIG_BYTES:
            raise OSError(errno.EFBIG, f"the file has {info.st_size} bytes; {what} is at most "
                                       f"{MAX_CONFIG_BYTES} bytes")
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
        chunk = data
        while chunk and len(data) <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - len(data))
            data += chunk
        if len(data) > MAX_CONFIG_BYTES:
            raise OSError(errno.EFBIG, f"the file grew past {MAX_CONFIG_BYTES} bytes while being read")
        return data
    finally:
        os.close(fd)
