"""The system panel's model: each rank's machine figures and step-time split, fed by events, no widgets.

:class:`SystemState` takes the launcher's :class:`~notebook_accel.events.SystemSample` (once a second, every
local rank at once) and the workers' :class:`~notebook_accel.events.StepTimes` (about once a second each) and
keeps, per rank, the latest figures, a bounded history per figure for the sparklines (a
:class:`~notebook_accel.widgets.series.Series`: the whole run in at most ``2 * (budget + 2)`` points, peaks
kept), the run's means and peaks (:class:`~notebook_accel.monitor.summary.SystemSummary`) and step times
(:class:`~notebook_accel.monitor.verdict.StepBreakdown`). Every update is O(1) in the run's length; the verdict
is computed only when asked, once per change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from notebook_accel.events import RankSystem, Stalled, StepTimes, SystemSample
from notebook_accel.monitor.idle import stopped_from_outside
from notebook_accel.monitor.summary import SystemSummary, gib, live_ranks
from notebook_accel.monitor.verdict import RankSteps, StepBreakdown, verdict
from notebook_accel.widgets.series import Series

__all__ = ["SystemState", "RankFigures", "FIGURES", "SPARK_BUDGET"]

SPARK_BUDGET = 30  # buckets per sparkline: at most 64 points however long the run
# the figures a rank can have, in display order: (key, label); GPU ones only where NVML reports them
FIGURES = (("gpu", "GPU"), ("gpu_memory", "GPU memory"), ("temperature", "temp"), ("power", "power"),
           ("cpu", "CPU"), ("memory", "memory"), ("compiler", "compiler memory"))


@dataclass
class RankFigures:
    """One rank's system view: the latest sample and a sparkline series per figure (its step times are the run's,
    :meth:`SystemState.steps_of`)."""

    rank: int
    last: RankSystem | None = None
    sparks: dict[str, Series] = field(default_factory=dict)

    def spark(self, key: str) -> Series:
        """The sparkline series of ``key`` (made on first use)."""
        series = self.sparks.get(key)
        if series is None:
            series = self.sparks[key] = Series(SPARK_BUDGET)
        return series


class SystemState:
    """Every rank's figures and step times so far, updated one event at a time.

    Example:
        >>> from notebook_accel.events import RankSystem, SystemSample
        >>> s = SystemState()
        >>> s.apply(SystemSample(100.0, (RankSystem(0, 95.0, 2**30, 2**30),), 2**33, 2**34))
        >>> s.ranks[0].last.cpu_percent, len(s.ranks[0].sparks["cpu"].points()[0])
        (95.0, 1)
    """

    def __init__(self) -> None:
        self.ranks: dict[int, RankFigures] = {}
        self.summary = SystemSummary()
        self.steps = StepBreakdown()
        self.host_available: int | None = None
        self.host_total: int | None = None
        self.stopped = False  # the run was stopped from outside (its timeout, an interrupt): see end()
        self.version = 0  # bumped on every change, so a view redraws only when something moved
        self._t0: float | None = None
        self._verdict: tuple[int, str | None] = (-1, None)

    def apply(self, event: SystemSample | StepTimes | Stalled) -> None:
        """Take one sample, one rank's step-time report or its stall report (anything else is ignored)."""
        if isinstance(event, Stalled):
            self.summary.idle.stalls.add(event)  # where a rank waits: no progress
        elif isinstance(event, SystemSample):
            self._sample(event)
        elif isinstance(event, StepTimes):
            self.steps.add(event)
            self._figures(event.rank)
            self.summary.idle.progress()
        else:
            return
        self.version += 1

    def progress(self) -> None:
        """A rank showed progress (a loader's batch, a metric, a line of output): no idle stretch goes on across
        it (see :mod:`notebook_accel.monitor.idle`)."""
        self.summary.idle.progress()

    def end(self, status: str) -> None:
        """The run ended with ``status`` (its outcome's): after a timeout or an interrupt the verdict names every
        rank's idleness at the end from a shorter stretch on (:func:`~notebook_accel.monitor.idle.idle_verdict`)."""
        self.stopped = stopped_from_outside(status)
        self.version += 1

    def _figures(self, rank: int) -> RankFigures:
        """The figures of ``rank`` (made on first use)."""
        figures = self.ranks.get(rank)
        if figures is None:
            figures = self.ranks[rank] = RankFigures(rank)
        return figures

    def _sample(self, sample: SystemSample) -> None:
        """Record every rank's figures of one sample; x is seconds since the first sample. A rank whose process
        tree has ended reads 0 bytes resident: that is no reading (its panel keeps the last live values, its
        sparklines end at the last real sample, its means count only the time it ran)."""
        sample = live_ranks(sample)
        self.summary.add(sample)
        self.host_available, self.host_total = sample.host_available, sample.host_total
        if self._t0 is None:
            self._t0 = sample.time
        x = sample.time - self._t0
        for r in sample.ranks:
            figures = self._figures(r.rank)
            figures.last = r
            figures.spark("cpu").append(x, r.cpu_percent)
            figures.spark("memory").append(x, r.rss_bytes)
            if r.compiler_rss_bytes or "compiler" in figures.sparks:  # from the compiler's first reading on
                figures.spark("compiler").append(x, r.compiler_rss_bytes)
            for key, value in (("gpu", r.gpu_utilization), ("gpu_memory", r.gpu_memory_used),
                               ("temperature", r.gpu_temperature), ("power", r.gpu_power_watts)):
                if value is not None:
                    figures.spark(key).append(x, value)

    def steps_of(self, rank: int) -> RankSteps | None:
        """``rank``'s steps so far (``None`` before its first report): the one figure that the step bar, the
        final lines and the verdict all show, so no two step times ever sit side by side."""
        return self.steps.ranks.get(rank)

    def peak_memory(self, rank: int) -> int:
        """The run's peak resident memory of ``rank``'s process tree (bytes; 0 before a sample)."""
        totals = self.summary.ranks.get(rank)
        return totals.peak_rss if totals is not None else 0

    def peak_compiler_memory(self, rank: int) -> int:
        """The run's peak resident memory of the compiler processes ``rank`` started (torch.compile's workers, the
        C++ compiler; bytes, 0: none seen)."""
        totals = self.summary.ranks.get(rank)
        return totals.peak_compiler if totals is not None else 0

    def peak_gpu_memory(self, rank: int) -> int | None:
        """The run's peak device memory of ``rank`` (bytes), ``None`` without a GPU reading."""
        totals = self.summary.ranks.get(rank)
        return totals.peak_gpu if totals is not None else None

    def mean_use(self, rank: int) -> tuple[str, float] | None:
        """``("GPU", mean %)`` where the rank has GPU readings, else ``("CPU", mean %)``; ``None`` before a sample."""
        totals = self.summary.ranks.get(rank)
        if totals is None or not totals.samples:
            return None
        if totals.gpu_samples:
            return "GPU", totals.gpu / totals.gpu_samples
        return "CPU", totals.cpu / totals.samples

    def verdict(self) -> str | None:
        """The run's verdict in words (:func:`~notebook_accel.monitor.verdict.verdict`), or ``None``; computed
        once per change."""
        version, found = self._verdict
        if version != self.version:
            found = verdict(self.steps, self.summary.gpu_means(), self.summary.idle.seconds(),
                            self.summary.idle.stalls.text(past=self.stopped), self.stopped)
            self._verdict = (self.version, found)
        return found

    def rank_lines(self) -> list[str]:
        """One line per rank for a final result: mean use, peak memory, the step-time split.

        Example:
            >>> from notebook_accel.events import RankSystem, SystemSample, StepTimes
            >>> s = SystemState()
            >>> s.apply(SystemSample(1.0, (RankSystem(0, 50.0, 2**30, 2**31),), 2**33, 2**34))
            >>> s.apply(StepTimes(0, 10, 1.0, 0.5, 0.4, 0.2, 0.0, 0.05))
            >>> s.rank_lines()
            ['rank 0: mean CPU 50%, peak memory 2.0 GiB; 100 ms a step: data 50%, compute 40%, communication 0%, optimizer 5%, other 5%']
        """
        split = {line.partition(": ")[0]: line.partition(": ")[2] for line in self.steps.lines()}
        out = []
        for rank in sorted(self.ranks):
            bits = []
            use = self.mean_use(rank)
            if use is not None:
                bits.append(f"mean {use[0]} {use[1]:.0f}%, peak memory {gib(self.peak_memory(rank))}")
                gpu_peak = self.peak_gpu_memory(rank)
                if gpu_peak is not None:
                    bits[-1] += f", peak GPU memory {gib(gpu_peak)}"
            if f"rank {rank}" in split:
                bits.append(split[f"rank {rank}"])
            if bits:
                out.append(f"rank {rank}: " + "; ".join(bits))
        return out
