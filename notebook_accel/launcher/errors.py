"""Errors a launch can end with once workers were started (refusals before any fork are ``LaunchError``)."""

from __future__ import annotations

from dataclasses import dataclass

from notebook_accel.errors import NotebookAccelError

__all__ = ["WorkerFailure", "WorkerError", "LaunchTimeoutError"]


@dataclass(frozen=True)
class WorkerFailure:
    """What one failing worker reported (or what the launcher saw of it).

    Attributes:
        rank: global rank of the worker.
        exit_code: the process's exit code (negative: killed by a signal), ``None`` if it was not reaped.
        signal_name: e.g. ``"SIGKILL"`` when a signal ended it, else ``None``.
        exc_type: the exception's type name (``"ValueError"``), empty when it died without one.
        message: the exception's message, or a description of how the process ended.
        traceback: the user's frames as text (empty when it died without an exception).
    """

    rank: int
    exit_code: int | None
    signal_name: str | None
    exc_type: str
    message: str
    traceback: str

    def summary(self) -> str:
        """One line: ``rank 1: ValueError: boom`` or ``rank 1: killed by SIGKILL``."""
        if self.exc_type:
            return f"rank {self.rank}: {self.exc_type}: {self.message}".rstrip(": ")
        return f"rank {self.rank}: {self.message}"


def _format(failures: tuple[WorkerFailure, ...]) -> str:
    """The exception text: every failing rank on one line each, then the first one's traceback."""
    first = failures[0]
    if len(failures) == 1:
        head = f"worker {first.summary()}"
    else:
        ranks = ", ".join(str(f.rank) for f in failures)
        head = f"{len(failures)} workers failed (ranks {ranks}):\n" + "\n".join(f"  {f.summary()}" for f in failures)
    if first.traceback:
        head += f"\n\nrank {first.rank}, your code only:\n{first.traceback.rstrip()}"
    return head


class WorkerError(NotebookAccelError, RuntimeError):
    """One or more launched workers failed; the other workers were stopped and reaped.

    The message names each failing rank with its exception (or exit code / signal) and shows the first
    failing rank's traceback, limited to your own frames.

    Attributes:
        failures: every failing worker, first failure first (:class:`WorkerFailure`).
        rank, exit_code, traceback: those of the first failure.

    Example:
        >>> try:
        ...     notebook_launcher(train, num_processes=2)   # doctest: +SKIP
        ... except WorkerError as e:
        ...     print(e.rank, e.failures[0].exc_type)
    """

    def __init__(self, failures: list[WorkerFailure] | tuple[WorkerFailure, ...]) -> None:
        if not failures:
            raise ValueError("WorkerError needs at least one failure")
        self.failures: tuple[WorkerFailure, ...] = tuple(failures)
        first = self.failures[0]
        self.rank: int = first.rank
        self.exit_code: int | None = first.exit_code
        self.traceback: str = first.traceback
        super().__init__(_format(self.failures))

    def __reduce__(self) -> tuple[type[WorkerError], tuple[tuple[WorkerFailure, ...]]]:
        """Pickle by failures (the default would pass the message to ``__init__``)."""
        return (type(self), (self.failures,))


class LaunchTimeoutError(NotebookAccelError, TimeoutError):
    """The run took longer than ``timeout=`` seconds; every worker was stopped and reaped.

    Raise ``timeout`` or find what hangs (a collective that one rank never reaches is the usual cause).
    """
