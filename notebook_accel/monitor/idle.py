"""Whether every rank has been idle, and for how long, from the system samples: a hang (a collective waiting for a
rank that never comes, a lock) or a wait outside the ranks shows as every worker's process tree using no CPU and no
GPU, which the step times cannot show (no step ends while it lasts).

A sample's CPU % covers the interval since the previous one, so an idle stretch starts at the sample before the
first idle one. Low CPU alone is not a hang: a loop that sleeps, or waits on a remote service, each step uses next
to none and still moves on. Any sign of progress from a rank (a step's times, a loader's progress, a metric, a line
of output) ends the stretch (:meth:`IdleWatch.progress`), so only ranks that are idle *and* silent are named.

Live, a stretch is named from :data:`IDLE_SECONDS` on (a shorter one is a pause: an evaluation's barrier, a
checkpoint). When the run was stopped from outside (its ``timeout=``, an interrupt), a stretch reaching its end is
named from :data:`STOPPED_IDLE_SECONDS` on: the run never finished, and what every rank did last was wait. A
``timeout=5`` hang is idle for less than 5 s, and "no verdict" would hide the one thing worth saying.

Where the workers reported where they wait (:attr:`IdleWatch.stalls`, see :mod:`.stalls`), the verdict says it:
``every rank idle for 12 s: rank 0 waits in all_reduce (accelerator.reduce at train.py:14); rank 1 is not in a
collective (time.sleep at train.py:9); ...``. Such a report is no progress: it ends no stretch.
"""

from __future__ import annotations

from notebook_accel.events import SystemSample
from notebook_accel.monitor.stalls import Stalls

__all__ = ["IDLE_PERCENT", "IDLE_SECONDS", "STOPPED_IDLE_SECONDS", "IdleWatch", "idle_verdict",
           "stopped_from_outside"]

IDLE_PERCENT = 5.0  # below this CPU % (of one core) and GPU utilisation % a rank is idle
IDLE_SECONDS = 5.0  # the shortest stretch with every rank idle that is worth a verdict while the run goes on
STOPPED_IDLE_SECONDS = 2.0  # the same at the end of a run stopped from outside: two sample intervals, never one


class IdleWatch:
    """How long every rank has been idle, up to the latest sample.

    Example:
        >>> from notebook_accel.events import RankSystem
        >>> watch = IdleWatch()
        >>> for t, cpu in ((0.0, 90.0), (1.0, 1.0), (2.0, 0.5), (7.5, 0.0)):
        ...     watch.add(SystemSample(t, (RankSystem(0, cpu, 1, 1), RankSystem(1, 0.0, 1, 1)), 1, 2))
        >>> watch.seconds()
        7.5
        >>> watch.add(SystemSample(8.5, (RankSystem(0, 50.0, 1, 1), RankSystem(1, 0.0, 1, 1)), 1, 2))
        >>> watch.seconds()
        0.0
    """

    def __init__(self) -> None:
        self._since: float | None = None  # when the current stretch with every rank idle began
        self._previous: float | None = None  # the previous sample's time
        self._latest = 0.0
        self.stalls = Stalls()  # where each rank reported it waits (the workers' stall reports)

    def add(self, sample: SystemSample) -> None:
        """Take one sample of every rank (one without ranks, every process tree gone, tells nothing: skipped)."""
        if not sample.ranks:
            return
        idle = all(r.cpu_percent < IDLE_PERCENT and (r.gpu_utilization or 0) < IDLE_PERCENT for r in sample.ranks)
        if not idle:
            self._since = None
        elif self._since is None:
            self._since = self._previous if self._previous is not None else sample.time
        self._previous = self._latest = sample.time

    def progress(self) -> None:
        """A rank showed progress (a step ended, a batch came, a metric or a line was sent): the stretch ends; the
        next idle sample starts a new one.

        Example:
            >>> from notebook_accel.events import RankSystem
            >>> watch = IdleWatch()
            >>> for t in range(9):  # a loop that sleeps through its steps: 1% CPU, a step's times every second
            ...     watch.add(SystemSample(float(t), (RankSystem(0, 1.0, 1, 1),), 1, 2)); watch.progress()
            >>> watch.seconds()
            0.0
        """
        self._since = None

    def seconds(self) -> float:
        """Seconds every rank has been idle until the latest sample (0 when one is busy)."""
        return self._latest - self._since if self._since is not None else 0.0


def idle_verdict(seconds: float, waiting_in: str | None = None, stopped: bool = False) -> str | None:
    """``every rank idle for 42 s (...)`` when ``seconds`` is :data:`IDLE_SECONDS` or more, else ``None``; says who
    waits where instead of the general reason when it is known (``waiting_in``, :meth:`.stalls.Stalls.text`).

    ``stopped``: the run was just stopped from outside (its timeout, an interrupt) and ``seconds`` reach its end:
    from :data:`STOPPED_IDLE_SECONDS` on it says ``every rank idle for the last 4.8 s before the run was stopped``.

    Example:
        >>> idle_verdict(3.0) is None, idle_verdict(3.04, stopped=True)[:50]
        (True, 'every rank idle for the last 3.0 s before the run ')
        >>> idle_verdict(6.0, "rank 0 waits in barrier (train.py:3)")
        'every rank idle for 6 s: rank 0 waits in barrier (train.py:3)'
    """
    why = (f": {waiting_in}" if waiting_in else " (no CPU or GPU use: waiting, e.g. in a collective that a rank "
           "never reaches, or for a process outside the ranks)")
    if stopped and seconds >= STOPPED_IDLE_SECONDS:
        return f"every rank idle for the last {seconds:.1f} s before the run was stopped{why}"
    if seconds < IDLE_SECONDS:
        return None
    return f"every rank idle for {seconds:.0f} s{why}"


def stopped_from_outside(status: str) -> bool:
    """Whether a run that ended with ``status`` (a :class:`~notebook_accel.events.RunOutcome`'s) was stopped while
    its ranks still ran: by its ``timeout=`` or an interrupt, not by finishing or by a rank's failure."""
    return status in ("timeout", "interrupted")
