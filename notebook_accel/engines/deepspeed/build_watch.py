"""Watch a DeepSpeed op's build folder while DeepSpeed sets up: whether a build is under way, who runs it (a rank
of this run, or another process), since when, and when it is done.

torch's ``cpp_extension`` builds an op under one lock per folder (``lock``, held open by the building Python
process; see :mod:`.jit_ops`) and runs ``ninja`` in that folder, which runs the compiler there. Every load takes
the lock and runs ninja, even when there is nothing to build (a warm start), so a held lock alone is no build.
A build is under way while the lock is held and either a compiler works in the folder (a process whose working
folder it is, other than ninja itself) or ``.ninja_log`` changed while that same lock was held (ninja appends a
line per finished step). That holds however the build started: a first run, changed sources or flags, a
``build.ninja`` written by another ninja, another kernel, ``notebook-accel env --build-deepspeed-ops``.

The holding process is named by its rank when it is a worker of this run (or a process one started), else as
``another process (pid N, <its command line>)``. Everything here reads ``/proc``; where there is none, nothing is
seen and nothing is said.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from notebook_accel.durations import format_duration

__all__ = ["lock_holders", "compilers", "holder_name", "BuildWatch", "MINUTES", "AHEAD"]

MINUTES = "1-6"  # a first build took 88 s on a busy 2-core machine, 346 s (under 6 min) on a fully loaded one
_PROC = Path("/proc")
_NOT_COMPILERS = frozenset({"ninja"})  # ninja runs in the folder on every load, even with nothing to build
_COMMAND_CHARS = 80  # a holder's command line, cut to this for a dashboard label
AHEAD = "`notebook-accel env --build-deepspeed-ops` builds it ahead of a run"
_MODULE_COMMANDS = {"notebook_accel.cli": "notebook-accel"}  # `python -m X` shown as the command people type


def _pids() -> list[int]:
    """Every process id in ``/proc`` (empty where there is no ``/proc``)."""
    try:
        return [int(entry.name) for entry in _PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def lock_holders(path: Path) -> list[int] | None:
    """The pids of the processes holding ``path`` open, from ``/proc/*/fd``; ``None`` where that cannot be told
    (no ``/proc``). Processes whose descriptors cannot be read (another user's) are not counted."""
    if not (_PROC / "self" / "fd").is_dir():
        return None
    target = os.path.realpath(path)
    holders: list[int] = []
    for pid in _pids():
        try:
            fds = list((_PROC / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(comm, parent pid, session id)`` of ``pid``; ``None`` when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses; split after the last ')'
    comm = text[text.find("(") + 1:text.rfind(")")]
    fields = text[text.rfind(")") + 2:].split()
    return comm, int(fields[1]), int(fields[3])


def compilers(build_dir: Path) -> list[int]:
    """The processes working in ``build_dir`` (their current folder) other than ninja: a compiler or linker that a
    build runs there (``sh``, ``c++``, ``cc1plus``, ``ld``)."""
    target = os.path.realpath(build_dir)
    found: list[int] = []
    for pid in _pids():
        try:
            if os.readlink(_PROC / str(pid) / "cwd") != target:
                continue
        except OSError:
            continue
        stat = _stat(pid)
        if stat is not None and stat[0] not in _NOT_COMPILERS:
            found.append(pid)
    return found


def _command(pid: int) -> str:
    """``pid``'s command line as people type it (the interpreter left out before a script or ``-m``), cut short;
    ``""`` when it cannot be read."""
    try:
        argv = [a for a in (_PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0") if a]
    except OSError:
        return ""
    if len(argv) > 1 and Path(argv[0]).name.startswith("python"):
        if argv[1] == "-m" and len(argv) > 2:
            argv = [_MODULE_COMMANDS.get(argv[2], f"python -m {argv[2]}"), *argv[3:]]
        elif not argv[1].startswith("-"):
            argv = argv[1:]
    if argv:
        argv[0] = Path(argv[0]).name
    text = " ".join(argv)
    return text if len(text) <= _COMMAND_CHARS else text[:_COMMAND_CHARS - 3] + "..."


def holder_name(pid: int, peers: Mapping[int, int]) -> str:
    """Who ``pid`` is, for people: ``rank 1`` for a worker of this run (``peers``: pid to rank) or a process one
    started (its session is the worker's: every worker leads its own); ``another worker of this launcher (pid N)``
    for a process our own parent started (a rank whose pid was not gathered: a group other than gloo); else
    ``another process (pid N, <command>)``.

    Example:
        >>> holder_name(os.getpid(), {os.getpid(): 1})
        'rank 1'
    """
    stat = _stat(pid)
    rank = peers.get(pid, peers.get(stat[2]) if stat is not None else None)
    if rank is not None:
        return f"rank {rank}"
    if stat is not None and stat[1] == os.getppid() != 1:  # forked by our launcher, where ranks were not gathered
        return f"another worker of this launcher (pid {pid})"
    command = _command(pid)
    return f"another process (pid {pid}, {command})" if command else f"another process (pid {pid})"


def _signature(path: Path) -> tuple[int, int] | None:
    """A file's (size, mtime in ns): it changes when the file is written; ``None`` when there is none."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_size, stat.st_mtime_ns


@dataclass
class _Build:
    """A build seen under way: the lock it holds (inode), who holds it, since when (the lock's creation)."""

    inode: int
    who: str
    since: float


class BuildWatch:
    """Follow one op's build folder and say, through ``announce``, when a build is under way and when it ends.

    Call :meth:`poll` now and then (:mod:`.jit_ops` does, from a thread, while DeepSpeed sets up) and
    :meth:`close` at the end. ``announce(text, line)`` gets the dashboard label (``""``: the build is over) and a
    longer line for stderr (``""``: none).

    Args:
        name: the op's name (its folder's and its library's name); ``what``: what it is, for people.
        build_dir: its build folder.
        rank: this process's rank; ``peers``: pid to rank of this run's workers on this machine.
        announce: where to say it.
    """

    def __init__(self, name: str, what: str, build_dir: Path, rank: int, peers: Mapping[int, int],
                 announce: Callable[[str, str], None]) -> None:
        self.name, self.what, self.build_dir = name, what, build_dir
        self.rank, self.peers, self.announce = rank, dict(peers), announce
        self.library = build_dir / f"{name}.so"
        self.first = not self.library.exists()  # a build now is the op's first, not a rebuild
        self.build: _Build | None = None
        self._lock_inode: int | None = None  # the lock seen at the last poll
        self._log_then: tuple[int, int] | None = None  # .ninja_log when that lock was first seen

    def poll(self) -> None:
        """Look once: a build starting, going on (the label's time so far) or over."""
        lock = self.build_dir / "lock"
        try:
            stat = lock.stat()
        except FileNotFoundError:
            stat = None
        inode = stat.st_ino if stat is not None else None
        if inode != self._lock_inode:
            self._end()
            self._lock_inode, self._log_then = inode, _signature(self.build_dir / ".ninja_log")
        if stat is None:
            return
        if self.build is not None:
            self.announce(self._label(self.build), "")
            return
        holders = lock_holders(lock) or []
        if holders and self._under_way():
            self.build = _Build(stat.st_ino, holder_name(holders[0], self.peers), stat.st_mtime)
            text = self._label(self.build)
            self.announce(text, f"{text}: {self.name} in {self.build_dir}; {AHEAD}")

    def close(self) -> None:
        """The watch is over: a build seen under way is reported as ended."""
        self._end()

    def _under_way(self) -> bool:
        """With the lock held: no library yet, a compiler at work, or ninja's log written under this lock."""
        return (not self.library.exists() or bool(compilers(self.build_dir))
                or _signature(self.build_dir / ".ninja_log") != self._log_then)

    def _label(self, build: _Build) -> str:
        """The dashboard label of ``build``."""
        kind = "first run only" if self.first else "a rebuild"
        spent = format_duration(max(time.time() - build.since, 0.0))
        text = f"{build.who} is compiling DeepSpeed's {self.what} ({kind}, {spent} so far"
        text += f", usually {MINUTES} min)" if self.first else ")"
        if build.who != f"rank {self.rank}":
            text += f"; rank {self.rank} waits for it"
        return text

    def _end(self) -> None:
        """The build seen under way (if any) is over: say how long it took."""
        if self.build is None:
            return
        spent = format_duration(max(time.time() - self.build.since, 0.0))
        self.announce("", f"{self.build.who} finished compiling DeepSpeed's {self.what} ({self.name}) in {spent}")
        self.build, self.first = None, False
