"""A rank's notice while DeepSpeed sets up and may compile an op: what the dashboard and the console show, and
the lines on stderr.

:func:`announcing` watches every op folder under torch's extensions folder while its block runs (one
:class:`~.build_watch.BuildWatch` per folder, made when a folder's lock first appears, so an op nobody expected
(``cpu_adam`` for an offloaded optimizer) is seen too), from a thread that looks once a second, and keeps one
:class:`~notebook_accel.events.Phase` for the rank: the labels of the builds under way, joined. An op known not to
be built yet is announced at once, before anyone holds its lock. The ranks are named from the pids of this run's
workers (:func:`run_pids`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from notebook_accel import channel
from notebook_accel.engines.deepspeed.build_watch import AHEAD, MINUTES, BuildWatch
from notebook_accel.events import Phase
from notebook_accel.periodic import every

__all__ = ["KnownOp", "run_pids", "announcing"]

_POLL_SECONDS = 1.0  # how often the build folders are looked at while DeepSpeed sets up


@dataclass(frozen=True)
class KnownOp:
    """An op DeepSpeed is expected to build here: its name (its folder's), what it is for people, its folder."""

    name: str
    what: str
    build_dir: Path


def run_pids(rank: int) -> dict[int, int]:
    """The pid of every worker of this run on this machine, with its rank, gathered over the default process group
    when it is a gloo group of several processes (every rank calls this at the same point: it is a collective);
    elsewhere only this process's own."""
    own = {os.getpid(): rank}
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return own
    if dist.get_world_size() == 1 or dist.get_backend() != "gloo":
        return own
    host = socket.gethostname()
    entries: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(entries, (host, os.getpid(), rank))
    return {pid: r for h, pid, r in entries if h == host}


def _announce(rank: int, text: str | None, line: str) -> None:
    """The phase (short: it is a dashboard label; ``None``: unchanged) to the kernel, and the longer ``line`` on
    stderr (``""``: none), for the rank's output pane, the console and the log file."""
    writer = channel.current()
    if writer is not None and text is not None:
        writer.send(Phase(rank, text, time.time()))
    if line:
        print(f"notebook-accel: {line}", file=sys.stderr, flush=True)


class _RankPhase:
    """This rank's phase: a label per op being built, joined into one :class:`Phase` text, sent when it changes
    and cleared at the end."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.labels: dict[str, str] = {}
        self.sent = ""

    def say(self, name: str, text: str, line: str) -> None:
        """Op ``name``'s label is ``text`` now (``""``: none); ``line`` goes to stderr (``""``: nothing)."""
        if text:
            self.labels[name] = text
        else:
            self.labels.pop(name, None)
        joined = "; ".join(self.labels.values())
        _announce(self.rank, joined if joined != self.sent else None, line)
        self.sent = joined

    def sayer(self, name: str) -> Callable[[str, str], None]:
        """:meth:`say` for op ``name``."""
        return lambda text, line: self.say(name, text, line)

    def clear(self) -> None:
        """No label left (an empty phase is sent if one was shown)."""
        if self.sent:
            _announce(self.rank, "", "")
            self.sent = ""


class _Folders:
    """The watches of every op folder under ``root``: the known ops' from the start, any other's from when its
    lock first appears."""

    def __init__(self, root: Path, known: Sequence[KnownOp], make: Callable[[str, str, Path], BuildWatch]) -> None:
        self.root, self.make = root, make
        self.watches = {op.name: make(op.name, op.what, op.build_dir) for op in known}

    def poll(self) -> None:
        """Look at every folder once (a process or file that goes away mid-look is looked at again next time)."""
        try:
            locked = [entry for entry in self.root.iterdir() if (entry / "lock").exists()]
        except OSError:
            locked = []
        for entry in locked:
            if entry.name not in self.watches:
                self.watches[entry.name] = self.make(entry.name, f"{entry.name} op", entry)
        for watch in list(self.watches.values()):
            try:
                watch.poll()
            except (OSError, ValueError, IndexError):
                continue

    def close(self) -> None:
        """Report the builds still seen under way as ended."""
        for watch in self.watches.values():
            watch.close()


@contextmanager
def announcing(rank: int, peers: Mapping[int, int], root: Path, known: Sequence[KnownOp]) -> Iterator[None]:
    """While the block runs, say when an op under ``root`` (torch's extensions folder) is being built, by whom and
    for how long, and when it ends; clear the notice after.

    Args:
        rank: this process's rank.
        peers: pid to rank of this run's workers on this machine (:func:`run_pids`).
        root: the folder that holds one build folder per op.
        known: the ops expected to be built here (announced at once when not built yet).
    """
    phase = _RankPhase(rank)
    folders = _Folders(root, known, lambda name, what, folder: BuildWatch(name, what, folder, rank, peers,
                                                                         phase.sayer(name)))
    folders.poll()
    for op in known:
        if op.name not in phase.labels and not folders.watches[op.name].library.exists():
            text = f"DeepSpeed is compiling its {op.what} (first run only, about {MINUTES} min)"
            phase.say(op.name, text, f"{text}: {op.name} in {op.build_dir}; {AHEAD}")
    try:
        with every(_POLL_SECONDS, folders.poll, "notebook-accel build watch"):
            yield
    finally:
        folders.poll()
        folders.close()
        phase.clear()
