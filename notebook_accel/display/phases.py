"""Telling the sink what the launch is doing before the workers can say anything themselves.

Between the dashboard's first frame and the workers' first output the kernel may be busy for seconds (the first
launch imports torch's distributed modules; forking N workers). Every sink's ``phase(text)`` (shown by the dashboard)
is told before each such step, so it shows "importing ..." instead of a frozen ``starting · 0.0s``. A step that
blocks the kernel's thread and may be slow can keep the sink's clock moving from a short-lived thread
(``ticking=True``); never around a fork, which must not happen while another thread may hold a lock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from notebook_accel.display.base import BaseSink
from notebook_accel.events import TICK_SECONDS
from notebook_accel.periodic import every

__all__ = ["launch_phase"]


@contextmanager
def launch_phase(sink: BaseSink, text: str, ticking: bool = False) -> Iterator[None]:
    """Show ``text`` on ``sink`` (its :meth:`~BaseSink.phase`) while the block runs; with ``ticking``, and when the
    sink ``needs_tick``, call its ``tick`` every :data:`~notebook_accel.events.TICK_SECONDS` from a thread until
    the block ends.

    Example:
        >>> class Sink(BaseSink):
        ...     def phase(self, text): print(repr(text))
        >>> with launch_phase(Sink(), "starting 2 worker processes"):
        ...     pass
        'starting 2 worker processes'
        ''
    """
    sink.phase(text)
    clock = every(TICK_SECONDS, lambda: sink.tick(time.monotonic()), "notebook-accel launch clock") \
        if ticking and sink.needs_tick else nullcontext()
    try:
        with clock:
            yield
    finally:
        sink.phase("")
