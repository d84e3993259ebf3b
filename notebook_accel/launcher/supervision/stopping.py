"""The timing of a run's stop, apart from the workers it signals: settle, SIGTERM, grace, SIGKILL.

The first failure does not stop the others at once: a short settle lets ranks failing at the same moment report
their own exception whole. Then SIGTERM, a grace in which their events are still collected, then SIGKILL. A
timeout or a lost node stops without the settle. The schedule only says when and which signal; the supervisor
sends it to the workers through their placement.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StopSchedule", "sigint_ignored", "stopped_by_us"]


class StopSchedule:
    """Where a run's stop stands: not begun, failure seen (SIGTERM pending), SIGTERM sent, SIGKILL sent.

    Args:
        grace: seconds between SIGTERM and SIGKILL.

    Example:
        >>> stop = StopSchedule(grace=3.0)
        >>> stop.begin(now=10.0, settle=0.3); stop.begin(now=11.0, settle=0.0)  # once: the second is ignored
        >>> stop.due(10.2), stop.due(10.3), stop.signal().name
        (False, True, 'SIGTERM')
        >>> stop.sent(now=10.5); stop.next_at, stop.signal().name
        (13.5, 'SIGKILL')
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.stage = 0  # 0 running, 1 failure seen (TERM pending), 2 TERM sent, 3 KILL sent
        self.next_at: float | None = None  # when the next signal is due (None: none scheduled)

    @property
    def begun(self) -> bool:
        """Whether the stop has begun (a failure, a timeout or a lost node was seen)."""
        return self.stage != 0

    def begin(self, now: float, settle: float) -> None:
        """Schedule the stop (once): SIGTERM ``settle`` seconds from ``now``."""
        if self.stage == 0:
            self.stage = 1
            self.next_at = now + settle

    def due(self, now: float) -> bool:
        """Whether the next signal is due at ``now``."""
        return self.next_at is not None and now >= self.next_at

    def signal(self) -> signal.Signals:
        """The signal the next step sends: SIGTERM first, then SIGKILL."""
        return signal.SIGTERM if self.stage == 1 else signal.SIGKILL

    def sent(self, now: float) -> None:
        """The next step's signal was sent at ``now``: after SIGTERM, SIGKILL is due after the grace."""
        term = self.stage == 1
        self.stage += 1
        self.next_at = now + self.grace if term else None


def stopped_by_us(sent: signal.Signals | None, died_by: str | None, explained: bool) -> bool:
    """Whether a worker's end was the stop's doing: we had sent it ``sent`` and it died by SIGTERM or SIGKILL.

    Not when its placement ``explained`` the death as its own (a Ray rank whose process died before our first
    signal), nor when it died by SIGKILL while we had only sent SIGTERM (something else killed it): such a death is
    a failure of its own, and often the cause of the others' lost connections.

    Example:
        >>> stopped_by_us(signal.SIGTERM, "SIGTERM", False), stopped_by_us(signal.SIGTERM, "SIGKILL", False)
        (True, False)
        >>> stopped_by_us(None, "SIGKILL", False), stopped_by_us(signal.SIGKILL, "SIGKILL", True)
        (False, False)
    """
    if sent is None or explained or died_by not in ("SIGTERM", "SIGKILL"):
        return False
    return not (died_by == "SIGKILL" and sent == signal.SIGTERM)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while tearing down (a second press of stop must not leave workers behind); restore after.
    Only the main thread can change the handler; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
