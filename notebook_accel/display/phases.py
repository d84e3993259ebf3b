"""Telling the sink what the launch is doing before the workers can say anything themselves.

Between the dashboard's first frame and the workers' first output the kernel may be busy for seconds (the first
launch imports torch's distributed modules; forking N workers). Every sink's ``phase(text)`` (shown by the dashboard)
is told before each such step, so it shows "importing ..." instead of a frozen ``starting · 0.0s``. A step that
blocks the kernel's thread and may be slow can keep the sink's clock moving from a short-lived thread
(``ticking=True``); never around a fork, which must not happen while another thread may hold a lock.

Code run inside a phase (a placement's ``start``) finds it with :func:`current_phase`, without being handed the sink:
it can say more (:meth:`LaunchPhase.show`, e.g. "queued: job 1234 (Resources)" while Slurm has not granted an
allocation), open a ticking phase of its own (:meth:`LaunchPhase.nested`) and read the launch's deadline (the
``timeout=`` of the call, when one was given).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass

from notebook_accel.display.base import BaseSink
from notebook_accel.events import TICK_SECONDS
from notebook_accel.periodic import every

__all__ = ["launch_phase", "current_phase", "LaunchPhase"]


@dataclass
class LaunchPhase:
    """The phase a launch is in: its sink, its text, and the launch's deadline (``time.monotonic()``; ``None``: no
    ``timeout=``)."""

    sink: BaseSink
    text: str
    deadline: float | None = None
    ticks: bool = False  # a clock thread (this phase's or an enclosing one's) ticks the sink

    def show(self, text: str) -> None:
        """Say ``text`` instead of the phase's own words (``""``: back to them)."""
        self.sink.phase(text or self.text)

    def nested(self, text: str, ticking: bool = False) -> AbstractContextManager[LaunchPhase]:
        """A phase inside this one (same sink and deadline); this one's words come back when it ends."""
        return launch_phase(self.sink, text, ticking, self.deadline)


_CURRENT: ContextVar[LaunchPhase | None] = ContextVar("notebook_accel_launch_phase", default=None)


def current_phase() -> LaunchPhase | None:
    """The innermost :func:`launch_phase` this thread is in, or ``None``."""
    return _CURRENT.get()


@contextmanager
def launch_phase(sink: BaseSink, text: str, ticking: bool = False,
                 deadline: float | None = None) -> Iterator[LaunchPhase]:
    """Show ``text`` on ``sink`` (its :meth:`~BaseSink.phase`) while the block runs; with ``ticking``, and when the
    sink ``needs_tick``, call its ``tick`` every :data:`~notebook_accel.events.TICK_SECONDS` from a thread until
    the block ends. ``deadline``: the launch's (see :func:`current_phase`). At the end the enclosing phase's words
    come back (``""`` outside any).

    Example:
        >>> class Sink(BaseSink):
        ...     def phase(self, text): print(repr(text))
        >>> with launch_phase(Sink(), "starting 2 worker processes"):
        ...     pass
        'starting 2 worker processes'
        ''
    """
    outer = _CURRENT.get()
    already = outer is not None and outer.sink is sink and outer.ticks  # one clock per sink, never two at once
    own = ticking and sink.needs_tick and not already
    phase = LaunchPhase(sink, text, deadline, already or own)
    token = _CURRENT.set(phase)
    sink.phase(text)
    clock = every(TICK_SECONDS, lambda: sink.tick(time.monotonic()), "notebook-accel launch clock") \
        if own else nullcontext()
    try:
        with clock:
            yield phase
    finally:
        _CURRENT.reset(token)
        sink.phase(outer.text if outer is not None and outer.sink is sink else "")
