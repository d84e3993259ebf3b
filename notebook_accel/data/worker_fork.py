"""DataLoader workers forked so that a worker born deadlocked is replaced instead of hanging the run.

On CPython 3.10 and 3.11 before 3.11.8 a forked child can deadlock before it runs a single line of Python
(CPython gh-112275): the child re-takes the interpreter's thread-list lock before re-initialising it, so when any
other thread of the parent held that lock at the instant of the fork, the child waits for it forever. In a
training process the other thread is real and busy: gloo's and NCCL's work threads drop the last reference to a
collective's tensors after it completes, and the tensor's Python object is released through
``PyThreadState_New``, which takes that lock without the GIL. A DataLoader that forks its workers right after a
collective (the next epoch after ``gather_for_metrics``) then loses the race about once in a few hundred forks;
the loader waits for a batch from a worker that never started, and the run hangs with nothing said.

:class:`GuardedForkContext` is a ``fork`` start-method context whose processes tell the parent, with one byte
on a pipe, that they reached Python. A child that stays silent, single-threaded and asleep on a futex without
using any CPU (a child that has not reached Python yet has nothing to wait for) is killed and forked again. A
healthy child costs one pipe and the wait for its first byte (well under a millisecond to a few ms).

:func:`worker_context` gives the context to use for a prepared loader: the guarded one where the interpreter
has the bug and the loader would fork its workers, else the loader's own setting. :func:`check_importable`
refuses, at prepare time, workers started as fresh interpreters ('spawn', 'forkserver') that would have to
import a class or function defined in a notebook (each would die at birth with a bare "exited unexpectedly").
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import sys
import time
import types
from multiprocessing import popen_fork, util
from multiprocessing.context import ForkContext, ForkProcess
from typing import Any

__all__ = ["GuardedForkContext", "WorkerStartError", "check_importable", "fork_child_can_deadlock", "worker_context"]

_log = logging.getLogger(__name__)

ATTEMPTS = 5  # forks tried for one worker before giving up
SUSPECT_AFTER = 1.0  # seconds of silence before the child's state is looked at
QUIET_FOR = 0.5  # seconds a suspected child must stay asleep without using CPU to count as deadlocked
POLL = 0.05


class WorkerStartError(RuntimeError):
    """A DataLoader worker cannot start: deadlocked at birth on every try, or it could not import its dataset."""


def fork_child_can_deadlock(version: tuple[int, ...] | None = None) -> bool:
    """True where CPython's fork child can deadlock on the thread-list lock (gh-112275): 3.10, 3.11 < 3.11.8."""
    major, minor, micro = version[:3] if version else sys.version_info[:3]
    if (major, minor) == (3, 11):
        return micro < 8
    return (major, minor) <= (3, 10)


def worker_context(num_workers: int, context: Any) -> Any:
    """The ``multiprocessing_context`` a prepared loader with ``num_workers`` workers should use.

    ``context`` (the user's setting) is kept unless it is ``None`` (the default start method) or ``"fork"``, the
    interpreter has the fork bug and the start method is fork; then a :class:`GuardedForkContext`.
    """
    if num_workers <= 0 or not fork_child_can_deadlock():
        return context
    if context is None:
        method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
    elif isinstance(context, str):
        method = context
    else:
        return context  # a context object of the user's own: theirs to choose
    return GuardedForkContext() if method == "fork" else context


def _start_method(context: Any) -> str:
    """The start method a DataLoader with ``multiprocessing_context=context`` starts its workers with."""
    if context is None:
        return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method()
    return context if isinstance(context, str) else str(context.get_start_method())


