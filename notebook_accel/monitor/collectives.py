"""Time the collectives of a training step for the step-time breakdown: :class:`CommTimer` collects when each
one was in flight, :class:`ExposedWait` how long DDP's backward waited for its all-reduce on a CPU, :class:`GpuWait`
the same on a GPU from torch's DDP logger.

DDP's wait is what the step loses to communication: its all-reduce starts bucket by bucket while backward still
computes, and only what is left when the computation ends holds the step up. :class:`ExposedWait` queues a final
callback on the autograd engine as backward starts (from a hook on the loss's gradient function); the engine runs
final callbacks in the order they were queued once the graph is done, so it runs before the one DDP queues to wait
for its buckets, and the time from it to the end of ``backward`` is the wait. The sharded engines time theirs into a
:class:`CommTimer` (``notebook_accel.engines.fsdp.collectives``, ``notebook_accel.engines.deepspeed.collectives``)
with :func:`timed_call`:

- on a CPU device (gloo) a collective issued without ``async_op`` returns when it has finished, so the call's own
  duration is the time in communication; an asynchronous one is timed until its future completes;
- on a GPU the call only enqueues work: a pair of timing events is recorded on the stream it is issued on and read
  back, without synchronising, once the events have completed.

The communication time of a window is the *union* of the intervals (an all-gather prefetched while a
reduce-scatter runs counts once), which is what "time with communication in flight" means for DDP too.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["CommTimer", "ExposedWait", "GpuWait", "timed_call"]

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


class ExposedWait:
    """How long ``backward`` ran past the end of its computation (DDP waiting for its last gradient buckets).

    Example:
        >>> import torch
        >>> wait = ExposedWait()
        >>> loss = (torch.ones(3, requires_grad=True) * 2).sum()
        >>> wait.arm(loss); loss.backward()
        >>> 0.0 <= wait.take() < 1.0
        True
    """

    def __init__(self) -> None:
        self._computed = -1.0  # when the armed backward's computation ended (< 0: not yet, or not armed)
        self._hook: Any = None

    def arm(self, loss: Any) -> None:
        """Mark the end of the computation of the coming backward of ``loss`` (nothing without a graph)."""
        self._disarm()
        grad_fn = getattr(loss, "grad_fn", None)
        if grad_fn is not None:
            self._hook = grad_fn.register_prehook(self._queue)

    def _queue(self, _grads: Any) -> None:
        """Backward has started: ask the engine to call back when the graph is done."""
        import torch

        try:
            torch.autograd.Variable._execution_engine.queue_callback(self._computed_now)
        except Exception:  # noqa: BLE001 - a private torch API: without it, the wait reads 0
            return

    def _computed_now(self) -> None:
        """The graph is done (the engine's final callback)."""
        self._computed = time.perf_counter()

    def _disarm(self) -> None:
        """Remove the hook of the last :meth:`arm`."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def take(self) -> float:
        """Seconds from the end of the armed backward's computation to now (0 when none was marked)."""
        self._disarm()
        computed, self._computed = self._computed, -1.0
        return max(0.0, time.perf_counter() - computed) if computed >= 0 else 0.0


class GpuWait:
    """How long a step waits for DDP's communication on a GPU, from torch's DDP logger (CUDA events).

    On a GPU the CPU queues backward's kernels and moves on, so only the GPU's clock knows when the computation ended
    and when the last gradient bucket came back. DDP's logger times both on a sampled iteration (the first ten and
    every hundredth) and keeps the latest sample beside a running mean of all of them. The mean starts with the
    first iterations, when DDP rebuilds its buckets and the allocator warms up, and stays dominated by them for
    hundreds of steps; this keeps its own mean of the samples it sees, leaving out iterations before
    :attr:`FIRST_ITERATION`, and falls back to torch's mean before it has one.

    Example:
        >>> class Ddp:
        ...     data = {"iteration": 1, "backward_comm_time": 9_000_000, "backward_compute_comm_overlap_time": 0}
        ...     def _get_ddp_logging_data(self): return dict(self.data, avg_backward_comm_time=6_000_000,
        ...                                                  avg_backward_compute_comm_overlap_time=1_000_000)
        >>> wait, model = GpuWait(), Ddp()
        >>> wait.read(model)  # only a warm-up sample so far: torch's mean, 6 ms - 1 ms
        0.005
        >>> model.data = {"iteration": 5, "backward_comm_time": 3_000_000,
        ...               "backward_compute_comm_overlap_time": 500_000}
        >>> wait.read(model)
        0.0025
    """

    FIRST_ITERATION = 3  # iterations before it are left out

    def __init__(self) -> None:
        self._iteration = -1  # the iteration of the last sample folded in
        self._sum = 0.0
        self._count = 0

    def read(self, model: Any) -> float:
        """Seconds a step of ``model`` (a ``DistributedDataParallel``) waits after its computation (0 when torch
        gives no figure)."""
        try:
            data = model._get_ddp_logging_data()
        except Exception:  # noqa: BLE001 - a private torch API: without it, the GPU's wait reads 0
            return 0.0
        iteration = int(data.get("iteration", -1))
        if iteration != self._iteration and iteration >= self.FIRST_ITERATION and "backward_comm_time" in data:
            self._iteration = iteration
            self._sum += _exposed(data.get("backward_comm_time"), data.get("backward_compute_comm_overlap_time"))
            self._count += 1
        if self._count:
            return self._sum / self._count
        return _exposed(data.get("avg_backward_comm_time"), data.get("avg_backward_compute_comm_overlap_time"))


def _exposed(comm_ns: Any, overlap_ns: Any) -> float:
    """Seconds of communication after the computation ended: its duration less its overlap with the computation."""
    return max(0, int(comm_ns or 0) - int(overlap_ns or 0)) / 1e9


def timed_call(timer: CommTimer, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one collective ``call(*args, **kwargs)`` and record in ``timer`` when it was in flight (its output
    tensor, ``output_tensor`` or the first argument, says where it runs)."""
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
