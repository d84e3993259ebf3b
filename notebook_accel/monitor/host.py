"""A process tree's CPU use and resident memory and the machine's memory (through psutil), and the memory cgroup
limit a process runs under (a container's or a job scheduler's, often far below the machine's).

A worker's DataLoader workers and whatever else it started are its children: their CPU time and memory count as
the worker's (a rank that is slow because its eight loader processes fight for four cores shows as busy). Except
the compiler's processes (torch.compile's workers, the C++ compiler, see :mod:`.compiler`): their CPU counts (the rank
is compiling, not idle) but their memory is the compiler's, read apart, never in the rank's own figure or its peak.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import psutil

from notebook_accel.monitor.compiler import is_compiler

__all__ = ["TreeMeter", "TreeReading", "cgroup_memory", "child_pids", "machine_memory"]


class TreeReading(NamedTuple):
    """One read of a process tree: CPU % since the previous read (100 = one core), the resident bytes of the tree
    without the compiler's processes, and those of the compiler's processes (0 when none run)."""

    cpu_percent: float
    rss_bytes: int
    compiler_rss_bytes: int = 0


class TreeMeter:
    """CPU % and resident bytes of ``pid`` and its descendants (the compiler's processes' bytes apart), between one
    :meth:`read` and the next.

    CPU % is the tree's CPU seconds over wall seconds since the previous read (100 = one core busy). A child
    that ended between two reads takes its CPU seconds with it; the loss is at most one interval's worth.

    Example:
        >>> import os
        >>> meter = TreeMeter(os.getpid())
        >>> reading = meter.read()
        >>> reading.rss_bytes > 0, reading.compiler_rss_bytes
        (True, 0)
    """

    def __init__(self, pid: int, fresh: bool = False) -> None:
        self.pid = pid
        self._process: psutil.Process | None = None
        self._cpu: dict[int, float] = {}  # CPU seconds per member at the previous read
        self._last = time.monotonic()
        self._members: dict[int, psutil.Process] = {}  # the descendants found at the previous read
        try:
            self._process = psutil.Process(pid)
        except psutil.Error:
            self._process = None
        if fresh:  # forked just now: it has used no CPU yet, so no read (a walk of /proc) is needed for a baseline
            self._cpu = {pid: 0.0}
        else:
            self.read()

    def read(self) -> TreeReading:
        """The tree's figures now; all zero once the process is gone."""
        now = time.monotonic()
        elapsed, self._last = max(now - self._last, 1e-6), now
        if self._process is None:
            return TreeReading(0.0, 0)
        try:
            members = [self._process, *self._descendants()]  # a parent before its children
        except psutil.Error:
            return TreeReading(0.0, 0)
        cpu: dict[int, float] = {}
        rss = compiler_rss = 0
        compilers: set[int] = set()
        busy = 0.0
        for member in members:
            compiler = member is not self._process and is_compiler(member, compilers)
            if compiler:
                compilers.add(member.pid)  # its children are the compiler's too
            try:
                with member.oneshot():
                    times = member.cpu_times()
                    seconds = times.user + times.system
                    resident = member.memory_info().rss
            except psutil.Error:
                continue
            if compiler:
                compiler_rss += resident
            else:
                rss += resident
            cpu[member.pid] = seconds
            busy += seconds - self._cpu.get(member.pid, 0.0)  # a member new since the last read: all of it
        first = not self._cpu
        self._cpu = cpu
        return TreeReading(0.0 if first else max(0.0, 100.0 * busy / elapsed), rss, compiler_rss)


    def _descendants(self) -> list[psutil.Process]:
        """The tree below the process, parents first: from its threads' ``children`` files (a few reads for a
        worker's tree), where psutil's ``children()`` reads every process of the machine, each sample, which on a
        busy machine cost the kernel a few percent of a core while nothing else happened. Where those files do not
        exist (a kernel without ``CONFIG_PROC_CHILDREN``, not Linux), psutil's walk."""
        assert self._process is not None
        pids = child_pids(self._process.pid)
        if pids is None:
            return list(self._process.children(recursive=True))
        known, self._members = self._members, {}
        for pid in pids:  # a member's Process object is kept from one read to the next (making one reads /proc)
            member = known.get(pid)
            if member is None:
                try:
                    member = psutil.Process(pid)
                except psutil.Error:
                    continue
            self._members[pid] = member
        return list(self._members.values())


def child_pids(pid: int) -> list[int] | None:
    """The pids below ``pid`` (children, then theirs), from ``/proc/<pid>/task/<tid>/children``; ``None`` where the
    system has no such files. A process that ends meanwhile is skipped.

    Example:
        >>> import os, subprocess, sys
        >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        >>> found = child_pids(os.getpid())
        >>> found is None or child.pid in found
        True
        >>> child.kill(); _ = child.wait()
    """
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            if parent == pid and not os.path.isdir("/proc/self/task"):
                return None  # no /proc (not Linux)
            continue  # ended meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children", "rb") as file:
                    kids = [int(k) for k in file.read().split()]
            except FileNotFoundError:
                if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
                    return None  # a kernel without CONFIG_PROC_CHILDREN
                continue  # the thread ended meanwhile
            except OSError:
                continue
            found.extend(kids)
            queue.extend(kids)
    return found


def machine_memory() -> tuple[int, int]:
    """``(available_bytes, total_bytes)`` of the machine's memory (what can be used without swapping).

    Example:
        >>> available, total = machine_memory()
        >>> 0 < available <= total
        True
    """
    memory = psutil.virtual_memory()
    return int(memory.available), int(memory.total)


_UNLIMITED = 1 << 60  # cgroup files write "max" (v2) or a huge page-rounded number (v1) for "no limit"
_CGROUP_ROOT = "/sys/fs/cgroup"


def _read_int(path: str) -> int | None:
    """An integer file of the cgroup file system, ``None`` when absent, unreadable or "max"."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < _UNLIMITED else None


def _group_dirs(pid: int) -> list[tuple[str, str, str]]:
    """``(folder, limit file, usage file)`` of ``pid``'s memory cgroup and each ancestor, innermost first."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # cgroup v1
            base, limit, usage = f"{_CGROUP_ROOT}/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
        elif controllers == "":  # cgroup v2 (mounted at the root, or at unified/ beside v1)
            base = _CGROUP_ROOT if os.path.exists(f"{_CGROUP_ROOT}/cgroup.controllers") else f"{_CGROUP_ROOT}/unified"
            limit, usage = "memory.max", "memory.current"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        found += [(os.path.join(base, *parts[:depth]), limit, usage) for depth in range(len(parts), -1, -1)]
    return found


def cgroup_memory(pid: int) -> tuple[int | None, int | None]:
    """``(limit, usage)`` in bytes of the tightest memory cgroup limit over ``pid`` (a container's, or one a job
    scheduler set), or ``(None, None)`` when nothing limits it below the machine's memory.

    Example:
        >>> import os
        >>> limit, usage = cgroup_memory(os.getpid())
        >>> limit is None or limit > 0
        True
    """
    best: tuple[int | None, int | None] = (None, None)
    for folder, limit_file, usage_file in _group_dirs(pid):
        limit = _read_int(os.path.join(folder, limit_file))
        if limit is not None and (best[0] is None or limit < best[0]):
            best = (limit, _read_int(os.path.join(folder, usage_file)))
    return best
