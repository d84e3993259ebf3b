"""The worker's side of a launch: what a forked child does from its first instruction to ``os._exit``.

Order matters. The child first forgets what it inherited from the kernel (the kernel's event channel, an
initialised torch.distributed group, ipykernel's streams, signal handlers and IPython shell:
:mod:`.detach`), then points fd 1 and 2 at its own pipes (so C-level output is captured too) with
``sys.stderr`` writing frames into the stdout pipe (so the order of stdout and stderr is kept:
:mod:`.streams`), sets its rank environment and thread count, installs its event writer (and the dashboard callback of
any ``transformers.Trainer``: :mod:`notebook_accel.integrations`), runs the user's
function, reports the result or the failure, and leaves with ``os._exit`` so none of the kernel's atexit
handlers or finalizers run in a child.
"""

from __future__ import annotations

import ctypes
import io
import logging
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, NoReturn

from notebook_accel import channel, environment
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.events import Failed, Finished
from notebook_accel.integrations import add_trainer_callback
from notebook_accel.launcher.child import mp_child
from notebook_accel.launcher.child.detach import detach_from_kernel
from notebook_accel.launcher.child.stall_watch import StallWatch
from notebook_accel.launcher.child.streams import FramedWriter
from notebook_accel.launcher.child.user_frames import library_call, user_traceback
from notebook_accel.launcher.kernel.fds import Inherited, close_inherited
from notebook_accel.launcher.rendezvous.store import use_keyed_store, use_private_store
from notebook_accel.monitor import steps
from notebook_accel.monitor.board import SystemBoard, use_in_worker

__all__ = ["WorkerSpec", "KernelState", "survey_kernel", "worker_main", "redirect_output", "run_and_report",
           "become_worker", "flush_c_stdio"]

_PR_SET_PDEATHSIG = 1
_ORPHANED = 75  # EX_TEMPFAIL: the kernel died before this worker was set up
# Process-group objects inherited from the kernel: kept alive (never destroyed) because their destructors
# would join threads that do not exist in a forked child. os._exit ends the child without running them.
_INHERITED: list[Any] = []


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs besides the function: who it is and the ends of its pipes.

    Attributes:
        env: the worker's launch environment (rank, world size, rendezvous, device, precision).
        threads: intra-op threads for torch (cores / local workers).
        events: write end of the event pipe.
        stdout_fd: write end of the ordered pipe, duplicated onto fd 1; ``sys.stderr`` writes frames into it.
        stderr_fd: write end of the fd-2 pipe (C-level stderr only).
        close_fds: the launcher's descriptors inherited by the fork (this run's and every other run's of the
            kernel), closed at once in the child.
        store_folder: the run's private store folder (see :mod:`notebook_accel.launcher.rendezvous.store`; passed in
        memory, never in the
            environment or ``argv``), or ``None``: the kernel's TCP store.
        store_secret: the run's shared store secret (several machines), or ``None``: keys and values in clear.
        close_ports: the ports of the kernel's rendezvous stores: inherited sockets on them are closed too.
        board: the run's system board (made in the kernel before the fork, so this worker shares its memory), read by
            the main process's trackers (``log_system_metrics``); ``None``: no figures.
    """

    env: LaunchEnvironment
    threads: int
    events: Connection
    stdout_fd: int
    stderr_fd: int
    close_fds: tuple[int, ...]
    store_folder: str | None = None
    store_secret: bytes | None = None
    close_ports: frozenset[int] = frozenset()
    board: SystemBoard | None = None


def _libc_function(name: str) -> Callable[..., int] | None:
    """A libc function, looked up once in the kernel (not in every child); ``None`` where there is none."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_function("prctl")
_FFLUSH = _libc_function("fflush")  # os._exit skips C stdio buffers: printf output of extensions would be lost


def _own_process_group() -> None:
    """Lead a new session and process group, so the launcher can end everything this worker starts at once
    (``killpg``) and a terminal's Ctrl-C reaches only the launcher, which stops the workers itself."""
    try:
        os.setsid()
    except OSError:  # already a group leader (cannot happen after a fork, but never fatal)
        pass


def _die_with_parent(kernel_pid: int) -> None:
    """Ask Linux to SIGKILL this worker if the kernel dies, so no orphan outlives a crashed kernel.

    A kernel that died between the fork and this call would go unnoticed by the request, so the parent is
    checked after it: a worker whose kernel is already gone leaves at once.
    """
    if _PRCTL is not None:  # elsewhere the launcher's teardown still reaps every worker
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != kernel_pid:
        os._exit(_ORPHANED)


