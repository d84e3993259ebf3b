"""How a supervised run ended, as the sink is told it and as the cell gets it: pure functions of what was seen."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

from notebook_accel.durations import format_duration
from notebook_accel.events import Failed, RunOutcome, Sink, SystemSample
from notebook_accel.launcher.supervision.failures import (
    LaunchTimeoutError,
    WorkerError,
    WorkerFailure,
    grouped_summaries,
    partial_collective,
)
from notebook_accel.monitor.sampler import device_memory_note

__all__ = ["run_outcome", "finish_aborted", "signal_name", "unloadable_message", "reported_failure"]


def signal_name(exit_code: int | None) -> str | None:
    """``"SIGKILL"`` for exit code -9; ``None`` for a normal exit."""
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def unloadable_message(rank: int, error: BaseException) -> str:
    """What to tell the user when rank ``rank``'s message (its return value) cannot be loaded in the kernel."""
    return (
        f"rank {rank} returned a value that cannot be loaded in the kernel ({type(error).__name__}: {error}); "
        "an object tied to the workers' process group cannot leave them. Return plain data instead, e.g. "
        "accelerator.unwrap_model(model).state_dict(), numbers, or a path to a file saved with save_model()"
    )


def reported_failure(event: Failed, last: SystemSample | None, node: str) -> WorkerFailure:
    """The failure a worker reported, its message completed: the GPU's memory after a device out-of-memory error
    (from the ``last`` sample), and the ``node`` it ran on (a run of several machines; ``""``: this one)."""
    message = event.message
    if event.exc_type == "OutOfMemoryError" or "out of memory" in message.lower():
        message = f"{message}\n{device_memory_note(last, event.rank)}"
    message = f"{message}\n(rank {event.rank} ran on node {node})" if node else message
    return WorkerFailure(event.rank, None, None, event.exc_type, message, event.traceback, event.call)


def run_outcome(
    *, ranks: Sequence[int], finished: Mapping[int, Any], failures: Mapping[int, WorkerFailure], timed_out: bool,
    saved: str | None, elsewhere: tuple[int, ...], elapsed: float, timeout: float | None, waits: str | None = None,
) -> tuple[RunOutcome, BaseException | None]:
    """The outcome for the sink and the exception to raise (``None`` on success).

    Args:
        ranks: the local ranks, in start order.
        finished: the ranks that returned, with their values; ``failures``: the failing ranks, in order of detection.
        timed_out: whether the run was stopped by its ``timeout``.
        saved: the last checkpoint the run committed (a restart resumes from it).
        elsewhere: the ranks on other machines.
        elapsed: seconds since the launch started; ``timeout``: the run's limit.
        waits: where the ranks reported they waited when the run ended
            (:meth:`~notebook_accel.monitor.stalls.Stalls.text`), named by a timeout's error (the headline leaves it
            to the verdict beside it).
    """
    if timed_out:
        running = sorted(rank for rank in ranks if rank not in finished and rank not in failures)
        done = sorted(rank for rank in finished if rank not in failures)
        hint = (f" Ranks {done} had already returned from the function: a collective (gather, reduce, "
                "wait_for_everyone) that only the running ranks called waits for them forever; call it on every "
                "rank." if done and running else "")
        head = f"the run did not finish within timeout={format_duration(timeout)} (ranks still running: {running})"
        where = (f"; when it was stopped, {waits}. Raise timeout= if the work needs longer" if waits else
                 "; every worker was stopped. Raise timeout= if the work needs longer, or look for a collective that "
                 "one rank never reaches (the workers' last output is above)")
        error: BaseException = LaunchTimeoutError(f"{head}{where}.{hint}")
        return RunOutcome("timeout", elapsed, head, tuple(running)), error
    if failures:
        returned = tuple(rank for rank in finished if rank not in failures)
        worker_error = WorkerError(list(failures.values()), elsewhere, returned)
        worker_error.last_checkpoint = saved
        partial = partial_collective(worker_error.failures, worker_error.returned)
        real = [f for f in worker_error.failures if not f.lost_peer] or worker_error.failures
        summary = partial.split("\n")[0] if partial else "; ".join(grouped_summaries(real, short=True))
        return RunOutcome("failed", elapsed, summary, tuple(failures)), worker_error
    return RunOutcome("finished", elapsed), None


def finish_aborted(sink: Sink, error: BaseException, elapsed: float, context: str) -> None:
    """Tell ``sink`` the run ended early: ``interrupted`` for the stop button, else ``failed`` with ``context``."""
    if isinstance(error, KeyboardInterrupt):
        sink.finish(RunOutcome("interrupted", elapsed, "interrupted"))
    else:
        sink.finish(RunOutcome("failed", elapsed, f"{context}: {type(error).__name__}: {error}"))
