"""A forked worker starts and ends the way a ``multiprocessing`` child does, so the kernel's queues work in it.

Every child ``multiprocessing`` forks (a ``Process``, a ``Pool`` worker, the workers torch elastic starts for
accelerate's ``notebook_launcher``) does two things a plain ``os.fork`` does not:

- **at its start** it drops the parent's finalizers and runs the after-fork hooks of what it inherited
  (``multiprocessing.util._run_after_forkers``): a ``Queue`` forgets the parent's feeder thread and buffer and
  starts its own on the first ``put``, a lock forgets who held it, a manager's proxy takes its own reference;
- **at its end** it runs its own finalizers (``multiprocessing.util._exit_function``): each queue it put into
  writes what is still buffered into its pipe before the process goes.

A worker here is forked by the launcher and leaves with ``os._exit``. Without these two steps a
``multiprocessing.Queue`` the kernel made and passed in lost the worker's puts: the inherited queue still pointed
at the kernel's feeder thread, which does not exist in the child, or the child's own feeder was cut off at exit.
accelerate's own ``test_notebook.py::test_fault_tolerant`` (a queue counting the attempts) hung on it.

Unlike ``multiprocessing``, the end is bounded: a queue nobody reads (its pipe full) or a child process that
never ends would keep the worker from exiting forever, so after :data:`FLUSH_SECONDS` the worker goes anyway and
says what was dropped.
"""

from __future__ import annotations

import itertools
import sys
import threading
from multiprocessing import process, util

__all__ = ["begin", "end", "FLUSH_SECONDS"]

#: how long a worker's end waits for its queues to be written and its own multiprocessing children to end
FLUSH_SECONDS = 10.0


def begin() -> None:
    """What a ``multiprocessing`` child does first: the kernel's finalizers and children are not this process's,
    and what it inherited is reset by its after-fork hooks. Call it once, early in the forked worker."""
    util._finalizer_registry.clear()  # type: ignore[attr-defined]
    process._children = set()  # type: ignore[attr-defined]
    process._process_counter = itertools.count(1)  # type: ignore[attr-defined]
    util._run_after_forkers()  # type: ignore[attr-defined]


def end(timeout: float = FLUSH_SECONDS) -> bool:
    """What a ``multiprocessing`` child does last: write what its queues still buffer, end its daemonic
    ``multiprocessing`` children and wait for the others, run its finalizers; for at most ``timeout`` seconds.

    Returns:
        ``True`` when it finished in time; ``False`` after a line on stderr saying what may have been dropped.
    """
    done = threading.Event()

    def run() -> None:
        try:
            util._exit_function()  # type: ignore[attr-defined]
        finally:
            done.set()

    threading.Thread(target=run, name="multiprocessing-exit", daemon=True).start()
    if done.wait(timeout):
        return True
    print(f"notebook-accel: this worker's multiprocessing queues or child processes did not finish within "
          f"{timeout:g} s of its function's end (a queue's pipe is full because nothing reads it, or a "
          "multiprocessing.Process it started still runs); it exits anyway, and items still buffered in those "
          "queues are dropped. Read the queue in the kernel while the run goes, or join the process in the "
          "function.", file=sys.stderr, flush=True)
    return False
