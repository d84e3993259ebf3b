"""The run's latest system figures, shared from the kernel with its workers, for trackers (``system/...`` values).

The figures are measured in the kernel (the launcher's :class:`~notebook_accel.monitor.sampler.SystemSampler`)
or reach it from each worker (:class:`~notebook_accel.events.StepTimes`), but trackers write from the main
process. So the launcher makes a :class:`SystemBoard` before it forks the workers: a small anonymous shared
memory map (a slot of floats per local rank and the machine's memory) that the forked workers inherit. The
kernel writes each sample and step report into it (a few ``struct.pack_into`` calls a second); the main process
reads it when ``Accelerator(log_system_metrics=True)`` logs, and sends the values that changed since its last
read to its trackers. No pipe, no message, nothing when the option is off.

The launcher hands the board object itself along: to the supervisor (which writes it) and, through the fork, to each
worker's set-up (:func:`use_in_worker`), so two runs in one kernel never share one and no registry is kept in the
kernel.
A read may mix two consecutive samples of one rank (no lock): each value is still one that was measured.
"""

from __future__ import annotations

import math
import mmap
import struct
import time
import warnings
from collections.abc import Sequence

from notebook_accel.events import StepTimes, SystemSample
from notebook_accel.monitor.verdict import RankSteps

__all__ = ["SystemBoard", "FIELDS", "use_in_worker", "tracker_board"]

# the values of one rank, in slot order; each becomes ``system/rank<r>/<name>`` for the trackers
FIELDS = ("cpu_percent", "memory_gib", "peak_memory_gib", "gpu_utilization", "gpu_memory_gib", "gpu_peak_memory_gib",
          "gpu_temperature", "gpu_power_watts", "step_ms", "step_data_frac", "step_compute_frac", "step_comm_frac",
          "step_optimizer_frac", "step_other_frac")
_SAMPLE = FIELDS.index("step_ms")  # the fields before it come from samples, the rest from step reports
_HEAD = struct.Struct("<dd")  # version, the machine's available memory (GiB)
_SLOT = struct.Struct(f"<{len(FIELDS)}d")
READ_SECONDS = 1.0  # the least time between two sets of values sent to the trackers
_GIB = 1024**3
_NAN = float("nan")
_worker_board: SystemBoard | None = None  # set in a forked worker only (use_in_worker); the kernel never sets it


def _gib(n: int | None) -> float:
    """Bytes as GiB (NaN when unknown)."""
    return _NAN if n is None else n / _GIB


def _or_nan(value: float | None) -> float:
    """``value``, NaN when unknown."""
    return _NAN if value is None else float(value)


class SystemBoard:
    """A shared map of each local rank's latest figures.

    Args:
        ranks: the run's local ranks, in slot order.

    Example:
        >>> from notebook_accel.events import RankSystem, SystemSample
        >>> board = SystemBoard([0, 1])
        >>> board.write(SystemSample(1.0, (RankSystem(1, 50.0, 2**30, 2**31),), 2**33, 2**34))
        >>> values = board.fresh()
        >>> values["system/rank1/cpu_percent"], values["system/rank1/peak_memory_gib"], "system/rank0/cpu_percent" in values
        (50.0, 2.0, False)
        >>> board.fresh()  # nothing new since
        {}
    """

    def __init__(self, ranks: Sequence[int]) -> None:
        self.ranks = tuple(ranks)
        self._slots = {rank: i for i, rank in enumerate(self.ranks)}
        self._map = mmap.mmap(-1, _HEAD.size + _SLOT.size * max(len(self.ranks), 1))  # MAP_SHARED: forks see writes
        for i in range(len(self.ranks)):
            _SLOT.pack_into(self._map, _HEAD.size + i * _SLOT.size, *([_NAN] * len(FIELDS)))
        _HEAD.pack_into(self._map, 0, 0.0, _NAN)
        self._read_version = 0.0
        self._last_read = -float("inf")

    def write(self, event: SystemSample | StepTimes) -> None:
        """Record a sample (every rank's machine figures) or one rank's step report (its split); anything else
        is ignored."""
        if isinstance(event, SystemSample):
            for r in event.ranks:
                self._put(r.rank, 0, (r.cpu_percent, _gib(r.rss_bytes), _gib(r.peak_rss_bytes),
                                      _or_nan(r.gpu_utilization), _gib(r.gpu_memory_used), _gib(r.gpu_peak_memory),
                                      _or_nan(r.gpu_temperature), _or_nan(r.gpu_power_watts)))
            version = _HEAD.unpack_from(self._map, 0)[0]
            _HEAD.pack_into(self._map, 0, version + 1, _gib(event.host_available))
        elif isinstance(event, StepTimes) and event.steps:
            steps = RankSteps(event.steps, event.step_seconds, event.data_seconds, event.forward_backward_seconds,
                              event.comm_seconds, event.optimizer_seconds)
            split = steps.split()
            self._put(event.rank, _SAMPLE, (steps.step_ms, split["data"],
                                            split["compute"], split["comm"], split["optimizer"], split["other"]))
            version, available = _HEAD.unpack_from(self._map, 0)
            _HEAD.pack_into(self._map, 0, version + 1, available)

    def _put(self, rank: int, first: int, values: Sequence[float]) -> None:
        """Write ``values`` into ``rank``'s slot from field ``first`` on (a rank without a slot is skipped)."""
        slot = self._slots.get(rank)
        if slot is None:
            return
        struct.pack_into(f"<{len(values)}d", self._map, _HEAD.size + slot * _SLOT.size + 8 * first, *values)

    def fresh(self, every: float = READ_SECONDS) -> dict[str, float]:
        """Every known value as ``{"system/rank<r>/<field>": value, "system/machine/available_gib": ...}`` when
        the board changed since the last call and that call is ``every`` seconds ago, else ``{}`` (a sample and
        each rank's step report arrive at their own times: the trackers get one set of values a second)."""
        version, available = _HEAD.unpack_from(self._map, 0)
        now = time.monotonic()
        if version == self._read_version or now < self._last_read + every:
            return {}
        self._read_version, self._last_read = version, now
        out: dict[str, float] = {}
        for i, rank in enumerate(self.ranks):
            for name, value in zip(FIELDS, _SLOT.unpack_from(self._map, _HEAD.size + i * _SLOT.size)):
                if not math.isnan(value):
                    out[f"system/rank{rank}/{name}"] = value
        if not math.isnan(available):
            out["system/machine/available_gib"] = available
        return out

    def close(self) -> None:
        """Unmap it (in the kernel, after the run; each worker's inherited copy stays until it exits)."""
        self._map.close()


def use_in_worker(board: SystemBoard | None) -> None:
    """Make ``board`` (its run's, inherited through the fork) the one this worker's trackers read; called once by
    the worker's set-up, never in the kernel."""
    global _worker_board
    _worker_board = board


def tracker_board(wanted: bool, main_process: bool) -> SystemBoard | None:
    """The board whose figures the main process's trackers receive (``Accelerator(log_system_metrics=True)``);
    ``None`` when not ``wanted`` or not the main process. Warns when wanted where no launcher measures (a script,
    ``torchrun``, a run in the kernel's own process)."""
    if not (wanted and main_process):
        return None
    board = _worker_board
    if board is None:
        warnings.warn("log_system_metrics=True: no system figures reach this process (they are measured by "
                      "notebook_launcher in the kernel, for the workers it forks), so no system/... values are "
                      "logged; start the run with notebook_launcher(...) to log them", RuntimeWarning, stacklevel=3)
    return board
