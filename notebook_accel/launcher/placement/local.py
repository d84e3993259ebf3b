"""The local placement: workers forked from the kernel on this machine (:mod:`.spawn`), each leading its own process
group (:mod:`.processes`)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.launcher.kernel.fds import RunDescriptors
from notebook_accel.launcher.placement.processes import end_groups, signal_worker
from notebook_accel.launcher.placement.spawn import WorkerHandle, close_handles, start_workers
from notebook_accel.monitor.board import SystemBoard
from notebook_accel.monitor.sampler import SystemSampler

__all__ = ["LocalFork", "LEFTOVER_GRACE_SECONDS"]

LEFTOVER_GRACE_SECONDS = 1.0  # for processes a finished worker left behind, between SIGTERM and SIGKILL


@dataclass(frozen=True)
class LocalFork:
    """Fork the workers from this process (a :class:`~.protocol.Placement`).

    Args:
        threads: intra-op threads per worker.
        inherited_fds: more of the kernel's descriptors each worker closes at once (the rendezvous listener, the
            guard's pipe).
        store_folder: the run's private store folder, handed to each worker through the fork; ``None``: the
            workers use the kernel's TCP store.
        descriptors: the run's registered descriptors; the workers' pipes and pidfds join them, so that the
            workers of runs started later close them.
        store_secret: the run's shared store secret (several machines), or ``None``.
    """

    threads: int = 1
    inherited_fds: tuple[int, ...] = ()
    store_folder: str | None = None
    descriptors: RunDescriptors | None = None
    store_secret: bytes | None = None

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        """Fork one worker per environment (see :func:`~.spawn.start_workers`); the workers inherit ``board``."""
        return start_workers(envs, self.threads, function, args, inherited_fds=self.inherited_fds,
                             store_folder=self.store_folder, descriptors=self.descriptors,
                             store_secret=self.store_secret, board=board)

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        """Send ``sig`` to the worker (unless already reaped) and to its process group."""
        signal_worker(handle.pid, handle.exit_code is not None, sig)

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        """End what the reaped workers started and left running; their process groups share their pids."""
        end_groups([h.pid for h in handles if h.pid > 0], LEFTOVER_GRACE_SECONDS)

    def sampler(self, handles: Sequence[WorkerHandle]) -> SystemSampler | None:
        """A sampler of the forked workers' process trees and GPUs, or ``None`` when one cannot be made here."""
        try:
            return SystemSampler({h.rank: h.pid for h in handles}, {h.rank: h.device for h in handles}, fresh=True)
        except Exception:  # noqa: BLE001 - monitoring is a convenience: psutil or NVML trouble must not stop a launch
            return None

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        """Reap every worker and close the kernel's ends of its pipes (:func:`~.spawn.close_handles`)."""
        close_handles(handles)