def become_worker(parent_pid: int) -> None:
    """In a process just forked to be a worker (from the kernel, or from a warm Ray actor): the signals a worker
    has, its own process group (the stop reaches it and what it starts), and death with its parent."""
    _reset_signals()
    _own_process_group()
    _die_with_parent(parent_pid)


def flush_c_stdio() -> None:
    """Flush C stdio buffers (``printf`` of extensions), which ``os._exit`` would drop."""
    if _FFLUSH is not None:
        _FFLUSH(None)


def _reset_signals() -> None:
    """SIGINT is the kernel's to handle (it stops us); SIGTERM must kill at once, whatever the kernel set.
    A fork from the launcher's background thread inherits its mask (SIGINT blocked there): unblock it, so
    what the worker starts sees the usual mask."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@dataclass(frozen=True)
class KernelState:
    """What the kernel holds that a child must let go of, surveyed once in the kernel before the forks.

    Looking in the kernel, not in each child, keeps the children from touching (and so copying) the pages
    of every logger and of torch.distributed's tables.

    Attributes:
        pid: the kernel's pid (a worker whose parent is no longer this process leaves at once).
        process_group: torch.distributed is initialised in the kernel.
        stream_handlers: logging handlers writing to the kernel's ``sys.stdout`` (1) or ``sys.stderr`` (2).
    """

    pid: int
    process_group: bool
    stream_handlers: tuple[tuple[logging.StreamHandler[Any], int], ...]


def survey_kernel() -> KernelState:
    """Build the :class:`KernelState` of this process (cheap: no I/O)."""
    dist = sys.modules.get("torch.distributed")
    group = bool(dist is not None and dist.is_available() and dist.is_initialized())
    streams = {id(sys.stdout): 1, id(sys.stderr): 2}
    handlers: list[tuple[logging.StreamHandler[Any], int]] = []
    for handler in _live_handlers():
        fd = streams.get(id(getattr(handler, "stream", None)))
        if fd is not None and isinstance(handler, logging.StreamHandler):
            handlers.append((handler, fd))
    return KernelState(os.getpid(), group, tuple(handlers))


def _live_handlers() -> list[logging.Handler]:
    """Every logging handler of this process: from logging's own list of live handlers (a few dozen, where a kernel
    with torch has hundreds of loggers, each a page to touch after the previous fork write-protected them), else by
    walking the loggers. A handler no logger holds is moved too, which changes nothing."""
    refs = getattr(logging, "_handlerList", None)
    if isinstance(refs, list):
        return [h for h in (ref() for ref in list(refs)) if isinstance(h, logging.Handler)]
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return [h for logger in loggers for h in getattr(logger, "handlers", ())]


def _forget_process_group() -> None:
    """Drop a torch.distributed group inherited from the kernel so the user's function can make its own."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    world = c10d._world
    _INHERITED.append((world.default_pg, dict(world.pg_map), dict(world.pg_names)))
    c10d._update_default_pg(None)
    for table in (world.pg_map, world.pg_names, world.pg_group_ranks, world.pg_backend_config):
        table.clear()
    world.pg_to_tag.clear()
    world.tags_to_pg.clear()
    world.pg_coalesce_state.clear()
    c10d._unregister_all_process_groups()
    world.group_count = 0


