"""What one launch attempt holds open in the kernel, opened in order and closed in one place.

:func:`open_resources` opens, in this order: node 0's rendezvous listener and store (not served yet), the
heartbeat of several nodes, the private store folder of one machine, and the registration of the run's descriptors;
the system board joins just before the fork (:meth:`RunResources.open_board`), the kernel-death guard just after it
(:meth:`RunResources.guard_workers`). Each is
handed to :meth:`RunResources.enter` as it is opened, and :meth:`RunResources.close` closes them all in reverse,
once, each whatever the others do: on a failure while opening, when a blocking run ends, or, for a background run,
in the supervising thread that was handed the resources (:meth:`RunResources.hand_over`) once the workers existed.

Some steps must wait for the workers, and the launcher calls them at those points: the store is served only once
the workers exist (no store thread may exist in the kernel at the fork: :meth:`RunResources.serve`), the guard is
started once they are forked and told their process groups (:meth:`RunResources.guard_workers`: starting it costs
about a millisecond that no longer delays the fork, and no worker inherits its pipe), and the board is made before
the fork so that the workers inherit it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

from notebook_accel.environment import LaunchEnvironment, restart_variables
from notebook_accel.launcher.kernel.fds import RunDescriptors
from notebook_accel.launcher.kernel.guard import KernelDeathGuard
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.plan import Plan, choose_port, environments
from notebook_accel.launcher.rendezvous.heartbeat import PeerWatch
from notebook_accel.launcher.rendezvous.store import (
    StoreServer,
    bind_listener,
    new_store_folder,
    remove_store_folder,
    store_secret,
    worker_variables,
)
from notebook_accel.monitor.board import SystemBoard

__all__ = ["RunResources", "open_resources"]

T = TypeVar("T")


class RunResources:
    """The owner of one attempt's open resources: closes them in reverse order of opening, once.

    Used as a context manager by whoever owns it: leaving the block closes everything, unless ownership was
    handed over (:meth:`hand_over`); the new owner then calls :meth:`close`.

    Attributes:
        envs: each local worker's launch environment; ``port``: the run's rendezvous port.
        secret: the run's shared store secret (several machines), or ``None``.
        store, guard, watch, private, descriptors, board: the resources (``None`` where the run has none).

    Example:
        >>> with RunResources() as resources:
        ...     folder = resources.enter("/tmp/x", lambda path: print("removed", path))
        ...     _ = resources.enter(1, lambda n: print("closed", n))
        closed 1
        removed /tmp/x
    """

    def __init__(self) -> None:
        self._closers: list[Callable[[], object]] = []
        self._lock = threading.Lock()
        self._handed_over = False
        self.envs: list[LaunchEnvironment] = []
        self.port = 0
        self.secret: bytes | None = None
        self.store: StoreServer | None = None
        self.guard: KernelDeathGuard | None = None
        self.watch: PeerWatch | None = None
        self.private: str | None = None
        self.descriptors: RunDescriptors | None = None
        self.board: SystemBoard | None = None
        self.guarded = False  # forked workers: start a guard once they exist (guard_workers)

    def enter(self, resource: T, close: Callable[[T], object]) -> T:
        """Own ``resource`` (just opened): ``close(resource)`` runs at :meth:`close`, before what was entered
        earlier. Returns ``resource``."""
        with self._lock:
            self._closers.append(functools.partial(close, resource))
        return resource

    def close(self) -> None:
        """Close everything entered, last first; every closer runs even when one raises, and the first error is
        raised after all ran. Idempotent (a second call, from any thread, closes nothing)."""
        with self._lock:
            closers, self._closers = self._closers, []
        error: BaseException | None = None
        for close in reversed(closers):
            try:
                close()
            except BaseException as e:  # noqa: BLE001 - the others must still close; raised below
                error = error or e
        if error is not None:
            raise error

    def hand_over(self) -> None:
        """Give ownership to another thread (a background run's, once its workers exist): leaving the ``with``
        block no longer closes; the new owner calls :meth:`close` when the run ends."""
        self._handed_over = True

    def __enter__(self) -> RunResources:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if not self._handed_over:
            self.close()

    def inherited_fds(self) -> tuple[int, ...]:
        """The kernel's descriptors of this run that each worker must close at once (the listener; the guard is
        started after the fork)."""
        return (self.store.fd,) if self.store and self.store.fd >= 0 else ()

    def open_board(self, ranks: Sequence[int]) -> SystemBoard:
        """Make the run's system board (just before the fork: the workers inherit its memory)."""
        self.board = self.enter(SystemBoard(ranks), SystemBoard.close)
        return self.board

    def guard_workers(self, handles: Sequence[WorkerHandle]) -> None:
        """Once forked: start the guard, which ends the workers' process groups (and removes the private store
        folder) if the kernel dies. A worker dies with the kernel from its first instruction (``PR_SET_PDEATHSIG``);
        the guard is for what it starts later."""
        if not self.guarded:
            return
        self.guard = guard = self.enter(KernelDeathGuard(), KernelDeathGuard.close)
        if self.private is not None:
            guard.remove_on_death(self.private)  # a killed kernel leaves no folder behind
        guard.watch(h.pid for h in handles)

    def serve(self) -> None:
        """In the supervising thread, once the workers exist: serve the store (several machines; one machine's
        port is only held, as no one connects), then start the heartbeat."""
        if self.store is not None and self.private is None:
            self.store.start()
        if self.watch is not None:
            self.watch.start()


