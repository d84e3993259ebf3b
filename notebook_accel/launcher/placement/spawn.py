"""The kernel's side of starting workers: one event pipe and two output pipes per worker, then a fork.

Pipes are made just before each fork and the kernel closes the write ends right after it, so each pipe's
write end lives only in its worker (and in whatever the worker forks). The worker's end is learnt from a
pidfd (:mod:`.processes`), not from a pipe, so a child the worker leaves behind cannot hide it. The
kernel's descriptors that a later fork inherits (read ends, pidfds, the rendezvous listener, and those of
every other run of this kernel: :mod:`notebook_accel.launcher.kernel.fds`) are closed first thing in that child
(``WorkerSpec.close_fds``); one run forks at a time. An interrupt (the stop button) that arrives while
the workers are being forked is held until every fork has been recorded, then raised, so no worker is
started without the kernel knowing its pid.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import popen_fork
from multiprocessing.connection import Connection
from multiprocessing.context import ForkProcess
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, Callable

from notebook_accel.display.flush import flush_soon
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.launcher.child.main import KernelState, WorkerSpec, survey_kernel, worker_main
from notebook_accel.launcher.kernel import fds as kernel_fds
from notebook_accel.launcher.placement.processes import end_groups, exit_fd, signal_worker
from notebook_accel.monitor.board import SystemBoard

__all__ = ["WorkerHandle", "start_workers", "close_handles", "interrupts_held"]

_FORK = multiprocessing.get_context("fork")


class _RankPopen(popen_fork.Popen):
    """``popen_fork.Popen`` without its flush of both standard streams before every fork: :func:`start_workers`
    flushes them once for all the workers (without waiting, in a kernel: :func:`.kernel_flush.flush_soon`). What
    stays buffered is never written by a worker: it replaces ``sys.stdout``/``sys.stderr`` at once and ends with
    ``os._exit``."""

    def __init__(self, process_obj: BaseProcess) -> None:
        self.returncode = None
        self.finalizer = None
        self._launch(process_obj)  # type: ignore[attr-defined]  # popen_fork.Popen has it; typeshed omits it


class _RankProcess(ForkProcess):
    """A forked worker, started by :class:`_RankPopen`."""

    @staticmethod
    def _Popen(process_obj: BaseProcess) -> _RankPopen:
        return _RankPopen(process_obj)
_FORKING = threading.Lock()  # one run forks at a time: no run's half-made pipes leak into another's worker


@dataclass
class WorkerHandle:
    """The kernel's view of one started worker: its process, the read ends of its pipes, and the descriptor
    that becomes readable when it exits (a pidfd; multiprocessing's sentinel where there is none).

    The worker leads its own process group, whose id is its pid (``pid``, 0 until it was started). Another
    placement's handle (a remote rank's: :mod:`.remote.handles`) has no local process and overrides :meth:`reap`.

    Attributes:
        node: the address of the machine the worker runs on, where it is another machine (``""``: this one).
        death_reason: why the worker ended without a result, where the placement knows better than an exit code
            (a lost node); the supervisor reports it instead of the exit code's meaning.
        drain_seconds: how long the supervisor waits for a dead worker's last bytes (0: a pipe already holds them;
            a socket's may still be on the way).
    """

    rank: int
    process: BaseProcess | None
    events: Connection
    stdout_fd: int
    stderr_fd: int
    device: str
    exit_code: int | None = None
    exit_fd: int = -1
    pidfd: bool = False
    pid: int = 0
    sentinel: int = -1
    node: str = ""
    death_reason: str | None = None
    drain_seconds: float = 0.0

    def reap(self) -> int:
        """Wait for the process to end (call once it has ended or was killed) and return its exit code."""
        if self.exit_code is None and self.process is not None:
            self.process.join()
            self.exit_code = self.process.exitcode if self.process.exitcode is not None else -1
            self.process.close()
            self.sentinel = -1  # closed with the process object
        if self.pidfd and self.exit_fd >= 0:
            os.close(self.exit_fd)
            self.exit_fd = -1
        return -1 if self.exit_code is None else self.exit_code

    def open_fds(self) -> list[int]:
        """The kernel's descriptors of this worker that are still open (for
        :mod:`notebook_accel.launcher.kernel.fds`)."""
        events = -1 if self.events.closed else self.events.fileno()
        return [events, self.stdout_fd, self.stderr_fd, self.exit_fd, self.sentinel]

    def close_stream(self, fd: int) -> None:
        """Close one of the output read ends (by value) if it is still open."""
        if fd >= 0 and fd == self.stdout_fd:
            self.stdout_fd = -1
            os.close(fd)
        elif fd >= 0 and fd == self.stderr_fd:
            self.stderr_fd = -1
            os.close(fd)


def _pipe() -> tuple[int, int]:
    """An output pipe whose read end never blocks (the supervisor reads only what is there)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    return read_fd, write_fd


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT (the stop button) for the duration of the block, then deliver it as usual.

    Blocking the signal with a mask would not do: in a kernel other threads receive it. Only the main
    thread can change the handler; elsewhere the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append((signum, frame))

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending:
            if callable(previous):
                previous(*pending[0])
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt


