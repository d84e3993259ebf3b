"""How a supervised run ended, as the sink is told it and as the cell gets it: pure functions of what was seen."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

from notebook_accel.durations import format_duration
from notebook_accel.events import RunOutcome, Sink
from notebook_accel.launcher.supervision.failures import (
    LaunchTimeoutError,
    WorkerError,
    WorkerFailure,
    grouped_summaries,
    partial_collective,
)

__all__ = ["run_outcome", "finish_aborted", "signal_name", "unloadable_message"]


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


def run_outcome(
    *, ranks: Sequence[int], finished: Mapping[int, Any], failures: Mapping[int, WorkerFailure], timed_out: bool,
    saved: str | None, elsewhere: tuple[int, ...], elapsed: float, timeout: float | None,
) -> tuple[RunOutcome, BaseException | None]:
    """The outcome for the sink and the exception to raise (``None`` on success).

    Args:
        ranks: the local ranks, in start order.
        finished: the ranks that returned, with their values; ``failures``: the failing ranks, in order of detection.
        timed_out: whether the run was stopped by its ``timeout``.
        saved: the last checkpoint the run committed (a restart resumes from it).
        elsewhere: the ranks on other machines.
        elapsed: seconds since the launch started; ``timeout``: the run's limit.
    """
    if timed_out:
        running = sorted(rank for rank in ranks if rank not in finished and rank not in failures)
        done = sorted(rank for rank in finished if rank not in failures)
        hint = (f" Ranks {done} had already returned from the function: a collective (gather, reduce, "
                "wait_for_everyone) that only the running ranks called waits for them forever; call it on every "
                "rank." if done and running else "")
        error: BaseException = LaunchTimeoutError(
            f"the run did not finish within timeout={format_duration(timeout)} (ranks still running: {running}); "
            "every worker was stopped. Raise timeout= if the work needs longer, or look for a collective that one "
            f"rank never reaches (the workers' last output is above).{hint}"
        )
        return RunOutcome("timeout", elapsed, str(error).split(";")[0], tuple(running)), error
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
