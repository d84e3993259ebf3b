"""Who waits where in a hang, in a few words: the workers' current :class:`~notebook_accel.events.Stalled` reports.

Each worker reports once when its training thread has stayed in one place, idle and silent, for a couple of
seconds, and once when it moves on (see :mod:`notebook_accel.launcher.child.stall_watch`); only the reports not yet
taken back are current. :meth:`Stalls.text` names each reporting rank with the collective it waits in and the
user's line, or says it is in no collective, e.g. ``rank 0 waits in all_reduce (accelerator.reduce at
train.py:14); rank 1 is not in a collective (time.sleep at train.py:9); a collective must be called on every
rank``. The idle verdict and a timeout's error add it to what they say.
"""

from __future__ import annotations

import os

from notebook_accel.events import Stalled

__all__ = ["Stalls", "where"]


def where(report: Stalled) -> str:
    """The report's line: ``train.py:14``, or ``Cell In[6], line 14`` for a notebook cell the kernel named."""
    if report.file.startswith("Cell ") and os.sep not in report.file:
        return f"{report.file}, line {report.line}"
    return f"{os.path.basename(report.file)}:{report.line}"


def _rank_text(report: Stalled, past: bool) -> str:
    """One rank's part of :meth:`Stalls.text`."""
    named = not report.call or (report.collective and report.call.endswith(report.collective))  # dist.barrier
    at = where(report) if named else f"{report.call} at {where(report)}"
    if not report.collective:
        return f"rank {report.rank} {'was' if past else 'is'} not in a collective ({at})"
    return f"rank {report.rank} {'waited' if past else 'waits'} in {report.collective} ({at})"


class Stalls:
    """The current stall report of each rank.

    Example:
        >>> stalls = Stalls()
        >>> stalls.add(Stalled(0, "all_reduce", "accelerator.reduce", "/home/me/train.py", 14))
        >>> stalls.add(Stalled(1, "", "time.sleep", "/home/me/train.py", 9))
        >>> print(stalls.text().replace("; ", ";\\n"))
        rank 0 waits in all_reduce (accelerator.reduce at train.py:14);
        rank 1 is not in a collective (time.sleep at train.py:9);
        a collective must be called on every rank
        >>> stalls.add(Stalled(1, "", "time.sleep", "/home/me/train.py", 9, stuck=False))
        >>> stalls.text(past=True)
        'rank 0 waited in all_reduce (accelerator.reduce at train.py:14)'
    """

    def __init__(self) -> None:
        self._now: dict[int, Stalled] = {}

    def add(self, report: Stalled) -> None:
        """Take a worker's report: a stall replaces the rank's last, a move on takes it back."""
        if report.stuck:
            self._now[report.rank] = report
        else:
            self._now.pop(report.rank, None)

    def text(self, past: bool = False) -> str | None:
        """Every current report in words, rank by rank (``past``: the run has ended); ``None`` without one."""
        if not self._now:
            return None
        reports = [self._now[rank] for rank in sorted(self._now)]
        parts = [_rank_text(report, past) for report in reports]
        if any(r.collective for r in reports) and not all(r.collective for r in reports):
            parts.append("a collective must be called on every rank")
        return "; ".join(parts)
