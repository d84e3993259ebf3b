"""The kernel's watch over a remote run's workers: one thread that decides when each rank has ended, and why.

A rank ends when its result arrives from the placement (:class:`RankResults`: a Ray call's exit code or error, a Slurm
task's exit line), when its control stream closes with no result following within :data:`CLOSED_GRACE` (its process, or
the placement's daemon on its node, was killed), or when it has been silent for ``node_timeout`` seconds (its node lost,
its network cut: no result and no end of file will ever come, so a silence bound is the only bound). A death seen before
the kernel's first stop signal to that rank is the rank's own failure, with its reason, even when its peers' lost
connections reached the kernel first and the stop then signalled it; one seen after is the stop's doing. Each verdict
closes the rank's exit pipe, which wakes the supervisor as a local worker's pidfd would. The same thread keeps the
latest system sample of each rank; :class:`~.sampler.RemoteSampler` hands them to the supervisor as one sample. The
words about the placement (what may have stopped on a node, what the placement says of a dead node) are the placement's.
"""

from __future__ import annotations

import select
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable, Protocol

from notebook_accel.events import SystemSample
from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle
from notebook_accel.launcher.placement.remote.link import FrameReader

__all__ = ["RunWatch", "RankResults", "CLOSED_GRACE"]

CLOSED_GRACE = 3.0  # seconds between a control stream's end and a verdict, for the run's result to arrive first
_POLL = 0.2
_RESULT_POLL = 0.02


class RankResults(Protocol):
    """What a placement tells the watch about its ranks (a handle's ``ref`` names its result)."""

    def ready(self, refs: list[Any]) -> list[Any]:
        """The refs whose result has arrived (raises when the placement is out of reach)."""

    def result(self, ref: Any) -> int:
        """The rank's exit code (negative: the signal that ended its process); raises what says why there is none."""

    def death(self, handle: RemoteWorkerHandle, error: BaseException) -> str | None:
        """How the rank's process died, from the error :meth:`result` raised (``None``: it is not a death, the rank
        could not run)."""

    def stream_closed(self, handle: RemoteWorkerHandle) -> str:
        """Why a rank's control stream may have closed with no result: the placement's words."""

    def node_state(self, handle: RemoteWorkerHandle) -> str:
        """``"; <the placement marked the node dead>"`` when it did, else ``""``."""