def open_resources(plan: Plan, attempt: int, resume: str | None) -> RunResources:
    """Open what one attempt of ``plan`` needs before the fork; on a failure, close what was opened and raise.

    Args:
        plan: the checked launch.
        attempt: 0, then the restart count; ``resume``: the checkpoint a restart resumes from.

    Raises:
        LaunchError: the port is busy, or ``master_addr`` is not an address of this machine.
    """
    resources = RunResources()
    try:
        _open(resources, plan, attempt, resume)
    except BaseException:
        resources.close()
        raise
    return resources


def _open(res: RunResources, plan: Plan, attempt: int, resume: str | None) -> None:
    """The opening steps of :func:`open_resources`, each resource entered as soon as it exists."""
    if plan.cluster is not None:  # its placement places the workers; rank 0's node serves the rendezvous there
        variables = restart_variables(attempt, resume) if attempt else {}
        res.envs = environments(plan.devices, 0, 1, "", 0, plan.precision, plan.steps, variables, plan.engine)
        res.descriptors = res.enter(RunDescriptors().open(), RunDescriptors.close)
        return
    local = len(plan.devices)
    res.secret = store_secret() if plan.nodes > 1 else None  # several machines: keyed names, sealed values
    # Node 0 of a forked run serves the rendezvous store itself, bound to master_addr only (rendezvous/store.py); one
    # machine: the port is held, not served (below).
    listener = res.enter(bind_listener(plan.master_addr, plan.port, listen=plan.nodes > 1),
                         lambda s: s.close()) if plan.node == 0 and not plan.in_process else None
    port = choose_port(plan.port, plan.master_addr, plan.node) if listener is None else listener.getsockname()[1]
    res.port = int(port)
    variables = {} if plan.in_process else worker_variables(plan.master_addr, plan.nodes)
    if attempt:
        variables.update(restart_variables(attempt, resume))
    res.envs = environments(plan.devices, plan.node, plan.nodes, plan.master_addr, int(port), plan.precision,
                            plan.steps, variables, plan.engine, plan.fp8)
    if listener is not None:  # the store owns the listener from here on and closes it
        res.store = res.enter(StoreServer(listener, plan.nodes * local, plan.rdzv.join_timeout), StoreServer.close)
    res.guarded = not plan.in_process  # a guard ends the workers' groups if the kernel is killed (guard_workers)
    if plan.nodes > 1 and not plan.in_process:  # a lost node ends the run (rendezvous/heartbeat.py)
        res.watch = res.enter(PeerWatch(plan.master_addr, int(port), plan.node, plan.nodes, local,
                                        plan.rdzv.keep_alive_interval, plan.rdzv.keep_alive_max_attempt,
                                        plan.rdzv.join_timeout, res.secret), PeerWatch.close)
    # One machine: the workers rendezvous in a FileStore only this user can open, not on the TCP port
    # (rendezvous/store.py); the port stays bound (MASTER_PORT names it) but is not served: starting a TCP store
    # costs a launch 2-4 ms.
    if res.store is not None and plan.nodes == 1:
        res.private = res.enter(new_store_folder(), remove_store_folder)
    # What this run holds open in the kernel: the workers of every later fork close it (kernel/fds.py); the guard is
    # read when asked, as it starts later. Sockets are looked for by port only where the store serves connections
    # (several machines): one machine's listener is closed by number, and looking costs every worker a walk of its
    # descriptors before its function starts.
    store, watch = res.store, res.watch
    served = (store is not None and res.private is None) or watch is not None
    res.descriptors = res.enter(RunDescriptors([lambda: (store.fd if store else -1, res.guard.fd if res.guard else -1),
                                                lambda: watch.descriptors() if watch else ()],
                                               {int(port)} if served else set()).open(), RunDescriptors.close)