def _main_is_importable() -> bool:
    """Whether a fresh interpreter can re-create ``__main__`` (a script or ``-m`` module; not a notebook's)."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None):
        return True
    path = getattr(main, "__file__", None)
    return isinstance(path, str) and os.path.exists(path)


def check_importable(num_workers: int, context: Any, parts: dict[str, Any]) -> None:
    """Refuse workers started as fresh interpreters that would need a class or function of the notebook.

    ``parts`` names what the workers get (``{"dataset": ..., "collate_fn": ..., "worker_init_fn": ...}``). A
    'spawn' or 'forkserver' worker imports each one's class (or the function) by module and name; one defined in
    a notebook (``__main__`` with no file) cannot be found there, and torch only says the worker "exited
    unexpectedly".

    Raises:
        WorkerStartError: such a worker would need a class or function defined in ``__main__``.
    """
    if num_workers <= 0 or _start_method(context) not in ("spawn", "forkserver") or _main_is_importable():
        return
    for name, value in parts.items():
        made = value if isinstance(value, (type, types.FunctionType)) else type(value)
        if value is not None and made.__module__ == "__main__":
            raise WorkerStartError(
                f"DataLoader(multiprocessing_context={_start_method(context)!r}) starts its {num_workers} workers "
                f"as new interpreters, which import the {name}'s {made.__qualname__!r} by name, but it is defined "
                "in the notebook (__main__), where they cannot find it: every worker would die at birth. Move "
                f"{made.__qualname__} into a .py file and import it from there, or leave multiprocessing_context "
                "unset (forked workers share the notebook's definitions)"
            )


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, cpu ticks, threads)`` of ``pid`` from ``/proc``, or ``None`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # fields[0] is field 3 (state); utime and stime are fields 14 and 15, num_threads field 20
        return fields[0], int(fields[11]) + int(fields[12]), int(fields[17])
    except (IndexError, ValueError):
        return None


def _waits_on_futex(pid: int) -> bool:
    """Whether ``pid`` sleeps in a futex wait, where the kernel says so (``True`` where it does not)."""
    try:
        with open(f"/proc/{pid}/wchan", encoding="ascii", errors="replace") as handle:
            wchan = handle.read().strip()
    except OSError:
        return True
    return wchan in ("", "0") or "futex" in wchan


class _Watch:
    """What a silent child has done since it was first suspected."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.ticks = -1

    def deadlocked(self, pid: int, now: float) -> bool:
        """True once ``pid`` has been asleep, alone and without using CPU for :data:`QUIET_FOR` seconds."""
        stat = _proc_stat(pid)
        if stat is None:
            return False  # no /proc (or the child is gone): nothing to judge by, keep waiting
        state, ticks, threads = stat
        if state != "S" or threads != 1 or ticks != self.ticks or not _waits_on_futex(pid):
            self.since, self.ticks = now, ticks
            return False
        return self.since is not None and now - self.since >= QUIET_FOR


class _GuardedPopen(popen_fork.Popen):
    """``popen_fork.Popen`` whose child says when it reached Python, and is forked again when it cannot."""

    def _launch(self, process_obj: Any) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            if self._launch_once(process_obj):
                if attempt > 1:
                    _log.info("a DataLoader worker was forked again after %d deadlocked at birth "
                              "(CPython gh-112275)", attempt - 1)
                return
            GuardedForkContext.restarts += 1
        raise WorkerStartError(
            f"a DataLoader worker deadlocked at birth {ATTEMPTS} times in a row: a forked process on Python "
            f"{sys.version.split()[0]} can wait forever on a lock another thread held at the fork (CPython "
            "gh-112275, fixed in 3.11.8). Use Python 3.11.8 or newer, or build the DataLoader with "
            "multiprocessing_context='forkserver' (its dataset must then be picklable)"
        )

    def _launch_once(self, process_obj: Any) -> bool:
        """Fork once; True when the child reached Python (or ended), False when it was found deadlocked."""
        code = 1
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(ready_r)
                os.write(ready_w, b"\0")
                os.close(ready_w)
                os.close(parent_r)
                os.close(parent_w)
                code = process_obj._bootstrap(parent_sentinel=child_r)
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(child_w)
        os.close(child_r)
        try:
            alive = self._await_first_byte(ready_r)
        finally:
            os.close(ready_r)
        if not alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            os.close(parent_r)
            os.close(parent_w)
            return False
        self.finalizer = util.Finalize(self, util.close_fds, (parent_r, parent_w))  # type: ignore[attr-defined]
        self.sentinel = parent_r
        return True

    def _await_first_byte(self, ready_r: int) -> bool:
        """Wait for the child's byte (or its end); False when it is deadlocked before reaching Python."""
        started = time.monotonic()
        watch = _Watch()
        while True:
            readable, _, _ = select.select([ready_r], [], [], POLL)
            if readable:
                return True  # the byte, or end of file: a child that ended is the loader's to notice
            now = time.monotonic()
            if now - started >= SUSPECT_AFTER and watch.deadlocked(self.pid, now):
                return False


class _GuardedForkProcess(ForkProcess):
    """A fork-started process launched by :class:`_GuardedPopen`."""

    _start_method = "fork"

    @staticmethod
    def _Popen(process_obj: Any) -> _GuardedPopen:
        return _GuardedPopen(process_obj)


class GuardedForkContext(ForkContext):
    """The ``fork`` start method, with children found deadlocked at birth killed and forked again.

    Attributes:
        restarts: children replaced so far in this process (all contexts together).
    """

    Process = _GuardedForkProcess
    restarts = 0

