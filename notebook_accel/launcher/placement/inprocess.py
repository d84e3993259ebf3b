"""``num_processes=1``: run the function in this process, no fork, with the same environment and events.

The function sees the same launch environment a forked rank 0 would (``RANK=0``, ``WORLD_SIZE=1``, the
device, mixed precision, ``NOTEBOOK_ACCEL_LAUNCHED=1``), set only for the call and restored after it, and
its ``accelerator.log`` / progress events reach the same sink (so the dashboard still works). Its output
goes straight to the cell, as any code in the kernel would.

Exceptions propagate **as they are**: the user's own exception object with its full traceback, so
``%debug`` and post-mortem tools work on it; there is no worker to name.
A ``timeout`` is never handled here: ``notebook_launcher`` runs a single process with a timeout in one forked worker.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from notebook_accel import channel, environment
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import Event, Finished, RunOutcome, Sink, Started
from notebook_accel.integrations import add_trainer_callback
from notebook_accel.launcher.child.main import wait_for_background_save

__all__ = ["InProcessWriter", "run_in_process"]

_OURS = (
    environment.MASTER_ADDR,
    environment.MASTER_PORT,
    environment.DEVICE,
    environment.MIXED_PRECISION,
    environment.GRADIENT_ACCUMULATION_STEPS,
    environment.FP8,
    environment.LAUNCHED,
)


class InProcessWriter:
    """The in-process twin of :class:`~notebook_accel.channel.EventWriter`: events go straight to the sink.

    ``send`` and ``post`` both hand the event to the sink at once (under a lock, as they may come from
    several threads); ``flush`` has nothing to do; after ``close`` events are dropped.
    """

    def __init__(self, sink: Sink) -> None:
        self._sink = sink
        self._lock = threading.Lock()
        self._closed = False

    def send(self, event: Event) -> None:
        """Hand ``event`` to the sink now."""
        with self._lock:
            if not self._closed:
                self._sink.handle(event)

    post = send

    def flush(self) -> None:
        """Nothing is ever pending."""

    def close(self) -> None:
        """Drop later events. Safe to call twice."""
        with self._lock:
            self._closed = True


def run_in_process(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    env: LaunchEnvironment,
    sink: Sink,
    start_time: float,
) -> Any:
    """Run ``function(*args)`` here under ``env``; report to ``sink``; return its value.

    No timeout is handled here (no SIGALRM raised inside arbitrary code): ``notebook_launcher`` runs a single
    process with ``timeout=`` in one forked worker.

    Raises:
        Whatever the function raises, unchanged.
    """
    values: dict[str, str | None] = {name: None for name in _OURS}
    values.update(env.to_environ())
    writer = InProcessWriter(sink)
    previous = channel.uninstall()
    channel.install(writer)  # type: ignore[arg-type]  # same interface as EventWriter
    remove_callback = add_trainer_callback(in_worker=False)  # taken out again below: the kernel's Trainers stay
    status: Any = "failed"
    error = ""
    try:
        writer.send(Started(env.rank, os.getpid(), env.device or "cpu"))
        with environment.patched_environ(values):
            value = function(*args)
            wait_for_background_save("the training function returned")
        writer.send(Finished(env.rank, None))
        status = "finished"
        return value
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        remove_callback()
        writer.close()
        channel.uninstall()
        if previous is not None:
            channel.install(previous)
        sink.finish(RunOutcome(status, time.monotonic() - start_time, error, (0,) if status == "failed" else ()))
