"""The supervisor's system sampler for a remote run: every rank's latest figures, sent by the rank from its own node
over its control stream and kept by the watch (:mod:`.watch`), handed over as one sample."""

from __future__ import annotations

import time

from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.launcher.placement.remote.watch import RunWatch
from notebook_accel.monitor.sampler import MemoryPeaks

__all__ = ["RemoteSampler"]


class RemoteSampler:
    """The supervisor's sampler for a remote run: every rank's latest figures from its own node, as one sample.

    Memory of the machine is the tightest node's (the least available), the figure that warns first.
    """

    def __init__(self, watch: RunWatch, interval: float = 1.0) -> None:
        self.watch = watch
        self.interval = interval
        self.last: SystemSample | None = None
        self.peaks = MemoryPeaks()
        self.next_due = time.monotonic() + interval

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now`` (never before a rank sent one: an empty sample would read as a machine
        of 0 bytes)."""
        return now >= self.next_due and bool(self.watch.latest())

    def sample(self) -> SystemSample:
        """The ranks' latest figures together (a rank that sent none yet is left out)."""
        self.next_due = time.monotonic() + self.interval
        latest = self.watch.latest()
        ranks: list[RankSystem] = [r for s in latest.values() for r in s.ranks]
        tightest = min(latest.values(), key=lambda s: s.host_available, default=None)
        self.last = SystemSample(time.time(), tuple(sorted(ranks, key=lambda r: r.rank)),
                                 tightest.host_available if tightest else 0, tightest.host_total if tightest else 0)
        self.peaks.add(self.last)
        return self.last

    def before_death(self, rank: int) -> SystemSample | None:
        """The recent sample that showed ``rank``'s memory nearest to running out."""
        return self.peaks.get(rank)

    def close(self) -> None:
        """Nothing to close (the watch owns the streams)."""
        self.next_due = float("inf")
