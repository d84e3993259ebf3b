"""The launcher's sampler: every local worker's process tree and GPU, and the machine's memory, once a second.

It runs in the kernel on the supervising loop (a sample reads /proc through psutil and asks NVML; about a
millisecond for a few workers), costs the workers nothing, and stops with the run. A worker the kernel killed for
memory is explained by the sample that showed its memory nearest to running out in its last seconds
(:class:`MemoryPeaks`, :func:`memory_death_note`): not the last one, which may read a dying process that is
already freeing its memory (0 bytes, its cgroup no longer readable).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from notebook_accel import hardware
from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.monitor.host import TreeMeter, cgroup_memory, machine_memory
from notebook_accel.nvml import Nvml

__all__ = ["SAMPLE_SECONDS", "MemoryPeaks", "SystemSampler", "device_memory_note", "memory_death_note"]

SAMPLE_SECONDS = 1.0
PEAK_SECONDS = 10.0  # how long the tightest memory reading of a rank stays its evidence when later ones are looser
_GIB = 1024**3


def _tree_bytes(r: RankSystem) -> int:
    """Everything ``r``'s process tree holds, the compiler's included (memory running out counts them all)."""
    return r.rss_bytes + r.compiler_rss_bytes


def _pressure(sample: SystemSample, rank: int) -> float:
    """How near ``rank``'s memory was to running out in ``sample``, as a fraction of its room (0 when unknown):
    of its cgroup limit where it has one, else of the machine's memory."""
    mine = next((r for r in sample.ranks if r.rank == rank), None)
    if mine is None:
        return 0.0
    if mine.memory_limit:
        return max(mine.memory_group_usage or 0, _tree_bytes(mine)) / mine.memory_limit
    if sample.host_total <= 0:
        return 0.0
    return max(_tree_bytes(mine) / sample.host_total, 1 - sample.host_available / sample.host_total)


class MemoryPeaks:
    """Each rank's sample with its memory nearest to running out over the last ``window`` seconds.

    Example:
        >>> from notebook_accel.events import RankSystem
        >>> peaks = MemoryPeaks()
        >>> full = RankSystem(1, 0.0, 9 * _GIB, 9 * _GIB, memory_limit=10 * _GIB)
        >>> peaks.add(SystemSample(time.time(), (full,), 0, 1))
        >>> peaks.add(SystemSample(time.time(), (RankSystem(1, 0.0, 0, 9 * _GIB),), 20 * _GIB, 24 * _GIB))  # dying
        >>> peaks.get(1).ranks[0].rss_bytes // _GIB, peaks.get(0)
        (9, None)
    """

    def __init__(self, window: float = PEAK_SECONDS) -> None:
        self.window = window
        self._kept: dict[int, tuple[float, SystemSample]] = {}  # rank: (pressure, sample)

    def add(self, sample: SystemSample) -> None:
        """Take a sample: it replaces a rank's kept one when it is as tight, or the kept one is too old."""
        for r in sample.ranks:
            pressure = _pressure(sample, r.rank)
            kept = self._kept.get(r.rank)
            if kept is None or pressure >= kept[0] or sample.time - kept[1].time > self.window:
                self._kept[r.rank] = (pressure, sample)

    def get(self, rank: int) -> SystemSample | None:
        """``rank``'s tightest recent sample, ``None`` before its first."""
        kept = self._kept.get(rank)
        return kept[1] if kept is not None else None


class SystemSampler:
    """Samples the workers ``{rank: pid}`` on the devices ``{rank: "cpu" | "cuda:<i>"}``.

    Args:
        workers: each local rank's process id.
        devices: each local rank's device, as the launcher chose it.
        interval: seconds between samples.
        nvml: an open NVML session (``None``: opened here when a worker has a GPU).
        fresh: the workers were forked just now (their CPU counts from zero: no first read is needed).

    Example:
        >>> import os
        >>> sampler = SystemSampler({0: os.getpid()}, {0: "cpu"})
        >>> sampler.sample().ranks[0].rss_bytes > 0
        True
        >>> sampler.close()
    """

    def __init__(self, workers: Mapping[int, int], devices: Mapping[int, str], interval: float = SAMPLE_SECONDS,
                 nvml: Nvml | None = None, fresh: bool = False) -> None:
        self.interval = interval
        self.meters = {rank: TreeMeter(pid, fresh) for rank, pid in sorted(workers.items())}
        self.peak_rss: dict[int, int] = dict.fromkeys(self.meters, 0)
        self.peak_gpu: dict[int, int] = {}
        self.last: SystemSample | None = None
        self.peaks = MemoryPeaks()
        self.next_due = time.monotonic() + interval
        self._uuids = _gpu_uuids(devices)
        self._own_nvml = nvml is None and bool(self._uuids)
        self._nvml = Nvml.open() if self._own_nvml else nvml

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now`` (``time.monotonic()``)."""
        return now >= self.next_due

    def sample(self) -> SystemSample:
        """Read everything now and remember it as :attr:`last`."""
        self.next_due = time.monotonic() + self.interval
        available, total = machine_memory()
        ranks = []
        for rank, meter in self.meters.items():
            cpu, rss, compiler = meter.read()
            self.peak_rss[rank] = max(self.peak_rss[rank], rss)
            gpu = self._nvml.read(self._uuids[rank]) if self._nvml is not None and rank in self._uuids else None
            used = gpu.memory_used if gpu is not None else None
            if used is not None:
                self.peak_gpu[rank] = max(self.peak_gpu.get(rank, 0), used)
            limit, group_usage = cgroup_memory(meter.pid)
            ranks.append(RankSystem(
                rank, round(cpu, 1), rss, self.peak_rss[rank],
                gpu.utilization if gpu else None, used, gpu.memory_total if gpu else None,
                self.peak_gpu.get(rank), gpu.temperature if gpu else None, gpu.power_watts if gpu else None,
                limit if limit is not None and limit < total else None, group_usage, compiler,
            ))
        self.last = SystemSample(time.time(), tuple(ranks), available, total)
        self.peaks.add(self.last)
        return self.last

    def before_death(self, rank: int) -> SystemSample | None:
        """The recent sample that showed ``rank``'s memory nearest to running out (for :func:`memory_death_note`)."""
        return self.peaks.get(rank)

    def close(self) -> None:
        """End the NVML session this sampler opened."""
        if self._own_nvml and self._nvml is not None:
            self._nvml.close()
            self._nvml = None


