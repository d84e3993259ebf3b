"""Telling the sink what the launch is doing before the workers can say anything themselves.

Between the dashboard's first frame and the workers' first output the kernel may be busy for seconds (the first
launch imports torch's distributed modules; forking N workers). A sink that offers ``phase(text)`` (the dashboard)
is told before each such step, so it shows "importing ..." instead of a frozen ``starting · 0.0s``. A step that
blocks the kernel's thread and may be slow can keep the sink's clock moving from a short-lived thread
(``ticking=True``); never around a fork, which must not happen while another thread may hold a lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from notebook_accel.events import TICK_SECONDS

__all__ = ["launch_phase"]


@contextmanager
def launch_phase(sink: Any, text: str, ticking: bool = False) -> Iterator[None]:
    """Show ``text`` on ``sink`` (if it has ``phase``) while the block runs; with ``ticking``, call its ``tick``
    every :data:`~notebook_accel.events.TICK_SECONDS` from a thread until the block ends.

    Example:
        >>> class Sink:
        ...     def phase(self, text): print(repr(text))
        >>> with launch_phase(Sink(), "starting 2 worker processes"):
        ...     pass
        'starting 2 worker processes'
        ''
    """
    announce = getattr(sink, "phase", None)
    tick = getattr(sink, "tick", None) if ticking else None
    if announce is None:
        yield
        return
    announce(text)
    done = threading.Event()
    thread = None
    if tick is not None:
        def keep_ticking() -> None:
            while not done.wait(TICK_SECONDS):
                tick(time.monotonic())

        thread = threading.Thread(target=keep_ticking, name="notebook-accel launch clock", daemon=True)
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread is not None:
            thread.join()
        announce("")
