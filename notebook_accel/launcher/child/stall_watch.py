"""A worker's stall watch: which collective (or which line) its training thread has been waiting in.

A hung run shows in the kernel as every rank idle (:mod:`notebook_accel.monitor.idle`); which rank waits in which
collective, and which one never came, only the workers can tell. A daemon thread looks at the training thread's
current frame every :data:`INTERVAL` seconds (``sys._current_frames``: gloo and nccl wait with the GIL released, so
it gets to run). When that thread has stayed in the same frame at the same instruction for :data:`AFTER` seconds
(judged by the frame's id, code and instruction: the watch keeps no frame, so a finished one's locals are freed as
usual; a function called again and again, each time waiting at the same point, reads as one stay),
busy (running or runnable) under :data:`BUSY_SHARE` of the time and posting nothing (no step's times, no metric, no
loader progress), the watch sends one :class:`~notebook_accel.events.Stalled` naming where it is
(:mod:`.blocked_in`), and one more when it moves on. A collective costs nothing more: nothing is added to its path.

A rank merely slow in its own compute never gets a report: its training thread runs, or waits for a core on a loaded
machine, and both count as busy (the thread's ``schedstat``: time on a core plus time runnable; where Linux has no
such file, the process's CPU time). A long C call holding the GIL keeps the watch from running at all until it
returns, and it then sees that time. The watch is started and stopped around the user's function by
:func:`~.main.run_and_report`, so no thread outlives it; it sends through the event writer's ``send``, whose lock
already keeps its messages whole beside the training thread's.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import CodeType

from notebook_accel.events import Stalled
from notebook_accel.launcher.child.blocked_in import Place, blocked_in

__all__ = ["StallWatch", "INTERVAL", "AFTER", "BUSY_SHARE"]

INTERVAL = 0.5  # seconds between two looks at the training thread
AFTER = 2.0  # seconds in one place, idle and silent, before it is reported
BUSY_SHARE = 0.25  # the share of that stretch the thread ran or was runnable from which it works, not waits


def _busy_clock(native_id: int) -> Callable[[], float]:
    """Seconds the thread ``native_id`` has run or been runnable (Linux's ``schedstat``), else the process's CPU
    time."""
    path = f"/proc/self/task/{native_id}/schedstat"

    def schedstat() -> float:
        with open(path, "rb") as f:
            ran, runnable = f.read().split()[:2]
        return (int(ran) + int(runnable)) / 1e9

    try:
        schedstat()
    except (OSError, ValueError):
        return time.process_time
    return schedstat


class StallWatch:
    """Watches one thread (default: the calling one) and reports where it stalls through ``send``.

    Args:
        rank: the worker's rank, for the events.
        send: sends one event to the kernel (the event writer's ``send``).
        activity: a count that moves when the worker reports progress (the event writer's ``drained``).
        interval, after, busy_share: see :data:`INTERVAL`, :data:`AFTER`, :data:`BUSY_SHARE`.

    Example:
        >>> sent = []
        >>> watch = StallWatch(0, sent.append, lambda: 0, interval=0.05, after=0.2).start()
        >>> time.sleep(0.6); watch.stop()
        >>> [(e.collective, e.call, e.stuck) for e in sent]
        [('', 'time.sleep', True), ('', 'time.sleep', False)]
    """

    def __init__(self, rank: int, send: Callable[[Stalled], None], activity: Callable[[], int],
                 interval: float = INTERVAL, after: float = AFTER, busy_share: float = BUSY_SHARE) -> None:
        self._rank, self._send, self._activity = rank, send, activity
        self._interval, self._after, self._busy = interval, after, busy_share
        self._target = threading.get_ident()
        self._busy_seconds = _busy_clock(threading.get_native_id())
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="notebook-accel-stall-watch", daemon=True)
        # The frame's id, its code and instruction, the activity count: never the frame itself, whose locals (a
        # batch, activations) would then outlive it until the next look.
        self._seen: tuple[int, CodeType, int, int] | None = None
        self._since = (0.0, 0.0)  # when it was first seen there: the clock and the thread's busy seconds
        self._reported: Place | None = None

    def start(self) -> StallWatch:
        """Start watching (returns ``self``)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and join the thread; a stall it reported is reported over (the function returned or raised)."""
        self._done.set()
        self._thread.join(timeout=5.0)
        self._seen = None
        self._moved_on()

    def _run(self) -> None:
        """The thread's body: a look every interval until stopped."""
        while not self._done.wait(self._interval):
            try:
                self._look(time.monotonic(), self._busy_seconds())
            except Exception:  # noqa: BLE001 - a report is a nicety: never let it disturb the run
                return

    def _look(self, now: float, busy: float) -> None:
        """Compare the thread's place with the last look's; report a stall once it has lasted long enough."""
        frame = sys._current_frames().get(self._target)
        if frame is None or self._done.is_set():
            return
        here = (id(frame), frame.f_code, frame.f_lasti, self._activity())
        seen = self._seen
        if seen != here:
            self._moved_on()
            self._seen, self._since = here, (now, busy)
            return
        waited = now - self._since[0]
        if busy - self._since[1] > self._busy * max(waited, self._interval):  # working in one long call
            self._since = (now, busy)
        elif self._reported is None and waited >= self._after:
            self._reported = place = blocked_in(frame)
            self._send(Stalled(self._rank, place.collective, place.call, place.file, place.line))

    def _moved_on(self) -> None:
        """Report that a reported stall is over."""
        place, self._reported = self._reported, None
        if place is not None:
            self._send(Stalled(self._rank, place.collective, place.call, place.file, place.line, stuck=False))