def start_workers(
    envs: Sequence[LaunchEnvironment], threads: int, function: Callable[..., Any], args: tuple[Any, ...],
    inherited_fds: Sequence[int] = (), store_folder: str | None = None,
    descriptors: kernel_fds.RunDescriptors | None = None, store_secret: bytes | None = None,
    board: SystemBoard | None = None,
) -> list[WorkerHandle]:
    """Fork one worker per environment; on any error the ones already started are killed with their process
    groups, and reaped.

    Args:
        envs: one launch environment per worker.
        threads: intra-op threads per worker.
        function: the user's function; ``args`` its positional arguments.
        inherited_fds: more of the kernel's descriptors each worker must close at once (the rendezvous
            listener).
        store_folder: the run's private store folder, handed to each worker through the fork (see
            :mod:`notebook_accel.launcher.rendezvous.store`); ``None``: the workers use the kernel's TCP store.
        store_secret: the run's shared store secret (several machines; see
            :mod:`notebook_accel.launcher.rendezvous.keyed_store`), or ``None``.
        descriptors: the run's registered descriptors: the workers' pipes and pidfds are added to them, so
            that the workers of runs started later close them.
        board: the run's system board, made before the fork so that every worker shares it (``None``: none).

    Returns:
        The handles, in the order of ``envs``.
    """
    handles: list[WorkerHandle] = []
    kernel = survey_kernel()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            flush_soon(stream)
    try:
        with interrupts_held(), _FORKING:
            if descriptors is not None:
                descriptors.sources.append(lambda: [fd for h in handles for fd in h.open_fds()])
            _fork_all(envs, threads, function, args, inherited_fds, kernel, handles, store_folder, store_secret,
                      board)
    except BaseException:
        for handle in handles:  # the worker and whatever it started already (a subprocess, a loader worker)
            signal_worker(handle.pid, handle.exit_code is not None, signal.SIGKILL)
        close_handles(handles)
        end_groups([h.pid for h in handles if h.pid > 0], 0.0)
        raise
    return handles


def _fork_all(
    envs: Sequence[LaunchEnvironment], threads: int, function: Callable[..., Any], args: tuple[Any, ...],
    inherited_fds: Sequence[int], kernel: KernelState, handles: list[WorkerHandle], store_folder: str | None = None,
    store_secret: bytes | None = None, board: SystemBoard | None = None,
) -> None:
    """The loop of :func:`start_workers`: each new handle is appended as soon as its process exists."""
    for env in envs:
        events_r, events_w = _FORK.Pipe(duplex=False)
        out_r, out_w = _pipe()
        err_r, err_w = _pipe()
        held = {fd for h in handles for fd in h.open_fds() if fd >= 0}
        own = (events_r.fileno(), out_r, err_r)
        others = kernel_fds.snapshot()  # every run's descriptors and store ports, this run's included
        spec = WorkerSpec(env, threads, events_w, out_w, err_w, (*inherited_fds, *held, *own, *others.fds),
                          store_folder=store_folder, store_secret=store_secret,
                          close_ports=others.ports, board=board)
        process = _RankProcess(
            target=worker_main, args=(spec, kernel, function, args), name=f"notebook-accel-rank{env.rank}", daemon=False
        )
        handle = WorkerHandle(env.rank, process, events_r, out_r, err_r, env.device or "cpu")
        try:
            process.start()
        except BaseException:
            handle.exit_code = -1  # never started: nothing to reap
            handles.append(handle)
            raise
        finally:
            events_w.close()
            os.close(out_w)
            os.close(err_w)
        handle.pid = process.pid or 0
        handles.append(handle)
        pidfd = exit_fd(handle.pid)
        handle.sentinel = process.sentinel
        handle.exit_fd, handle.pidfd = (process.sentinel, False) if pidfd is None else (pidfd, True)


def close_handles(handles: Sequence[WorkerHandle]) -> None:
    """Reap every process (blocking: call after they were stopped) and close every read end. Idempotent."""
    for handle in handles:
        handle.reap()
        if not handle.events.closed:
            handle.events.close()
        handle.close_stream(handle.stdout_fd)
        handle.close_stream(handle.stderr_fd)
