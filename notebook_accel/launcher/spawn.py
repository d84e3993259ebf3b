"""The kernel's side of starting workers: one event pipe and two output pipes per worker, then a fork.

Pipes are made just before each fork and the kernel closes the write ends right after it, so each pipe's
write end lives only in its worker: when the worker exits, the kernel sees end-of-file. The kernel's read
ends that a later fork inherits are closed first thing in that child (``WorkerSpec.close_fds``).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.launcher.worker import WorkerSpec, survey_kernel, worker_main

__all__ = ["WorkerHandle", "start_workers", "close_handles"]

_FORK = multiprocessing.get_context("fork")


@dataclass
class WorkerHandle:
    """The kernel's view of one started worker: its process and the read ends of its pipes."""

    rank: int
    process: BaseProcess
    events: Connection
    stdout_fd: int
    stderr_fd: int
    device: str
    exit_code: int | None = None

    def reap(self) -> int:
        """Wait for the process to end (call once it has ended or was killed) and return its exit code."""
        if self.exit_code is None:
            self.process.join()
            self.exit_code = self.process.exitcode if self.process.exitcode is not None else -1
            self.process.close()
        return self.exit_code

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


def start_workers(
    envs: Sequence[LaunchEnvironment], threads: int, function: Callable[..., Any], args: tuple[Any, ...]
) -> list[WorkerHandle]:
    """Fork one worker per environment; on any error the ones already started are killed and reaped.

    Returns:
        The handles, in the order of ``envs``.
    """
    handles: list[WorkerHandle] = []
    kernel = survey_kernel()
    try:
        for env in envs:
            events_r, events_w = _FORK.Pipe(duplex=False)
            out_r, out_w = _pipe()
            err_r, err_w = _pipe()
            held = [fd for h in handles for fd in (h.events.fileno(), h.stdout_fd, h.stderr_fd)]
            spec = WorkerSpec(env, threads, events_w, out_w, err_w, (*held, events_r.fileno(), out_r, err_r))
            process = _FORK.Process(
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
            handles.append(handle)
    except BaseException:
        for handle in handles:
            if handle.exit_code is None:
                handle.process.kill()
        close_handles(handles)
        raise
    return handles


def close_handles(handles: Sequence[WorkerHandle]) -> None:
    """Reap every process (blocking: call after they were stopped) and close every read end. Idempotent."""
    for handle in handles:
        handle.reap()
        if not handle.events.closed:
            handle.events.close()
        handle.close_stream(handle.stdout_fd)
        handle.close_stream(handle.stderr_fd)
