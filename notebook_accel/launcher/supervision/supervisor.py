"""Watching the workers: one loop over their event pipes, output pipes and exit descriptors (pidfds).

``multiprocessing.connection.wait`` wakes the loop for whichever comes first: an event, output bytes, or a
worker's death (its pidfd: a child the worker left behind cannot hide it, see
:mod:`notebook_accel.launcher.placement.processes`), so a crash is noticed at once, a large return value is read while
it is being written (no deadlock), and nothing sleeps on the success path. The first failure (a ``Failed`` event, or a
worker ending badly) starts the stop: a short settle (``SETTLE_SECONDS``) so that ranks failing at the same moment still
report their own exception rather than being killed mid-report, then SIGTERM to the others, a grace
(``GRACE_SECONDS``) in which their events are still collected, then SIGKILL, and every worker is reaped (the
timing: :class:`~.stopping.StopSchedule`). A worker that died before the stop's first signal is a failure of its
own (the cause, even when its peers' lost connections were reported first), never one we stopped. A timeout stops
the run the same way, without the settle; an interrupt (the notebook's stop button) or an error in the launcher itself
sends SIGTERM at once, SIGKILL after the grace, reaps, and re-raises. Workers are reached only through their handles
and placement (:mod:`notebook_accel.launcher.placement.protocol`): a signal goes to a worker and what it started.

Output bytes go to each rank's :class:`~notebook_accel.launcher.supervision.output.RankOutput`, which turns them into
``Log`` events as a terminal shows them and keeps them in the run's log files; the loop also wakes when an
unfinished line is due to be shown (:attr:`~notebook_accel.launcher.supervision.output.RankOutput.next_due`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal, cast

from notebook_accel.cell_names import cell_label, cell_names, short_locations, without_build_paths
from notebook_accel.channel import decode
from notebook_accel.display.base import BaseSink
from notebook_accel.events import TICK_SECONDS, Event, Exited, Failed, Finished, Saved, Stalled, Started, StepTimes
from notebook_accel.launcher.placement.local import LocalFork
from notebook_accel.launcher.placement.processes import oom_kills
from notebook_accel.launcher.placement.protocol import Placement
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.launcher.rendezvous.heartbeat import PeerWatch
from notebook_accel.launcher.supervision.failures import WorkerFailure, death_message
from notebook_accel.launcher.supervision.messages import MessageReader
from notebook_accel.launcher.supervision.outcome import (
    finish_aborted, reported_failure, run_outcome, signal_name, unloadable_message)
from notebook_accel.launcher.supervision.output import RankOutput
from notebook_accel.launcher.supervision.runlogs import rank_log
from notebook_accel.launcher.supervision.stopping import StopSchedule, sigint_ignored, stopped_by_us
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.monitor.board import SystemBoard
from notebook_accel.monitor.sampler import memory_death_note
from notebook_accel.monitor.stalls import Stalls

__all__ = ["supervise", "signal_name", "GRACE_SECONDS", "StopRequested"]

GRACE_SECONDS = 3.0
SETTLE_SECONDS = 0.3
_READ_SIZE = 1 << 16
_DRAIN_BYTES = 4 << 20  # read from a dead worker's output pipe: a pipe holds at most 1 MiB unless raised by root
_MAX_WAIT = 3600.0  # poll()'s millisecond timeout is a C int: one wait never asks for more than an hour


class StopRequested(KeyboardInterrupt):
    """Raised in the supervising thread when a background run's ``stop()`` was called: ends the run like the
    stop button (a ``KeyboardInterrupt``, so the same teardown runs)."""


class _Supervisor:
    """State of one supervised run (private: :func:`supervise` is the interface)."""

    def __init__(self, handles: Sequence[WorkerHandle], sink: BaseSink, grace: float, log_dir: Path | None,
                 stop_fd: int | None = None, elsewhere: tuple[int, ...] = (), watch: PeerWatch | None = None,
                 placement: Placement | None = None, board: SystemBoard | None = None) -> None:
        self.handles = list(handles)
        self.placement: Placement = LocalFork() if placement is None else placement
        self.watch = watch
        self.elsewhere = elsewhere
        self.stop_fd = stop_fd
        self.sink = sink
        self.conns: dict[Connection, WorkerHandle] = {h.events: h for h in handles}
        self.readers = {h.rank: MessageReader(h.events.fileno()) for h in handles}
        self.outputs = {h.rank: RankOutput(h.rank, log_dir and rank_log(log_dir, h.rank)) for h in handles}
        self.fds: dict[int, tuple[WorkerHandle, Literal["ordered", "fd2"]]] = {}
        for h in handles:
            self.fds[h.stdout_fd] = (h, "ordered")
            self.fds[h.stderr_fd] = (h, "fd2")
        self.sentinels: dict[int, WorkerHandle] = {h.exit_fd: h for h in handles}
        self.finished: dict[int, Any] = {}
        self.failures: dict[int, WorkerFailure] = {}  # insertion order = order of detection
        self.stopped: dict[int, signal.Signals] = {}  # rank: the last stop signal we sent it
        self.stop = StopSchedule(grace)
        self.timed_out = False
        self.next_tick = 0.0
        self.saved: str | None = None  # the last checkpoint the run committed (a restart resumes from it)
        self.sampler = self.placement.sampler(handles)
        self.board = board  # the figures the workers' trackers may read (monitor.board)
        self.oom_kills = oom_kills()  # the system's count at the start: a SIGKILL blames the OOM killer on evidence
        self.stalls = Stalls()  # where each rank reported it waits: a timeout's error names it

    # -- reading ------------------------------------------------------------------------------------------
    def on_conn(self, conn: Connection, budget: int | None = None) -> None:
        """Read what the pipe holds and handle each complete message (a partial one waits for its rest; see
        :mod:`.messages`); end of file closes the pipe. A message the kernel cannot load (a returned object that
        needs the workers' process group) is that rank's failure, not the launcher's."""
        handle = next(h for h in self.handles if h.events is conn)
        reader = self.readers[handle.rank]
        for message in reader.read() if budget is None else reader.read(budget):
            try:
                events = decode(message)
            except Exception as e:  # noqa: BLE001 - whatever unpickling the user's objects raises
                events = [Failed(handle.rank, "ResultError", unloadable_message(handle.rank, e), "")]
            for event in events:
                if isinstance(event, MetricsBatch):  # many log calls at once: to the sink whole
                    self.sink.handle_metrics(event)
                    continue
                self.on_event(event)
                if isinstance(event, (Finished, Failed)):
                    self.conns.pop(conn, None)  # its last word: the rest (end of file) is read when it exits
        if reader.eof:
            self.conns.pop(conn, None)
            conn.close()

    def on_event(self, event: Event) -> None:
        """Record what the launcher needs, then pass the event on."""
        if isinstance(event, StepTimes) and self.board is not None:
            self.board.write(event)
        if isinstance(event, Finished):
            self.finished[event.rank] = event.value
            event = Finished(event.rank, None)  # the sink needs no copy of a possibly large value
        elif isinstance(event, Saved):
            self.saved = event.path
        elif isinstance(event, Stalled):
            event = replace(event, file=cell_label(event.file))  # Cell In[6], as IPython names it
            self.stalls.add(event)
        elif isinstance(event, Failed) and event.rank not in self.failures:
            # Cell In[6], as IPython names it; torch's build-machine paths left out of the message
            event = replace(event, message=without_build_paths(event.message), call=short_locations(event.call),
                            traceback=cell_names(without_build_paths(event.traceback)))
            node = next((h.node for h in self.handles if h.rank == event.rank), "")
            self.failures[event.rank] = reported_failure(event, self.sampler.last if self.sampler else None, node)
            self.begin_stop()
        self.sink.handle(event)

    def on_fd(self, fd: int) -> None:
        """Read what is there and pass it on as output; end of file flushes and closes."""
        handle, kind = self.fds[fd]
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.on_fd_eof(fd)
            return
        output = self.outputs[handle.rank]
        now = time.monotonic()
        self.emit(output.ordered(data, now) if kind == "ordered" else output.stderr(data, now))

    def emit(self, events: Sequence[Event]) -> None:
        """Pass events to the sink, in order."""
        for event in events:
            self.sink.handle(event)

    def flush_output(self) -> None:
        """Show the unfinished lines that have waited long enough."""
        now = time.monotonic()
        for output in self.outputs.values():
            due = output.next_due
            if due is not None and now >= due:
                self.emit(output.due(now))

    def next_output_due(self) -> float | None:
        """When an unfinished line is next due to be shown."""
        times = [t for t in (o.next_due for o in self.outputs.values()) if t is not None]
        return min(times) if times else None

    def drain(self, handle: WorkerHandle) -> None:
        """What a dead worker left in its pipes, then close them. A grandchild holding them open cannot stall
        us: at most ``_DRAIN_BYTES`` are read per pipe (more than a pipe holds), however fast it keeps writing,
        and a message it never completes is dropped."""
        conn = handle.events
        until = time.monotonic() + handle.drain_seconds  # a socket's last bytes may still be on the way
        reader = self.readers[handle.rank]
        while not conn.closed and not reader.eof and time.monotonic() < until \
                and wait([conn], until - time.monotonic()):
            self.on_conn(conn)
        if not conn.closed:
            self.on_conn(conn, _DRAIN_BYTES)  # a partial message left by a killed worker is dropped
        self.conns.pop(conn, None)
        if not conn.closed:
            conn.close()
        for fd in (handle.stdout_fd, handle.stderr_fd):
            while fd in self.fds and time.monotonic() < until and wait([fd], until - time.monotonic()):
                self.on_fd(fd)  # to its end of file (which removes it), or until the bound
            for _ in range(_DRAIN_BYTES // _READ_SIZE):
                if fd not in self.fds or not _readable(fd):
                    break
                self.on_fd(fd)
            if fd in self.fds:
                self.on_fd_eof(fd)

    def on_fd_eof(self, fd: int) -> None:
        """``fd`` is finished (end of file, or a dead worker's pipe a grandchild holds open); after the rank's
        last pipe, its output is flushed and its log file closed."""
        handle, _ = self.fds.pop(fd)
        handle.close_stream(fd)
        if not any(h is handle for h, _ in self.fds.values()):
            self.emit(self.outputs[handle.rank].close())

    def on_exit(self, sentinel: int) -> None:
        """A worker ended: read what it left, reap it, report it, and decide whether that is a failure."""
        handle = self.sentinels.pop(sentinel)
        self.drain(handle)
        code = handle.reap()
        name = signal_name(code)
        failure, own = self.failures.get(handle.rank), ""
        if failure is not None:
            self.failures[handle.rank] = replace(failure, exit_code=code, signal_name=name)
        elif not (code == 0 and handle.rank in self.finished) and not stopped_by_us(
                self.stopped.get(handle.rank), name, handle.death_reason is not None):  # else: stopped by us
            note = memory_death_note(self.sampler.before_death(handle.rank) if self.sampler else None, handle.rank)
            own = handle.death_reason or death_message(code, name, self.oom_kills, oom_kills(), note)
            self.failures[handle.rank] = WorkerFailure(handle.rank, code, name, "", own, "")
        self.sink.handle(Exited(handle.rank, code, name, own))  # the dashboard shows a death of its own as failed
        if own:
            self.begin_stop()

    def on_lost_node(self, watch: PeerWatch) -> None:
        """The heartbeat lost a node: that is the run's failure; stop every local worker now."""
        self.watch = None  # reported once
        if watch.lost is not None and watch.lost.rank not in self.failures:
            self.failures[watch.lost.rank] = watch.lost
        self.begin_stop(settle=0.0)

    # -- stopping -----------------------------------------------------------------------------------------
    def begin_stop(self, settle: float = SETTLE_SECONDS) -> None:
        """Schedule the stop (once): SIGTERM after ``settle`` seconds, in which near-simultaneous failures of
        other ranks still arrive whole, then SIGKILL after the grace."""
        self.stop.begin(time.monotonic(), settle)

    def advance_stop(self) -> None:
        """Take the next step of the stop: SIGTERM everyone left, or (grace over) SIGKILL them."""
        sig = self.stop.signal()
        for sentinel in wait(list(self.sentinels), 0):  # deaths already there are causes, not our stop's doing
            self.on_exit(cast(int, sentinel))
        for handle in list(self.sentinels.values()):  # the workers not reaped yet
            self.placement.signal(handle, sig)
            self.stopped[handle.rank] = sig
        self.stop.sent(time.monotonic())

    def loop(self, timeout: float | None) -> None:
        """Run until every worker is reaped (a reaped worker's pipes are drained and closed with it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.sentinels:
            now = time.monotonic()
            if not self.stop.begun and deadline is not None and now >= deadline:
                self.timed_out = True
                self.begin_stop(settle=0.0)
            if self.stop.due(now):
                self.advance_stop()
                continue
            target = self.stop.next_at if self.stop.begun else deadline
            due = self.next_output_due()
            if self.sampler is not None:
                due = self.sampler.next_due if due is None else min(due, self.sampler.next_due)
            if due is not None:
                target = due if target is None else min(target, due)
            limit = _MAX_WAIT if target is None else min(_MAX_WAIT, max(0.0, target - now))
            tick = self.sink.needs_tick  # a sink with a clock: wake at least every TICK_SECONDS to move it
            if tick:
                limit = TICK_SECONDS if limit is None else min(limit, TICK_SECONDS)
            watched: list[Any] = [*self.conns, *self.fds, *self.sentinels]
            extra = [fd for fd in (self.stop_fd, None if self.watch is None else self.watch.fd) if fd is not None and fd >= 0]
            ready = wait([*watched, *extra], limit)
            if self.stop_fd is not None and self.stop_fd in ready:
                raise StopRequested("the run was stopped (stop())")
            if self.watch is not None and self.watch.fd in ready:
                self.on_lost_node(self.watch)
            for obj in ready:
                if isinstance(obj, Connection):
                    if obj in self.conns:
                        self.on_conn(obj)
                elif obj in self.fds:
                    self.on_fd(obj)
            for obj in ready:
                if not isinstance(obj, Connection) and obj in self.sentinels:
                    self.on_exit(obj)
            self.flush_output()
            self.sample_system()
            if tick and time.monotonic() >= self.next_tick:
                self.next_tick = time.monotonic() + TICK_SECONDS
                self.sink.tick(self.next_tick - TICK_SECONDS)

    def sample_system(self) -> None:
        """Hand the sink a system sample when one is due (a sampling error ends sampling, never the run)."""
        if self.sampler is None or not self.sampler.due(time.monotonic()) or not self.sentinels:
            return
        try:
            sample = self.sampler.sample()
        except Exception:  # noqa: BLE001 - psutil/NVML trouble must not cost the run
            self.close_sampler()
            return
        if self.board is not None:
            self.board.write(sample)
        self.sink.handle(sample)

    def close_sampler(self) -> None:
        """Stop sampling (keeps the last sample for :func:`memory_death_note`)."""
        if self.sampler is not None:
            self.sampler.close()
            self.sampler.next_due = float("inf")

    def stop_now(self) -> None:
        """Interrupt or internal error: TERM, grace on the sentinels only, KILL, reap. Ignores further SIGINTs."""
        with sigint_ignored():
            for handle in self.handles:  # the reaped ones too: what they started may still run
                self.placement.signal(handle, signal.SIGTERM)
            deadline = time.monotonic() + self.stop.grace
            while self.sentinels and time.monotonic() < deadline:
                for sentinel in wait(list(self.sentinels), deadline - time.monotonic()):
                    self.sentinels.pop(cast(int, sentinel)).reap()  # wait() gives back what it was given
            for handle in self.handles:
                self.placement.signal(handle, signal.SIGKILL)
            for handle in self.handles:
                handle.reap()
            self.placement.end_leftovers(self.handles)
            for fd in list(self.fds):  # what the workers wrote last, read once (a grandchild may keep writing)
                if fd in self.fds and _readable(fd):
                    self.on_fd(fd)
            self.placement.release(self.handles)
            for output in self.outputs.values():
                self.emit(output.close())


def _readable(fd: int) -> bool:
    """Whether ``fd`` has data (or end of file) right now."""
    return bool(wait([fd], 0))


def supervise(
    handles: Sequence[WorkerHandle], sink: BaseSink, timeout: float | None, start_time: float,
    grace: float | None = None, log_dir: Path | None = None, before: Callable[[], None] | None = None,
    stop_fd: int | None = None, elsewhere: tuple[int, ...] = (), watch: PeerWatch | None = None,
    board: SystemBoard | None = None, placement: Placement | None = None,
) -> Any:
    """Watch the started workers until all are reaped; call ``sink.finish``; return rank 0's value or raise.

    Args:
        handles: the started workers (:meth:`~notebook_accel.launcher.placement.protocol.Placement.start`).
        sink: receives every event, then the outcome.
        timeout: seconds before the run is stopped, ``None`` for no limit.
        start_time: ``time.monotonic()`` at the start of the launch, for the elapsed time.
        grace: seconds between SIGTERM and SIGKILL when stopping (default ``GRACE_SECONDS``).
        log_dir: the run folder receiving each rank's output as ``rank<N>.log`` (``None``: no files).
        before: called first, under the same protection as the run (if it raises, the workers are stopped);
            the launcher starts the rendezvous store with it.
        stop_fd: a descriptor that becomes readable when the run must stop (a background run's ``stop()``);
            the run then ends as with the stop button and :class:`StopRequested` is raised.
        elsewhere: the ranks on other machines (several nodes): a failure that is only lost connections is
            reported as the loss of another node.
        watch: the node's heartbeat (several nodes): a node it loses fails the run at once.
        board: the run's :class:`~notebook_accel.monitor.board.SystemBoard` (made before the workers started),
            which receives the samples and step reports for the workers' trackers; its owner closes it.
        placement: what started the workers, which signals, cleans up after and releases them (default: local).

    Returns:
        Rank 0's return value (``None`` when rank 0 is on another node).

    Raises:
        WorkerError: a worker raised or died; every failing rank is listed.
        LaunchTimeoutError: the run exceeded ``timeout``.
        KeyboardInterrupt: the run was interrupted; every worker was stopped first.
    """
    state = _Supervisor(handles, sink, GRACE_SECONDS if grace is None else grace, log_dir, stop_fd, elsewhere, watch,
                        placement, board)
    for handle in handles:  # the launcher knows these at the fork: no message from the worker needed
        sink.handle(Started(handle.rank, handle.pid, handle.device, node=handle.node))
    # The first tick one period after the launch began, not at once: the sink showed the run a moment ago, and a
    # display update now (with its flush of the kernel's streams) would cost a short launch its time for nothing.
    state.next_tick = start_time + TICK_SECONDS
    try:
        if before is not None:
            before()
        state.loop(timeout)
    except BaseException as e:
        state.close_sampler()
        state.stop_now()
        finish_aborted(sink, e, time.monotonic() - start_time, "launcher error")
        raise
    state.close_sampler()
    state.placement.release(handles)
    state.placement.end_leftovers(handles)
    outcome, error = run_outcome(ranks=[h.rank for h in handles], finished=state.finished, failures=state.failures,
                                 timed_out=state.timed_out, saved=state.saved, elsewhere=elsewhere,
                                 elapsed=time.monotonic() - start_time, timeout=timeout,
                                 waits=state.stalls.text(past=True))
    sink.finish(outcome)
    if error is not None:
        raise error
    return state.finished.get(0)
