"""Knowing when a worker ended, and ending everything it started.

**Exit by pid, not by pipe.** multiprocessing's ``sentinel`` is a pipe whose write end every child of the
worker inherits (``os.fork``, a fork-context ``Process``, a DataLoader worker), so it reports the worker's
end only when the last of those ends too. A pidfd (Linux 5.3+) becomes readable when that one process
exits, whatever its children do; :func:`exit_fd` opens one, and falls back to the sentinel elsewhere.

**One process group per worker.** Each worker starts its own session (``os.setsid`` in the child), so
the processes it starts (``subprocess.Popen``, DataLoader workers, a forked helper) share its process
group. Every teardown ends the whole group (:func:`signal_group`), and once a worker has exited the
launcher ends what remains of its group (:func:`end_groups`): a run leaves nothing running. A process
that starts a session of its own (``start_new_session=True``, a daemon) leaves the group on purpose and
is not followed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

__all__ = ["exit_fd", "signal_group", "signal_worker", "group_members", "end_groups", "oom_kills"]

_KILL_WAIT = 2.0  # seconds to wait for SIGKILLed processes to be gone (uninterruptible sleep can delay it)


def exit_fd(pid: int) -> int | None:
    """A pidfd for ``pid`` (readable once the process has exited), or ``None`` where the OS has none.

    The caller owns the descriptor and closes it after reaping the process.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # ENOSYS on old kernels, EPERM under some sandboxes
        return None


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to every process in group ``pgid``; a group already empty is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_worker(pid: int, reaped: bool, sig: signal.Signals) -> None:
    """Send ``sig`` to a worker and to its process group (whose id is its pid). The worker itself is signalled
    by pid only while it is not reaped (a reaped pid may belong to another process by now), and also because
    it may not have called ``setsid()`` yet."""
    if pid <= 0:
        return
    if not reaped:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    signal_group(pid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in group ``pgid``, read from ``/proc``; without ``/proc``, ``[pgid]`` when
    the group still exists (``killpg(pgid, 0)`` succeeds), else ``[]``. An empty group (the usual case after a
    run) costs one system call, not a walk of ``/proc``."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [pgid]
    members = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses; split after the last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def end_groups(pgids: Iterable[int], grace: float) -> list[int]:
    """End what is left of each group: SIGTERM, up to ``grace`` seconds for it to go, then SIGKILL.

    Returns:
        The pids that were still running and were signalled (empty on the usual path, costing no wait).
    """
    remaining = {pgid: group_members(pgid) for pgid in pgids}
    remaining = {pgid: pids for pgid, pids in remaining.items() if pids}
    signalled = sorted(pid for pids in remaining.values() for pid in pids)
    if not remaining:
        return []
    for pgid in remaining:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = {pgid: pids for pgid in remaining if (pids := group_members(pgid))}
    for pgid in remaining:
        signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_WAIT
    while remaining and time.monotonic() < deadline:  # SIGKILL is delivered asynchronously
        time.sleep(0.01)
        remaining = {pgid: pids for pgid in remaining if (pids := group_members(pgid))}
    return signalled


def oom_kills(vmstat: str = "/proc/vmstat") -> int | None:
    """How many processes the system's out-of-memory killer has killed since boot (``oom_kill`` in
    ``/proc/vmstat``, Linux 4.13+); ``None`` where that cannot be read. A rise during a run is the evidence
    that a SIGKILLed worker may have been its victim."""
    try:
        with open(vmstat, "rb") as file:
            for line in file:
                name, _, value = line.partition(b" ")
                if name == b"oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None
