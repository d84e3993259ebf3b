"""Time FSDP's collectives (parameter all-gather, gradient reduce-scatter) for the step-time breakdown.

DDP measures its own gradient all-reduce (see :mod:`.steps`); ``fully_shard`` does not, but it lets a caller
replace the object that issues its all-gather and reduce-scatter (``set_custom_all_gather`` /
``set_custom_reduce_scatter``). :func:`time_fsdp_collectives` installs subclasses of torch's default ones that
do exactly what the defaults do and note when each collective was in flight:

- on a CPU device (gloo) a collective FSDP issues without ``async_op`` returns when it has finished, so the
  call's own duration is the time in communication; an asynchronous one is timed until its future completes;
- on a GPU the call only enqueues work: a pair of timing events is recorded on the stream FSDP issues it on
  (its all-gather or reduce-scatter stream, which the collective's completion is ordered on) and read back,
  without synchronising, once the events have completed.

DeepSpeed issues its collectives through one backend object (``deepspeed.comm``'s ``cdb``);
:func:`time_deepspeed_collectives` wraps that object's collective methods the same way. One case is not
measured: an asynchronous collective on a GPU (ZeRO's ``overlap_comm`` reductions), whose end no event on the
issuing stream marks; its time then counts as compute.

The communication time of a window is the *union* of the intervals (an all-gather prefetched while a
reduce-scatter runs counts once), which is what "time with communication in flight" means for DDP too.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["CommTimer", "time_deepspeed_collectives", "time_fsdp_collectives"]

_MAX_PENDING = 4096  # GPU event pairs not yet read back: beyond this, the oldest are dropped (bounded memory)


class CommTimer:
    """Collects the intervals during which collectives were in flight; :meth:`take` returns their union.

    Example:
        >>> t = CommTimer()
        >>> t.add(0.0, 1.0); t.add(0.5, 1.5); t.add(3.0, 3.25)
        >>> t.take()
        1.75
        >>> t.take()
        0.0
    """

    def __init__(self) -> None:
        self._spans: list[tuple[float, float]] = []
        self._events: list[tuple[Any, Any]] = []  # (start, end) CUDA events not yet read back
        self._lock = threading.Lock()  # futures complete on the backend's thread

    def add(self, start: float, end: float) -> None:
        """A collective was in flight from ``start`` to ``end`` (seconds on one clock)."""
        with self._lock:
            self._spans.append((start, end))

    def add_events(self, start: Any, end: Any) -> None:
        """A collective was in flight between two recorded CUDA events (read back by :meth:`take`)."""
        with self._lock:
            if len(self._events) >= _MAX_PENDING:
                del self._events[0]
            self._events.append((start, end))

    def time_work(self, work: Any, start: float) -> None:
        """Time an asynchronous collective issued at ``start`` until its ``work`` completes."""
        future = work.get_future() if work is not None and hasattr(work, "get_future") else None
        if future is None:
            self.add(start, time.perf_counter())
            return
        future.add_done_callback(lambda _f: self.add(start, time.perf_counter()))

    def take(self) -> float:
        """Seconds with at least one collective in flight since the last call (the union of the intervals)."""
        with self._lock:
            spans, self._spans = self._spans, []
            spans.extend(self._read_events())
        total, busy_until = 0.0, float("-inf")
        for start, end in sorted(spans):
            if end > busy_until:
                total += end - max(start, busy_until)
                busy_until = end
        return total

    def _read_events(self) -> list[tuple[float, float]]:
        """The completed CUDA event pairs as intervals in seconds (relative to the first one); the rest wait."""
        done: list[tuple[Any, Any]] = []
        waiting: list[tuple[Any, Any]] = []
        for pair in self._events:
            (done if pair[1].query() else waiting).append(pair)
        self._events = waiting
        if not done:
            return []
        origin = done[0][0]
        return [(origin.elapsed_time(s) / 1e3, origin.elapsed_time(e) / 1e3) for s, e in done]


def _timed(timer: CommTimer, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one collective ``call(*args, **kwargs)`` and record when it was in flight."""
    import torch

    tensor = kwargs.get("output_tensor", args[0] if args else None)
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        work = call(*args, **kwargs)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        timer.add_events(start, end)
        return work
    began = time.perf_counter()
    work = call(*args, **kwargs)
    if kwargs.get("async_op"):
        timer.time_work(work, began)
    else:
        timer.add(began, time.perf_counter())
    return work


