"""Shielding the launcher from a faulty sink, and adapting a user's plain sink object to :class:`BaseSink`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from notebook_accel.display.base import BaseSink
from notebook_accel.events import Event, RunInfo, RunOutcome, Sink
from notebook_accel.metrics_batch import MetricsBatch

__all__ = ["GuardedSink"]


_OPTIONAL = ("handle_metrics", "phase", "tick", "attach_stop")  # the hooks a plain sink object may leave out


def _offered(sink: Sink) -> frozenset[str]:
    """The optional hooks ``sink`` offers: every one for a :class:`BaseSink`, those it defines for another object."""
    if isinstance(sink, BaseSink):
        return frozenset(_OPTIONAL)
    return frozenset(name for name in _OPTIONAL if getattr(sink, name, None) is not None)


class GuardedSink(BaseSink):
    """Wraps a sink so an exception in it is reported once and the sink is then dropped (the run goes on).

    It is also where a user's sink meets :class:`BaseSink`: any object with ``start``, ``handle`` and ``finish``
    (a :class:`~notebook_accel.events.Sink`) may offer some of the optional hooks or none. They are looked up once,
    here; a hook the sink does not offer does what :class:`BaseSink`'s does (a metrics batch arrives as one
    ``handle`` call per posted event), and ``needs_tick`` is the sink's own, or whether it defines ``tick``.

    Args:
        sink: the sink to shield.
    """

    def __init__(self, sink: Sink) -> None:
        self._sink: Sink | None = sink
        self._offered = _offered(sink)
        self.needs_tick = sink.needs_tick if isinstance(sink, BaseSink) else "tick" in self._offered

    def _call(self, method: str, arg: Any) -> None:
        """Call ``sink.method(arg)``; on error, say so on stderr and stop using the sink."""
        sink = self._sink
        if sink is None:
            return
        try:
            getattr(sink, method)(arg)
        except Exception as e:  # noqa: BLE001 - a display bug must not kill the training run
            self._sink = None
            print(
                f"notebook-accel: {type(sink).__name__}.{method} raised {type(e).__name__}: {e}; "
                "the run continues without it (please report this bug)",
                file=sys.stderr,
            )

    def _hook(self, method: str, arg: Any) -> None:
        """Call an optional hook when the sink offers it."""
        if method in self._offered:
            self._call(method, arg)

    def start(self, info: RunInfo) -> None:
        """Forward :meth:`BaseSink.start`."""
        self._call("start", info)

    def handle(self, event: Event) -> None:
        """Forward :meth:`BaseSink.handle`."""
        self._call("handle", event)

    def handle_metrics(self, batch: MetricsBatch) -> None:
        """Forward a worker's metrics batch: whole when the sink takes batches, else as the ``Metrics`` events that
        were posted, each through the guarded :meth:`handle`."""
        if "handle_metrics" in self._offered:
            self._call("handle_metrics", batch)
        else:
            super().handle_metrics(batch)

    def finish(self, outcome: RunOutcome) -> None:
        """Forward :meth:`BaseSink.finish`."""
        self._call("finish", outcome)

    def phase(self, text: str) -> None:
        """Forward :meth:`BaseSink.phase` (what the launch is doing; see :mod:`.phases`) when the sink has one."""
        self._hook("phase", text)

    def tick(self, now: float) -> None:
        """Forward :meth:`BaseSink.tick` when the sink has one."""
        self._hook("tick", now)

    def attach_stop(self, stop: Callable[[], None]) -> None:
        """Give the sink a way to stop a background run, if it offers one (the dashboard's stop button)."""
        self._hook("attach_stop", stop)
