"""The worker's end of the event channel.

Each launched worker owns one :class:`EventWriter` around the write end of a pipe whose read end the
launcher watches in the kernel. The writer is installed for the worker's lifetime (:func:`install`) and found
by the code that reports things (the Accelerator's ``log``, progress, the launcher's worker body) through
:func:`current`. Outside a launched worker (a script, ``torchrun``, the kernel itself) :func:`current` is
``None`` and reporting code simply does not send.

Two ways to send:

- :meth:`EventWriter.send`: at once, for rare events whose order matters (started, finished, failed).
- :meth:`EventWriter.post`: batched, for frequent ones (metrics, progress). A post is a deque append (well
  under a microsecond); a daemon thread flushes the batch every ``flush_interval`` seconds, so logging at
  every training step costs almost nothing and the kernel still sees values within a fraction of a second.
  At the flush the posted :class:`~notebook_accel.events.Metrics` are packed into one
  :class:`~notebook_accel.metrics_batch.MetricsBatch` (a names table and typed arrays), so the kernel loads a
  few objects per flush, not one event per ``log`` call (every value is kept; see that module for the order).

Order: posted events arrive in the order they were posted (metrics among themselves, the other events among
themselves: a flush's metrics batch takes the place of its first ``Metrics``), and a sent event arrives after
every event posted before it.

On the wire each message is a ``list`` of events pickled by value (:func:`dumps`); :func:`read_events`
undoes that on the kernel side. Not ``Connection.send``: torch registers shared-memory reductions for tensors
on multiprocessing's pickler, and those handles die with a worker that exits right after sending its result.
Tensors on an accelerator travel as CPU copies, so a returned CUDA tensor cannot initialise CUDA in the kernel
(which would make every later launch refuse to start).
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, Literal

from notebook_accel import progress_hook
from notebook_accel.events import Event, Progress
from notebook_accel.metrics_batch import MetricsBatch, pack

__all__ = ["EventWriter", "current", "install", "uninstall", "read_events", "decode", "dumps"]

_current: EventWriter | None = None


class EventWriter:
    """Sends events from a worker to the kernel through ``conn``.

    Args:
        conn: the write end of a ``multiprocessing.Pipe(duplex=False)``.
        flush_interval: seconds between flushes of posted (batched) events.

    Example:
        >>> import multiprocessing as mp
        >>> from notebook_accel.events import Log
        >>> reader, conn = mp.Pipe(duplex=False)
        >>> writer = EventWriter(conn)
        >>> writer.send(Log(0, "stdout", "hello"))
        >>> read_events(reader)
        [Log(rank=0, stream='stdout', text='hello')]
        >>> writer.close()
    """

    def __init__(self, conn: Connection, flush_interval: float = 0.1) -> None:
        self._conn = conn
        self._pending: deque[Event] = deque()
        self._send_lock = threading.RLock()  # re-entrant: send/flush hold it around _drain + _write
        self._closed = threading.Event()
        self._interval = flush_interval
        self._thread: threading.Thread | None = None
        self.drained = 0  # posted events taken for sending so far (counted a flush at a time, not a post at a time)

    def send(self, event: Event) -> None:
        """Send ``event`` now, after any posted events (so order is kept). Raises if it cannot be pickled."""
        with self._send_lock:  # drain and write together: a concurrent flush can neither reorder nor race
            batch = pack(self._drain())
            batch.append(event)
            self._write(batch)

    def post(self, event: Event) -> None:
        """Queue ``event``; it is sent within ``flush_interval`` seconds."""
        self._pending.append(event)
        if self._thread is None:
            self._start_flusher()

    def flush(self) -> None:
        """Send every posted event now."""
        with self._send_lock:
            batch = self._drain()
            if batch:
                self._write(pack(batch))

    def close(self) -> None:
        """Flush, stop the flusher thread and close the pipe. Safe to call twice."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self.flush()
        except (OSError, EOFError):
            pass
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._conn.close()

    def _drain(self) -> list[Event]:
        """Take every queued event, oldest first."""
        out: list[Event] = []
        pending = self._pending
        while pending:
            out.append(pending.popleft())
        self.drained += len(out)
        return out

    def _write(self, batch: list[Any]) -> None:
        """Send one message; the lock keeps the flusher thread and the caller from interleaving bytes."""
        payload = dumps(batch)
        with self._send_lock:
            self._conn.send_bytes(payload)

    def _start_flusher(self) -> None:
        """Start the daemon thread that sends posted events every interval."""
        self._thread = threading.Thread(target=self._flush_loop, name="notebook-accel-events", daemon=True)
        self._thread.start()

    def _flush_loop(self) -> None:
        """Body of the flusher thread."""
        while not self._closed.wait(self._interval):
            try:
                self.flush()
            except (OSError, EOFError):
                return


