"""The JSONL tracker: one JSON line per ``log`` call, always available (no extra package).

Files, under ``<logging_dir>/<project_name>/``:

- ``config.json``: the ``config`` given to ``init_trackers`` (values that JSON cannot hold are written as
  their ``repr``).
- ``metrics.jsonl``: ``{"step": 3, "time": 1700000000.0, "values": {"train/loss": 0.25}}`` per line; numbers and
  0-d tensors become floats, strings are kept, other values are skipped with one warning per name.
  Read it back with ``pandas.read_json(path, lines=True)``.

Each line is written whole or not at all: one unbuffered append per ``log`` call, so every logged line is on
disk even if the run dies, and a write the disk cannot take (disk full, quota) is cut back off the file
before the ``OSError`` is raised, leaving every earlier line readable.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Mapping
from typing import IO, Any, ClassVar

from notebook_accel.tracking.base import GeneralTracker, scalar_values, warn_skipped

__all__ = ["JSONLTracker"]


class JSONLTracker(GeneralTracker):
    """Appends logged values to ``<logging_dir>/<run_name>/metrics.jsonl``.

    Args:
        run_name: the project name from ``init_trackers`` (a sub-folder of ``logging_dir``).
        logging_dir: the folder to write in (created if missing).

    Example:
        >>> import tempfile, pathlib
        >>> d = tempfile.mkdtemp()
        >>> t = JSONLTracker("demo", d); t.start(); t.log({"loss": 0.5}, step=1); t.finish()
        >>> pathlib.Path(d, "demo", "metrics.jsonl").read_text().startswith('{"step": 1')
        True
    """

    name: ClassVar[str] = "jsonl"
    requires_logging_directory: ClassVar[bool] = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str]) -> None:
        super().__init__()
        self.run_dir = os.path.join(os.fspath(logging_dir), run_name)
        self.path = os.path.join(self.run_dir, "metrics.jsonl")
        self._file: IO[bytes] | None = None
        self._warned: set[str] = set()

    @property
    def tracker(self) -> IO[bytes] | None:
        """The open ``metrics.jsonl`` file, binary and unbuffered (``None`` before ``start`` and after
        ``finish``)."""
        return self._file

    def start(self) -> None:
        """Create the folder and open ``metrics.jsonl`` for appending."""
        self._open()

    def _open(self) -> IO[bytes]:
        """The open file, opening it (unbuffered, appending) on first use."""
        if self._file is None:
            os.makedirs(self.run_dir, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)
        return self._file

    def _append(self, file: IO[bytes], data: bytes) -> None:
        """Append ``data`` whole, or cut what was written of it back off and raise ``OSError``."""
        fd = file.fileno()
        size = os.fstat(fd).st_size
        done = 0
        try:
            while done < len(data):
                written = os.write(fd, data[done:])
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += written
        except OSError as e:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise OSError(
                e.errno, f"{self.path} could not take this log line ({e.strerror}); the line was not kept, and "
                "every line logged before is in the file, whole. Free space on that disk (or log elsewhere with "
                "logging_dir=) and log again", self.path) from e

    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        """Write ``config.json`` (values JSON cannot hold are written as their ``repr``)."""
        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.run_dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(dict(values), f, indent=2, default=repr)

    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Append one line with the scalar and string ``values`` at ``step``."""
        file = self._open()
        scalars, skipped = scalar_values(values)
        out: dict[str, Any] = dict(scalars)
        dropped = []
        for name in skipped:
            value = values[name]
            if isinstance(value, str):
                out[name] = value
            else:
                dropped.append(name)
        if dropped:
            warn_skipped(self.name, dropped, self._warned)
        line = {"step": None if step is None else int(step), "time": time.time(), "values": out}
        self._append(file, (json.dumps(line, allow_nan=True) + "\n").encode("utf-8"))

    def finish(self) -> None:
        """Close the file. Safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None
