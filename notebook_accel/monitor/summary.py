"""System samples in words: a one-line view of a sample, and a run's per-rank summary (means and peaks).

Used by the console sink (a line every half minute, the summary at the end) and by whatever shows the final
result, so every surface says the same thing the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.monitor.idle import IdleWatch

__all__ = ["SystemSummary", "gib", "live_ranks", "sample_line"]


def gib(n: int | None) -> str:
    """Bytes as GiB with one decimal (``"1.5 GiB"``), ``"?"`` when unknown."""
    return "?" if n is None else f"{n / 1024**3:.1f} GiB"


def _rank_text(r: RankSystem) -> str:
    """One rank's figures, GPU ones only where known."""
    text = f"rank {r.rank} cpu {r.cpu_percent:.0f}% {gib(r.rss_bytes)}"
    if r.compiler_rss_bytes:
        text += f" + compiler {gib(r.compiler_rss_bytes)}"
    if r.gpu_utilization is not None:
        text += f", gpu {r.gpu_utilization:.0f}%"
    if r.gpu_memory_used is not None:
        text += f" {gib(r.gpu_memory_used)}/{gib(r.gpu_memory_total)}"
    if r.gpu_temperature is not None:
        text += f" {r.gpu_temperature:.0f}°C"
    if r.gpu_power_watts is not None:
        text += f" {r.gpu_power_watts:.0f} W"
    return text


def sample_line(sample: SystemSample) -> str:
    """``system: rank 0 cpu 98% 1.2 GiB, gpu 91% 30.2 GiB/80.0 GiB 64°C 310 W · ... · machine 17.9 GiB free``."""
    parts = [_rank_text(r) for r in sample.ranks] + [f"machine {gib(sample.host_available)} free"]
    return "system: " + " · ".join(parts)


def live_ranks(sample: SystemSample) -> SystemSample:
    """``sample`` without the ranks whose process tree had ended (the sampler reads one as 0 bytes resident): that
    is no reading, so a finished rank's means, peaks and idleness count only the time it ran.

    Example:
        >>> gone, live = RankSystem(0, 0.0, 0, 2**30), RankSystem(1, 50.0, 2**30, 2**30)
        >>> [r.rank for r in live_ranks(SystemSample(1.0, (gone, live), 2**33, 2**34)).ranks]
        [1]
    """
    live = tuple(r for r in sample.ranks if r.rss_bytes > 0)
    return sample if len(live) == len(sample.ranks) else replace(sample, ranks=live)


@dataclass
class _RankTotals:
    """Running sums of one rank's samples."""

    samples: int = 0
    cpu: float = 0.0
    gpu: float = 0.0
    gpu_samples: int = 0
    peak_rss: int = 0
    peak_compiler: int = 0  # the compiler's processes (torch.compile's), apart from the rank's own memory
    peak_gpu: int | None = None


@dataclass
class SystemSummary:
    """Accumulates a run's samples; :meth:`lines` gives one line per rank (mean use, peak memory).

    Example:
        >>> import time
        >>> summary = SystemSummary()
        >>> summary.add(SystemSample(time.time(), (RankSystem(0, 50.0, 2**30, 2**30),), 2**33, 2**34))
        >>> summary.lines()
        ['rank 0: mean CPU 50%, peak memory 1.0 GiB']
    """

    ranks: dict[int, _RankTotals] = field(default_factory=dict)
    last: SystemSample | None = None
    idle: IdleWatch = field(default_factory=IdleWatch)

    def add(self, sample: SystemSample) -> None:
        """Take one sample into the sums (and into :attr:`idle`, how long every rank has been idle); ranks whose
        processes had ended are left out (:func:`live_ranks`)."""
        sample = live_ranks(sample)
        self.last = sample
        self.idle.add(sample)
        for r in sample.ranks:
            totals = self.ranks.setdefault(r.rank, _RankTotals())
            totals.samples += 1
            totals.cpu += r.cpu_percent
            totals.peak_rss = max(totals.peak_rss, r.peak_rss_bytes)
            totals.peak_compiler = max(totals.peak_compiler, r.compiler_rss_bytes)
            if r.gpu_utilization is not None:
                totals.gpu += r.gpu_utilization
                totals.gpu_samples += 1
            if r.gpu_peak_memory is not None:
                totals.peak_gpu = max(totals.peak_gpu or 0, r.gpu_peak_memory)

    def gpu_means(self) -> dict[int, float]:
        """Each rank's mean GPU utilisation % (ranks without GPU readings left out)."""
        return {rank: t.gpu / t.gpu_samples for rank, t in self.ranks.items() if t.gpu_samples}

    def lines(self) -> list[str]:
        """``rank 0: mean CPU 97%, peak memory 1.3 GiB[ (+ compiler 2.9 GiB)][, mean GPU 88%, peak GPU memory
        31.0 GiB]`` per rank (the compiler: the peak of the compiler's processes, apart from the rank's)."""
        out = []
        for rank, t in sorted(self.ranks.items()):
            line = f"rank {rank}: mean CPU {t.cpu / max(t.samples, 1):.0f}%, peak memory {gib(t.peak_rss)}"
            if t.peak_compiler:
                line += f" (+ compiler {gib(t.peak_compiler)})"
            if t.gpu_samples:
                line += f", mean GPU {t.gpu / t.gpu_samples:.0f}%"
            if t.peak_gpu is not None:
                line += f", peak GPU memory {gib(t.peak_gpu)}"
            out.append(line)
        return out
