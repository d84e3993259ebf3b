"""The one interface both backends implement: a base sink whose optional hooks do nothing.

The launcher talks to every sink through :class:`BaseSink`: the three calls of the
:class:`~notebook_accel.events.Sink` protocol (``start``, ``handle``, ``finish``) and the optional hooks
(``handle_metrics``, ``phase``, ``tick``, ``attach_stop``), which here do nothing, or the least that keeps
every value (``handle_metrics`` hands a batch on one event at a time). The console (:mod:`.console`) and the
dashboard (``notebook_accel.widgets``) subclass it and override what they show; a sink given by a user (any
object with ``start``, ``handle`` and ``finish``) is adapted by :class:`~notebook_accel.display.sinks.GuardedSink`,
so nobody has to inherit from it.

A sink that moves a clock (elapsed time, rate, ETA) sets :attr:`BaseSink.needs_tick`; only then does the
supervising loop wake every :data:`~notebook_accel.events.TICK_SECONDS` without an event. Everyone else sleeps
until there is work.
"""

from __future__ import annotations

from collections.abc import Callable

from notebook_accel.events import Event, RunInfo, RunOutcome
from notebook_accel.metrics_batch import MetricsBatch

__all__ = ["BaseSink"]


class BaseSink:
    """A sink whose every method does nothing; subclasses override what they need.

    Attributes:
        needs_tick: whether :meth:`tick` wants calling at least every
            :data:`~notebook_accel.events.TICK_SECONDS` while no event arrives (default ``False``: the launcher
            then waits only for events and its own deadlines).

    Example:
        >>> from notebook_accel.events import Metrics
        >>> from notebook_accel.metrics_batch import pack
        >>> class Printer(BaseSink):
        ...     def handle(self, event): print(event.values)
        >>> [batch] = pack([Metrics(0, 1, {"loss": 0.5}, 1.0), Metrics(0, 2, {"loss": 0.25}, 2.0)])
        >>> Printer().handle_metrics(batch)
        {'loss': 0.5}
        {'loss': 0.25}
    """

    needs_tick: bool = False

    def start(self, info: RunInfo) -> None:
        """Called once before the first event, with what is being launched."""

    def handle(self, event: Event) -> None:
        """Called for each event, in arrival order."""

    def handle_metrics(self, batch: MetricsBatch) -> None:
        """Take a worker's metrics a flush at a time (many ``log`` calls in typed arrays).

        The default hands each record on to :meth:`handle` as the :class:`~notebook_accel.events.Metrics` event
        that was posted, in logging order; a sink that can take the arrays whole (min, max, last) overrides it.
        """
        for event in batch.events():
            self.handle(event)

    def finish(self, outcome: RunOutcome) -> None:
        """Called once at the end, whatever happened."""

    def phase(self, text: str) -> None:
        """What the launch is doing before the workers can say anything (``""``: that step is over); see
        :mod:`notebook_accel.display.phases`."""

    def tick(self, now: float) -> None:
        """The clock moved to ``now`` (``time.monotonic()``); called only when :attr:`needs_tick` is set."""

    def attach_stop(self, stop: Callable[[], None]) -> None:
        """A background run offers ``stop`` (call it to stop the run), e.g. for a stop button."""