def _gpu_uuids(devices: Mapping[int, str]) -> dict[int, str]:
    """``{rank: GPU UUID}`` for the ranks on ``cuda:<i>`` (``CUDA_VISIBLE_DEVICES`` applied, as the workers see)."""
    wanted = {rank: int(device.split(":")[1]) for rank, device in devices.items()
              if device.startswith("cuda:") and device.split(":")[1].isdigit()}
    if not wanted:
        return {}
    visible = hardware.detect_gpus()
    return {rank: visible[i].uuid for rank, i in wanted.items() if i < len(visible) and visible[i].uuid}


def memory_death_note(sample: SystemSample | None, rank: int) -> str | None:
    """Why a rank killed by SIGKILL most likely met the out-of-memory killer, from a sample before its death (the
    tightest recent one, :meth:`SystemSampler.before_death`), or ``None`` when that sample does not show memory
    running out.

    Running out: the rank's memory cgroup (a container's limit) was at 80% or more of its limit, or its process
    tree held 70% of that limit; without a cgroup limit, under a tenth of the machine's memory was available or
    the tree held half of it.
    """
    if sample is None:
        return None
    mine = next((r for r in sample.ranks if r.rank == rank), None)
    if mine is None or sample.host_total <= 0:
        return None
    ago = max(0.0, time.time() - sample.time)
    compiler = (f", and its compiler processes {mine.compiler_rss_bytes / _GIB:.2f} GiB" if mine.compiler_rss_bytes
                else "")
    held = (f"{ago:.1f} s before it died, rank {rank}'s processes had {mine.rss_bytes / _GIB:.2f} GiB resident (pages "
            f"shared with the kernel included){compiler}")
    fix = "Use a smaller batch, fewer DataLoader workers or processes, or more memory"
    if mine.memory_limit is not None:
        group = mine.memory_group_usage or 0
        if group >= 0.8 * mine.memory_limit or _tree_bytes(mine) >= 0.7 * mine.memory_limit:
            return (f"most likely the out-of-memory killer: {held}, and the memory cgroup it runs in (a container's "
                    f"or a scheduler's limit) held {group / _GIB:.2f} GiB of its {mine.memory_limit / _GIB:.2f} GiB "
                    f"limit. {fix}")
        return None
    if sample.host_available < 0.1 * sample.host_total or _tree_bytes(mine) >= 0.5 * sample.host_total:
        workers = sum(_tree_bytes(r) for r in sample.ranks)
        return (f"most likely the out-of-memory killer: {held} (all workers {workers / _GIB:.2f} GiB) of the "
                f"machine's {sample.host_total / _GIB:.1f} GiB, with {sample.host_available / _GIB:.2f} GiB still "
                f"available. {fix}")
    return None


_REMEDIES = ("a smaller per-device batch (with gradient_accumulation_steps to keep the global batch), "
             "mixed_precision='bf16', activation checkpointing, or sharding the model (FSDP or DeepSpeed ZeRO)")


def device_memory_note(sample: SystemSample | None, rank: int) -> str:
    """What to add to a device out-of-memory error of ``rank``: its GPU's peak memory over the run (from the last
    sample) and the usual remedies."""
    mine = next((r for r in sample.ranks if r.rank == rank), None) if sample is not None else None
    peak = ""
    if mine is not None and mine.gpu_peak_memory is not None and mine.gpu_memory_total:
        peak = (f"rank {rank}'s GPU held up to {mine.gpu_peak_memory / _GIB:.1f} GiB of its "
                f"{mine.gpu_memory_total / _GIB:.1f} GiB during the run (sampled once a second). ")
    return f"{peak}The device ran out of memory: try {_REMEDIES}"
