"""Where a training step's time goes, measured in each worker: data, compute, communication, optimizer, other.

A step runs from one batch handed to the training loop to the next. Inside it the worker measures, with a
monotonic clock and no synchronisation:

- **data**: the wait for the next batch inside the prepared DataLoader (its fetch);
- **backward**: ``accelerator.backward``; forward plus backward is the time from the batch to the end of backward;
- **communication**: for DDP, the communication the step *waits* for: the time from the end of backward's
  computation to the return of ``backward`` (DDP waits there for its last gradient bucket), measured every step
  with a final callback queued on the autograd engine when backward starts. The all-reduce that overlaps the
  backward computation costs the step nothing and is not counted (torch's own figure, from the first bucket sent
  to the last one back, counts it, and called compute-bound runs communication-bound). On a GPU the CPU does not
  wait there, so torch's DDP logger gives it instead (the last bucket's return less the end of the computation,
  CUDA events; it samples the first ten iterations and every hundredth; see :class:`.collectives.GpuWait`); that
  wait is bounded by the step, not by the CPU's forward and backward, which only queued the GPU's work. For FSDP and
  DeepSpeed, the time their collectives were in flight (:mod:`.collectives`), overlap included;
- **optimizer**: ``optimizer.step()``;
- **other**: the rest (logging, evaluation, the user's own code after the step).

Steps without a backward (evaluation) are not counted, nor a clock's first step (DDP rebuilds its buckets there, and
allocators warm up). Sums over about a second of steps travel to the kernel as
one :class:`~notebook_accel.events.StepTimes` event, so measuring costs a few clock reads per step.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Iterator
from typing import Any

from notebook_accel import channel
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import StepTimes
from notebook_accel.monitor.collectives import CommTimer, ExposedWait, GpuWait

__all__ = ["StepClock", "clock", "flush", "paused", "reset"]

_POST_SECONDS = 1.0
WARMUP_STEPS = 1  # a clock's first steps are not counted: they are slower than the run (allocation, bucket rebuild)
_clock: StepClock | None = None
_owner: Any = None  # the channel writer the clock posts to
_paused = False


class StepClock:
    """Accumulates one worker's step phases and posts them through ``post`` about once a second; the first
    ``warmup`` steps are left out.

    Example:
        >>> sent = []
        >>> c = StepClock(0, sent.append, warmup=0)
        >>> c.batch_ready(0.0, now=1.0); c.backward(0.5); c.batch_ready(0.1, now=2.0)
        >>> c.flush(); sent[0].steps, sent[0].step_seconds, sent[0].backward_seconds
        (1, 1.0, 0.5)
    """

    def __init__(self, rank: int, post: Any, loader_workers: int = 0, warmup: int = WARMUP_STEPS) -> None:
        self.rank = rank
        self._post = post
        self.loader_workers = loader_workers
        self._models: list[weakref.ref[Any]] = []  # DDP models whose communication is measured
        self.comm_timer = CommTimer()  # FSDP's collectives, timed as they run
        self._step_start = -1.0  # < 0: no step open
        self._backward = self._optimizer = self._forward_backward = 0.0  # the open step's phases
        self._exposed = 0.0  # the open step's wait for DDP's communication after backward's computation
        self._measured = False  # a phase of the open step was measured (its figures are to be cleared)
        self._sums = [0.0] * 6  # step, data, forward+backward, backward, optimizer, exposed communication
        self._steps = 0
        self._warmup = warmup
        self._wait = ExposedWait()
        self._gpu_waits: dict[int, GpuWait] = {}  # id(model) -> its sampled wait
        self._next_post = time.perf_counter() + _POST_SECONDS

    def watch(self, model: Any) -> None:
        """Count ``model``'s (a ``DistributedDataParallel``) gradient communication in the steps."""
        self._models.append(weakref.ref(model))

    def batch_ready(self, fetch_seconds: float, now: float | None = None) -> None:
        """A batch is handed to the loop after ``fetch_seconds`` of waiting: the previous step ends here."""
        now = time.perf_counter() if now is None else now
        if self._measured:  # an evaluation loop (no backward, no optimizer) pays only the two lines below
            self._end_step(now, fetch_seconds)
        self._step_start = now
        if now >= self._next_post:
            self.flush()

    def end_of_epoch(self) -> None:
        """The loader ran out: the last step ends now; post what was measured."""
        self._end_step(time.perf_counter(), 0.0)
        self._step_start = -1.0
        self.flush()

    def _end_step(self, now: float, data: float) -> None:
        """The open step ends at ``now`` after ``data`` seconds of waiting for its next batch: count it when it
        had a backward, and clear its phases."""
        if self._step_start >= 0 and self._backward > 0:
            self._close_step(now, data)
        self._backward = self._optimizer = self._forward_backward = self._exposed = 0.0
        self._measured = False

    def backward_begins(self, loss: Any) -> float:
        """``accelerator.backward(loss)`` is about to run: with a watched DDP model on a CPU, mark the end of its
        computation. Returns the time now (``time.perf_counter()``)."""
        if any(getattr(ref(), "device_type", "") == "cpu" for ref in self._models):
            self._wait.arm(loss)
        return time.perf_counter()

    def backward(self, seconds: float) -> None:
        """``accelerator.backward`` took ``seconds`` (it ended just now)."""
        self._exposed += self._wait.take()
        self._backward += seconds
        self._measured = True
        if self._step_start >= 0:
            self._forward_backward = max(time.perf_counter() - self._step_start, seconds)

    def optimizer(self, seconds: float) -> None:
        """``optimizer.step()`` took ``seconds``."""
        self._optimizer += seconds
        self._measured = True

    def _close_step(self, now: float, data: float) -> None:
        """Add the step that ends at ``now``, ``data`` seconds of it waiting for data, to the sums (a warm-up step
        is left out)."""
        if self._warmup > 0:
            self._warmup -= 1
            return
        sums = self._sums
        sums[0] += now - self._step_start
        sums[1] += data
        sums[2] += self._forward_backward
        sums[3] += self._backward
        sums[4] += self._optimizer
        sums[5] += self._exposed
        self._steps += 1

    def _ddp_sampled(self) -> float:
        """Seconds of DDP communication the steps waited for on a GPU (torch's sampled figure per step, times the
        steps); 0 for models on a CPU, whose wait is measured."""
        per_step = 0.0
        for ref in self._models:
            model = ref()
            if model is not None and getattr(model, "device_type", "cpu") == "cuda":
                per_step += self._gpu_waits.setdefault(id(model), GpuWait()).read(model)
        return per_step * self._steps

    def flush(self) -> None:
        """Post the steps measured since the last post (nothing when there were none)."""
        self._next_post = time.perf_counter() + _POST_SECONDS
        if not self._steps:
            return
        step, data, forward_backward, backward, optimizer, exposed = self._sums
        # the CPU's wait ends backward, so it is no longer than forward+backward; a GPU's is not bounded by the
        # CPU's time there (the CPU queues backward and moves on), only by the step
        ddp = min(exposed, forward_backward) + self._ddp_sampled()
        comm = min(ddp + self.comm_timer.take(), max(0.0, step - data))
        self._post(StepTimes(self.rank, self._steps, step, data, forward_backward, backward, comm, optimizer,
                             self.loader_workers))
        self._sums = [0.0] * 6
        self._steps = 0


def clock() -> StepClock | None:
    """The step clock of this process's channel (made on first use; a new one for a new channel), or ``None``
    outside a launched worker or inside :func:`paused`."""
    global _clock, _owner
    writer = channel.current()
    if writer is None or _paused:
        return None
    if _clock is None or _owner is not writer:
        _clock, _owner = StepClock(LaunchEnvironment.from_environ().rank, writer.post), writer
    return _clock


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Measure nothing inside (a model prepared inside gets no timing hook): for benchmarks that compare the
    cost of measuring with not measuring in one run."""
    global _paused
    before, _paused = _paused, True
    try:
        yield
    finally:
        _paused = before


def flush() -> None:
    """Post this process's measured steps now (the worker calls it before reporting its end)."""
    if _clock is not None and _owner is channel.current():
        _clock.flush()


def reset() -> None:
    """Forget the clock."""
    global _clock, _owner
    _clock = _owner = None