def _timed_classes() -> tuple[type, type] | None:
    """torch's default FSDP collectives, subclassed to time each call (None when this torch has no such API)."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather, DefaultReduceScatter
    except ImportError:
        return None

    class TimedAllGather(DefaultAllGather):  # type: ignore[misc, valid-type]
        """torch's default FSDP all-gather, timed."""

        def __init__(self, timer: CommTimer) -> None:
            super().__init__()
            self.timer = timer

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return _timed(self.timer, super().__call__, args, kwargs)

    class TimedReduceScatter(DefaultReduceScatter):  # type: ignore[misc, valid-type]
        """torch's default FSDP reduce-scatter, timed."""

        def __init__(self, timer: CommTimer) -> None:
            super().__init__()
            self.timer = timer

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return _timed(self.timer, super().__call__, args, kwargs)

    return TimedAllGather, TimedReduceScatter


def time_fsdp_collectives(modules: list[torch.nn.Module], timer: CommTimer) -> bool:
    """Time the all-gathers and reduce-scatters of every ``fully_shard`` module in ``modules`` into ``timer``.

    Returns False (and changes nothing) when this torch lacks the API, or a module already has a custom
    collective or several parameter groups: its communication then reads 0 rather than being guessed.
    """
    classes = _timed_classes()
    if classes is None:
        return False
    gather_cls, scatter_cls = classes
    groups = []
    for module in modules:
        state = getattr(module, "_get_fsdp_state", None)
        if state is None:
            return False
        for group in state()._fsdp_param_groups:
            if type(group._all_gather_comm).__name__ != "DefaultAllGather" or \
                    type(group._reduce_scatter_comm).__name__ != "DefaultReduceScatter":
                return False
            groups.append(group)
    gather, scatter = gather_cls(timer), scatter_cls(timer)
    for group in groups:
        group._all_gather_comm, group._reduce_scatter_comm = gather, scatter
    return True


_DEEPSPEED_OPS = ("all_reduce", "all_reduce_coalesced", "inference_all_reduce", "reduce_scatter",
                  "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor", "all_gather_coalesced",
                  "broadcast", "all_to_all_single")


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The first tensor among a collective's arguments (looking into lists), to learn its device."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, torch.Tensor):
            return value
    return None


def _timed_op(holder: list[CommTimer], op: Any) -> Any:
    """``op`` (a DeepSpeed backend collective) timed into ``holder[0]``."""

    import torch

    def timed(*args: Any, **kwargs: Any) -> Any:
        tensor = _first_tensor(args, kwargs)
        asynchronous = bool(kwargs.get("async_op"))
        if tensor is not None and tensor.device.type == "cuda":
            if asynchronous:  # its end is on the backend's stream: not measured
                return op(*args, **kwargs)
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            work = op(*args, **kwargs)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            holder[0].add_events(start, end)
            return work
        began = time.perf_counter()
        work = op(*args, **kwargs)
        if asynchronous:
            holder[0].time_work(work, began)
        else:
            holder[0].add(began, time.perf_counter())
        return work

    timed.__wrapped__ = op  # type: ignore[attr-defined]
    return timed


def time_deepspeed_collectives(timer: CommTimer) -> bool:
    """Time the collectives DeepSpeed issues in this process into ``timer`` (after ``deepspeed.initialize``).

    Wraps the backend once per process; a later call only points the wrappers at the new ``timer``. Returns
    False when DeepSpeed's backend is not there (not initialised, or a DeepSpeed without it).
    """
    try:
        from deepspeed.comm import comm as ds_comm
    except ImportError:
        return False
    backend = getattr(ds_comm, "cdb", None)
    if backend is None:
        return False
    holder: list[CommTimer] | None = getattr(backend, "_notebook_accel_timer", None)
    if holder is not None:
        holder[0] = timer
        return True
    holder = [timer]
    for name in _DEEPSPEED_OPS:
        op = getattr(backend, name, None)
        if callable(op):
            setattr(backend, name, _timed_op(holder, op))
    backend._notebook_accel_timer = holder
    return True