def redirect_output(stdout_fd: int, stderr_fd: int, kernel: KernelState) -> None:
    """In a worker: point fd 1/2 at the launcher's pipes (or sockets) and rebuild ``sys.stdout``/``sys.stderr`` on
    them, line-buffered.

    ``sys.stderr`` writes frames into the ordered pipe through a private duplicate of it (see
    :mod:`.streams`), so stdout and stderr arrive in the order written; its ``fileno()`` is still 2.
    Logging handlers made in the kernel still hold the kernel's stream objects (ipykernel's, which would
    ship text around the capture); they are moved to the new streams.
    """
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    ordered = os.dup(stdout_fd)  # not inherited by the worker's own subprocesses
    os.close(stdout_fd)
    os.close(stderr_fd)
    sys.stdout = sys.__stdout__ = open(  # type: ignore[misc]
        1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(  # type: ignore[misc]
        io.BufferedWriter(FramedWriter(ordered)), encoding="utf-8", errors="backslashreplace", line_buffering=True)
    for handler, fd in kernel.stream_handlers:
        handler.setStream(sys.stdout if fd == 1 else sys.stderr)


def _set_threads(threads: int) -> None:
    """Share the cores between the local workers, unless the user chose OMP_NUM_THREADS themselves."""
    if environment.get(environment.OMP_NUM_THREADS):
        return
    environment.set_var(environment.OMP_NUM_THREADS, str(threads))
    torch = sys.modules.get("torch")
    if torch is not None:  # importing torch here would cost every launch a second; the env var covers it
        torch.set_num_threads(threads)


def _failed(rank: int, exc: BaseException) -> Failed:
    """The :class:`Failed` event for ``exc``: the user's frames only, and the library call they were in."""
    return Failed(rank, type(exc).__name__, str(exc), user_traceback(exc), library_call(exc.__traceback__))


def wait_for_background_save(reason: str) -> None:
    """Wait for the checkpoint a background ``save_state`` is still writing (raising its failure), so a run never
    ends with a checkpoint half written; free when no background save was ever made (the module is not loaded)."""
    background = sys.modules.get("notebook_accel.checkpointing.background")
    if background is not None:
        try:
            background.wait_for_checkpoint(reason)
        finally:
            background.release_buffers()


def run_and_report(writer: channel.EventWriter, rank: int, function: Callable[..., Any], args: tuple[Any, ...],
                   before_report: Callable[[], object] | None = None) -> int:
    """Run ``function(*args)`` and report its end to the kernel through ``writer`` (``Finished`` with rank 0's value,
    or ``Failed`` with the user's frames); returns the exit code (0, or 1 after a failure). Every placement's worker
    ends with this. Meanwhile a :class:`~.stall_watch.StallWatch` reports where the function waits when it hangs; it
    is stopped and joined before the result is reported. ``before_report`` runs after the function's end and
    before the report (a forked worker writes its multiprocessing queues there: after the report the launcher
    may stop it)."""
    watch = StallWatch(rank, writer.send, lambda: writer.drained).start()
    try:
        try:
            value = function(*args)
            wait_for_background_save("the training function returned")
        finally:
            watch.stop()
    except BaseException as e:  # noqa: BLE001 - every failure is reported to the kernel
        if not (isinstance(e, SystemExit) and e.code in (None, 0)):  # sys.exit(0) is a normal end
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the report even if the launcher stops us now
            if before_report is not None:
                before_report()
            writer.send(_failed(rank, e))
            return 1
        value = None
    if before_report is not None:
        before_report()
    steps.flush()  # the last second of step times, before the last word
    try:
        writer.send(Finished(rank, value if rank == 0 else None))
    except Exception as e:  # noqa: BLE001 - pickling can fail in many ways
        writer.send(
            Failed(
                rank,
                "PicklingError",
                f"the function returned a {type(value).__name__} that cannot be sent back to the kernel "
                f"({type(e).__name__}: {e}); return plain data (numbers, strings, dicts, lists, CPU tensors, "
                "a model's state_dict()) or save the object to a file and return its path",
                "",
            )
        )
        return 1
    return 0


def worker_main(
    spec: WorkerSpec, kernel: KernelState, function: Callable[..., Any], args: tuple[Any, ...]
) -> NoReturn:
    """Body of a forked worker; never returns (ends with ``os._exit``).

    Args:
        spec: the worker's identity and pipe ends.
        kernel: what the kernel held at the fork (:func:`survey_kernel`).
        function: the user's function, inherited through the fork (lambdas and notebook functions work).
        args: its positional arguments.
    """
    code = 70  # EX_SOFTWARE: the launcher's own set-up failed
    ours: tuple[Any, ...] = (sys.stderr,)  # before the redirect: the kernel's streams, whose buffered text is the kernel's to send
    try:
        channel.uninstall()
        become_worker(kernel.pid)
        close_inherited(Inherited(frozenset(spec.close_fds), spec.close_ports),
                        keep=(spec.events.fileno(), spec.stdout_fd, spec.stderr_fd))
        if kernel.process_group:
            _forget_process_group()
        detach_from_kernel()
        mp_child.begin()  # the kernel's multiprocessing queues and locks work here as in a multiprocessing child
        redirect_output(spec.stdout_fd, spec.stderr_fd, kernel)
        ours = (sys.stdout, sys.stderr)
        spec.env.apply()
        environment.apply_import_effects()  # what the kernel's warm-up imports set, kept out of the kernel
        use_in_worker(spec.board)
        if spec.store_folder is not None:
            use_private_store(spec.store_folder)
        elif spec.store_secret is not None:
            use_keyed_store(spec.store_secret)
        _set_threads(spec.threads)
        writer = channel.EventWriter(spec.events)
        channel.install(writer)
        add_trainer_callback(in_worker=True)  # a transformers Trainer made in the function reports to the dashboard
        code = run_and_report(writer, spec.env.rank, function, args, before_report=mp_child.end)
        channel.uninstall()
        writer.close()
    except BaseException:  # noqa: BLE001 - set-up failed or the kernel went away: say why on stderr, then exit
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        for stream in ours:  # a set-up failure's traceback (on stderr) is flushed, never the kernel's stdout
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        flush_c_stdio()
        os._exit(code)
