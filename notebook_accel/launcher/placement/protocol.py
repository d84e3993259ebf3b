"""Where a run's workers run: the :class:`Placement` seam between the launcher and the workers' processes.

A placement starts one worker per launch environment and gives the supervisor a :class:`~.spawn.WorkerHandle`
for each (its rank, device, the kernel's ends of its event and output pipes, and the descriptor that becomes
readable when it exits); the supervisor then reaches the workers only through those handles and the placement:
it reads the pipes, and asks the placement to signal a worker, to end what reaped workers left behind, and to
release the handles. Today's placement forks the workers from the kernel (:class:`~.local.LocalFork`); a cluster
placement (actors on a Ray cluster) is a sibling that gives handles of the same shape.

``num_processes=1`` in the kernel's own thread (:mod:`.inprocess`) has no worker to signal or reap, so it is not a
placement: ``notebook_launcher`` chooses it, or a placement to supervise, once.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any, Callable, Protocol

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import SystemSample
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.monitor.board import SystemBoard

__all__ = ["Placement", "Sampler"]


class Sampler(Protocol):
    """What the supervisor asks of a placement's system sampler (the local one reads the workers' processes; a
    cluster's gathers what each node's workers report)."""

    last: SystemSample | None
    next_due: float

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now`` (``time.monotonic()``)."""
        ...

    def sample(self) -> SystemSample:
        """Every worker's figures now (remembered as :attr:`last`)."""
        ...

    def before_death(self, rank: int) -> SystemSample | None:
        """The recent sample that showed ``rank``'s memory nearest to running out (what explains its death)."""
        ...

    def close(self) -> None:
        """Stop sampling; :attr:`last` stays."""
        ...


class Placement(Protocol):
    """Starts N workers with their launch environments, and signals, cleans up after and releases them.

    Example:
        >>> placement = LocalFork(threads=4)                                    # doctest: +SKIP
        >>> handles = placement.start(envs, train, (1e-3,), board=None)         # doctest: +SKIP
        >>> supervise(handles, sink, None, start, placement=placement)          # doctest: +SKIP
    """

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        """Start one worker per environment, running ``function(*args)``; return their handles in the order of
        ``envs``. If starting fails, the workers already started are ended and released before the error is
        raised.

        Args:
            envs: one launch environment per worker (its rank, world, rendezvous, device, launch choices).
            function: the user's function; ``args``: its positional arguments.
            board: the run's system board, which the main process's trackers read (``None``: none).

        Raises:
            BaseException: whatever stopped a worker from starting (an interrupt included).
        """
        ...

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        """Send ``sig`` (SIGTERM or SIGKILL) to a worker and to whatever it started; a worker gone already is
        fine."""
        ...

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        """End what the workers (reaped: call after :meth:`release` or once each has exited) started and left
        running."""
        ...

    def sampler(self, handles: Sequence[WorkerHandle]) -> Sampler | None:
        """The system sampler of the started workers, or ``None`` when none can be made (never raises)."""
        ...

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        """Reap every worker (blocking: call once they ended or were killed) and close the kernel's ends of their
        pipes. Idempotent."""
        ...
