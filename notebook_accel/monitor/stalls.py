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


def _ranks_text(ranks: list[int], report: Stalled, past: bool) -> str:
    """The part of :meth:`Stalls.text` for ``ranks``, which all stopped where ``report`` says."""
    named = not report.call or (report.collective and report.call.endswith(report.collective))  # dist.barrier
    at = where(report) if named else f"{report.call} at {where(report)}"
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    several = len(ranks) > 1
    if not report.collective:
        verb = ("were" if several else "was") if past else ("are" if several else "is")
        return f"{who} {verb} not in a collective ({at})"
    verb = "waited" if past else ("wait" if several else "waits")
    return f"{who} {verb} in {report.collective} ({at})"


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
        >>> for rank in (2, 3):  # ranks stopped at one place are named together, however many there are
        ...     stalls.add(Stalled(rank, "all_reduce", "accelerator.reduce", "/home/me/train.py", 14))
        >>> stalls.text()
        'ranks 0, 2, 3 wait in all_reduce (accelerator.reduce at train.py:14)'
        >>> for rank in (0, 2, 3):
        ...     stalls.add(Stalled(rank, "", "time.sleep", "/home/me/train.py", 9))
        >>> stalls.text(past=True)
        'ranks 0, 2, 3 were not in a collective (time.sleep at train.py:9)'
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
        places: dict[tuple[str, str, str, int], tuple[Stalled, list[int]]] = {}  # one place: its ranks together
        for r in reports:
            places.setdefault((r.collective, r.call, r.file, r.line), (r, []))[1].append(r.rank)
        parts = [_ranks_text(ranks, report, past) for report, ranks in places.values()]
        if any(r.collective for r in reports) and not all(r.collective for r in reports):
            parts.append("a collective must be called on every rank")
        return "; ".join(parts)
