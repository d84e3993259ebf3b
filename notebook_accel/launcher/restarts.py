"""A run's restarts (``notebook_launcher(max_restarts=N)``) as a state people see: which attempt this is, what it
resumes from, and why the one before it ended.

:class:`Restart` is carried from one attempt to the next: its :attr:`~Restart.line` goes to the sinks with the run's
:class:`~notebook_accel.events.RunInfo` (the dashboard's header, the console, the saved result say "restart 1 of 2 from
checkpoint_0 after rank 1: its process on node 10.0.0.2 ended without a result ..."), its :attr:`~Restart.cause` to the
placement (a Ray reservation that cannot be placed after a lost node says so), and its :attr:`~Restart.earlier` to the
last attempt's :class:`~notebook_accel.launcher.supervision.failures.WorkerError`, which lists every attempt's cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from notebook_accel.launcher.supervision.failures import WorkerError, grouped_summaries

__all__ = ["Restart"]

_FROM_START = "the start (no checkpoint committed yet)"


@dataclass(frozen=True)
class Restart:
    """Where a run's restarts stand before an attempt (the first attempt's is empty).

    Attributes:
        line: what the attempt is (``"restart 1 of 2 from ckpt after rank 1: ..."``), ``""`` for the first.
        cause: the failure the attempt follows, in one line (``"rank 1: killed by SIGKILL ..."``), else ``""``.
        earlier: one line per earlier attempt: its cause and where the next one resumed from.

    Example:
        >>> Restart().line
        ''
    """

    line: str = ""
    cause: str = ""
    earlier: tuple[str, ...] = ()

    def next(self, ended: int, restarts: int, resume: str | None, error: WorkerError) -> Restart:
        """The state after attempt ``ended`` (counted from 1) failed with ``error``; the next resumes from
        ``resume`` (``None``: from the start), restart ``ended`` of ``restarts``."""
        real = [f for f in error.failures if not f.lost_peer] or list(error.failures)  # the cause, not its echoes
        cause = "; ".join(grouped_summaries(real, short=True))
        origin = resume or _FROM_START
        done = ended > restarts  # that was the last attempt: nothing restarts from it
        earlier = (*self.earlier, f"attempt {ended}: {cause}" + ("" if done else f"; restarted from {origin}"))
        return Restart(f"restart {ended} of {restarts} from {origin} after {cause}", cause, earlier)