class RunWatch(threading.Thread):
    """Watches the handles' control streams and results until every rank has ended (or :meth:`stop`).

    Args:
        results: the placement's answers about its ranks; ``handles``: the ranks; ``node_timeout``: the silence
            after which a rank's node counts as lost.
        relay_error: for streams that come through a relay (a Ray run's), why the relay failed, once it did.
        result_every: the least seconds between asks for results (at once after a stream closed): each ask may be a
            round trip from off the cluster.
    """

    def __init__(self, results: RankResults, handles: Sequence[RemoteWorkerHandle], node_timeout: float,
                 relay_error: Callable[[], str | None] | None = None, result_every: float = 0.0) -> None:
        super().__init__(name="notebook-accel-remote-watch", daemon=True)
        self.results = results
        self.relay_error = relay_error
        self._result_every = result_every
        self._next_results = 0.0
        self.handles = list(handles)
        self.node_timeout = node_timeout
        self.samples: dict[int, SystemSample] = {}
        self._lock = threading.Lock()
        self._halt = threading.Event()
        now = time.monotonic()
        self._seen = {h.rank: now for h in handles}
        self._closed: dict[int, float] = {}
        self._readers = {h.rank: FrameReader(h.control) for h in handles if h.control is not None}

    def stop(self) -> None:
        """End the watch (the run is over); waits for the thread."""
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5.0)

    def latest(self) -> dict[int, SystemSample]:
        """The last sample each rank sent."""
        with self._lock:
            return dict(self.samples)

    def run(self) -> None:
        """The watch's loop."""
        while not self._halt.is_set():
            live = [h for h in self.handles if not h.ended.is_set()]
            if not live:
                return
            self._read_controls(live)
            self._collect_results(live)
            self._judge_silence(live)

    def _read_controls(self, live: list[RemoteWorkerHandle]) -> None:
        """Heartbeats and samples; a closed stream starts its grace."""
        readers = {h.control: (h, self._readers[h.rank]) for h in live
                   if h.control is not None and h.rank not in self._closed}
        # a rank whose stream ended has its result on the way: look for it often (a launch ends when it arrives)
        poll = _RESULT_POLL if any(h.rank in self._closed for h in live) else _POLL
        try:
            ready, _, _ = select.select(list(readers), [], [], poll) if readers else ([], [], [])
        except (OSError, ValueError):
            ready = []
        if not readers:
            time.sleep(poll)
        now = time.monotonic()
        for sock in ready:
            handle, reader = readers[sock]
            for kind, payload in reader.read():
                self._seen[handle.rank] = now
                if kind == "sample" and isinstance(payload, SystemSample):
                    with self._lock:
                        self.samples[handle.rank] = payload
            if reader.eof:
                self._closed[handle.rank] = now

    def _collect_results(self, live: list[RemoteWorkerHandle]) -> None:
        """Ranks whose result arrived; and ranks whose stream closed with no result in time."""
        refs = {h.ref: h for h in live if h.ref is not None}
        now = time.monotonic()
        if refs and (now >= self._next_results or any(h.rank in self._closed for h in live)):
            self._next_results = now + self._result_every
            try:
                done = self.results.ready(list(refs))
            except Exception:  # noqa: BLE001 - the cluster out of reach: the relay's error or the silence decides
                done = []
            for ref in done:
                self._finish(refs[ref])
        now = time.monotonic()
        lost = self.relay_error() if self.relay_error is not None else None
        for handle in live:
            closed = self._closed.get(handle.rank)
            if closed is None or handle.ended.is_set():
                continue
            if lost is not None:  # every stream ended with the relay: nothing says the ranks died
                handle.end(-int(signal.SIGKILL), f"{lost}; the run could no longer be seen or stopped from this "
                                                 "kernel, so it was ended")
            elif now - closed >= CLOSED_GRACE:
                self._dead(handle, closed, f"its process on node {handle.node} ended without a result "
                                           f"({self.results.stream_closed(handle)})")

    def _dead(self, handle: RemoteWorkerHandle, died_at: float, how: str) -> None:
        """End a rank whose process died: the kernel's stop when the death came after its first stop signal,
        else the rank's own failure, ``how`` (the cause of its peers' lost connections, which may arrive first)."""
        if handle.stopped_by_kernel(died_at):
            handle.end(-int(handle.signalled or signal.SIGKILL))
        else:
            handle.end(-int(signal.SIGKILL), how + self._node_state(handle))

    def _finish(self, handle: RemoteWorkerHandle) -> None:
        """The rank's result has arrived: its exit code, or the error that says how it died."""
        try:
            code = int(self.results.result(handle.ref))
        except Exception as e:  # noqa: BLE001 - the placement's errors for a dead or failed rank
            died_at = self._closed.get(handle.rank, time.monotonic())  # its stream's end is the earlier sign
            how = self.results.death(handle, e)
            if how is not None:
                self._dead(handle, died_at, how)
            elif handle.stopped_by_kernel(died_at):
                handle.end(-int(handle.signalled or signal.SIGKILL))
            else:
                handle.end(70, f"could not run on node {handle.node}: {type(e).__name__}: {_last_line(e)}")
            return
        died_at = self._closed.get(handle.rank, time.monotonic())
        if code < 0 and not handle.stopped_by_kernel(died_at):  # the rank's process killed, its holder alive
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            handle.end(code, f"its process on node {handle.node} was killed by {name} before the function returned "
                             "(by another process, or that node's out-of-memory killer)")
            return
        handle.end(code)

    def _judge_silence(self, live: list[RemoteWorkerHandle]) -> None:
        """A rank silent for ``node_timeout`` (with its node's other ranks) has lost its node or its network."""
        now = time.monotonic()
        for handle in live:
            quiet = now - self._seen[handle.rank]
            if quiet >= self.node_timeout and not handle.ended.is_set() and handle.rank not in self._closed:
                ranks = [h.rank for h in self.handles if h.node == handle.node]
                handle.end(-int(signal.SIGKILL), (
                    f"node {handle.node} (ranks {ranks}) has not answered for {quiet:.0f} s (node_timeout="
                    f"{self.node_timeout:g}): its network was cut, the machine went down, or the worker froze"
                    f"{self._node_state(handle)}"))

    def _node_state(self, handle: RemoteWorkerHandle) -> str:
        """What the placement says of the rank's node when it marked it dead (else nothing)."""
        try:
            return self.results.node_state(handle)
        except Exception:  # noqa: BLE001 - the placement's view is a bonus
            return ""


def _last_line(error: BaseException) -> str:
    """The last non-empty line of a (remote) error's text: the exception itself."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__