_WRAPPED_FORWARD = "_notebook_accel_original_forward"  # set by notebook_accel.precision.wrap_forward


def _unwrapped(module: Any) -> Any:
    """The user's module inside DDP and ``torch.compile`` wrappers, without our mixed-precision forward (a
    copy of the module object is changed, never the user's)."""
    ddp = sys.modules.get("torch.nn.parallel")
    while True:
        if ddp is not None and isinstance(module, ddp.DistributedDataParallel):
            module = module.module
        elif "_orig_mod" in getattr(module, "__dict__", {}) or "_orig_mod" in getattr(module, "_modules", {}):
            module = module._orig_mod
        else:
            break
    if _WRAPPED_FORWARD in module.__dict__:
        module = copy.copy(module)
        module.__dict__.pop(_WRAPPED_FORWARD)
        module.__dict__.pop("forward", None)
    return module


def _loaded_as_is(value: Any) -> Any:
    """What a wrapped module is loaded through in the kernel: its inner module, unchanged."""
    return value


class _ByValuePickler(pickle.Pickler):
    """A plain pickler that copies tensors living on an accelerator to the CPU and sends a prepared model as
    the user's own module: a DDP wrapper cannot be loaded where there is no process group (the kernel)."""

    def reducer_override(self, obj: Any) -> Any:
        """Reduce a non-CPU tensor as its CPU copy, a wrapped module as its inner module; the rest as usual."""
        torch = sys.modules.get("torch")
        if torch is None:
            return NotImplemented
        if isinstance(obj, torch.nn.Module):
            inner = _unwrapped(obj)
            return NotImplemented if inner is obj else (_loaded_as_is, (inner,))
        if not isinstance(obj, torch.Tensor) or obj.device.type in ("cpu", "meta"):
            return NotImplemented
        copy = obj.detach().cpu()
        if isinstance(obj, torch.nn.Parameter):
            copy = torch.nn.Parameter(copy, requires_grad=obj.requires_grad)
        return copy.__reduce_ex__(pickle.HIGHEST_PROTOCOL)


def dumps(obj: Any) -> bytes:
    """Pickle ``obj`` by value for the channel (see the module docstring). Raises if it cannot be pickled."""
    buffer = io.BytesIO()
    _ByValuePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


def current() -> EventWriter | None:
    """The writer of this worker, or ``None`` outside a launched worker."""
    return _current


def install(writer: EventWriter) -> None:
    """Make ``writer`` this process's channel (called once by the launcher's worker body after the fork); the
    prepared DataLoaders' progress then travels on it too (:mod:`notebook_accel.progress_hook`)."""
    global _current
    _current = writer
    progress_hook.set_hook(None if writer is None else _post_progress)


def uninstall() -> EventWriter | None:
    """Forget the installed writer (it is returned, not closed). A forked child calls this first of all."""
    global _current
    writer, _current = _current, None
    progress_hook.set_hook(None)
    return writer


def _post_progress(rank: int, n: int, total: int | None, desc: str, epoch: int | None,
                   source: Literal["loader", "loop"]) -> None:
    """The progress hook of a process with a channel: post the position as a ``Progress`` event, timed now."""
    writer = _current
    if writer is not None:
        writer.post(Progress(rank, n, total, desc, time.time(), epoch, source))


def decode(message: bytes | bytearray) -> list[Event]:
    """The events of one received message (unpickling errors propagate: the message is the user's data); a
    worker's metrics come as :class:`~notebook_accel.metrics_batch.MetricsBatch` (give them to a sink's
    ``handle_metrics``; see :class:`~notebook_accel.display.base.BaseSink`)."""
    loaded = pickle.loads(message)
    return list(loaded) if isinstance(loaded, list) else [loaded]


def read_events(conn: Connection) -> list[Event]:
    """Receive one message on the kernel side and return its events, a metrics batch as the ``Metrics`` events
    that were posted (raises ``EOFError`` when closed). The launcher reads with :func:`decode` instead."""
    out: list[Event] = []
    for event in decode(conn.recv_bytes()):
        if isinstance(event, MetricsBatch):
            out.extend(event.events())
        else:
            out.append(event)
    return out
