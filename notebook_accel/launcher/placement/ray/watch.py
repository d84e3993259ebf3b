"""The kernel's watch over a Ray run's workers: one thread that decides when each rank has ended, and why.

A rank ends when its ``run`` call's result arrives (its exit code; an error: its process died or could not start),
when its control stream closes with no result following within :data:`CLOSED_GRACE` (its process, or its node's Ray,
was killed), or when it has been silent for ``node_timeout`` seconds (its node lost, its network cut: no result and
no end of file will ever come, so a silence bound is the only bound). A death seen before the kernel's first stop
signal to that rank is the rank's own failure, with its reason, even when its peers' lost connections reached the
kernel first and the stop then signalled it; one seen after is the stop's doing. Each verdict closes the rank's exit
pipe, which wakes the supervisor as a local worker's pidfd would. The same thread keeps the latest system sample of
each rank; :class:`RemoteSampler` hands them to the supervisor as one sample.
"""

from __future__ import annotations

import select
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any, Callable

from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.launcher.placement.ray.handles import RayWorkerHandle
from notebook_accel.launcher.placement.ray.link import FrameReader
from notebook_accel.monitor.sampler import MemoryPeaks

__all__ = ["RunWatch", "RemoteSampler", "CLOSED_GRACE"]

CLOSED_GRACE = 3.0  # seconds between a control stream's end and a verdict, for the run's result to arrive first
_POLL = 0.2
_RESULT_POLL = 0.02
_RELAYED_RESULT_EVERY = 1.0


class RunWatch(threading.Thread):
    """Watches the handles' control streams and results until every rank has ended (or :meth:`stop`)."""

    def __init__(self, ray: Any, handles: Sequence[RayWorkerHandle], node_timeout: float,
                 relay_error: Callable[[], str | None] | None = None) -> None:
        super().__init__(name="notebook-accel-ray-watch", daemon=True)
        self.ray = ray
        self.relay_error = relay_error  # a relayed run (:mod:`.relayed`): why its relay failed, once it did
        # through a relay each Ray call is a round trip from off the cluster: results are asked for once a second
        # (at once after a stream closed), not every poll
        self._result_every = _RELAYED_RESULT_EVERY if relay_error is not None else 0.0
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

    def _read_controls(self, live: list[RayWorkerHandle]) -> None:
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

    def _collect_results(self, live: list[RayWorkerHandle]) -> None:
        """Ranks whose ``run`` returned or raised; and ranks whose stream closed with no result in time."""
        refs = {h.ref: h for h in live if h.ref is not None}
        now = time.monotonic()
        if refs and (now >= self._next_results or any(h.rank in self._closed for h in live)):
            self._next_results = now + self._result_every
            try:
                done, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
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
                self._dead(handle, closed, f"its process on node {handle.node} ended without a result (it was "
                                           "killed, or Ray on that node stopped)")

    def _dead(self, handle: RayWorkerHandle, died_at: float, how: str) -> None:
        """End a rank whose process died: the kernel's stop when the death came after its first stop signal,
        else the rank's own failure, ``how`` (the cause of its peers' lost connections, which may arrive first)."""
        if handle.stopped_by_kernel(died_at):
            handle.end(-int(handle.signalled or signal.SIGKILL))
        else:
            handle.end(-int(signal.SIGKILL), how + self._node_state(handle))

    def _finish(self, handle: RayWorkerHandle) -> None:
        """The rank's ``run`` has a result: its exit code, or the error that says how it died."""
        try:
            code = int(self.ray.get(handle.ref, timeout=5.0))
        except Exception as e:  # noqa: BLE001 - Ray's errors for a dead actor or a failed call
            died_at = self._closed.get(handle.rank, time.monotonic())  # its stream's end is the earlier sign
            if type(e).__name__ == "ActorUnavailableError":  # Ray's text: an RPC error and "may or may not"
                self._dead(handle, died_at, f"its worker process on node {handle.node} became unreachable (Ray on "
                                            "that node stopped, or the process died)")
            elif type(e).__name__ in ("ActorDiedError", "RayActorError"):
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                self._dead(handle, died_at, f"its worker process on node {handle.node} died ({first})")
            elif handle.stopped_by_kernel(died_at):
                handle.end(-int(handle.signalled or signal.SIGKILL))
            else:
                handle.end(70, f"could not run on node {handle.node}: {type(e).__name__}: {_last_line(e)}")
            return
        died_at = self._closed.get(handle.rank, time.monotonic())
        if code < 0 and not handle.stopped_by_kernel(died_at):  # the rank's process killed, its actor alive
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            handle.end(code, f"its process on node {handle.node} was killed by {name} before the function returned "
                             "(by another process, or that node's out-of-memory killer)")
            return
        handle.end(code)

    def _judge_silence(self, live: list[RayWorkerHandle]) -> None:
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

    def _node_state(self, handle: RayWorkerHandle) -> str:
        """``"; Ray marked the node dead"`` when the cluster says so (else nothing)."""
        try:
            for node in self.ray.nodes():
                if node.get("NodeID") == handle.node_id and not node.get("Alive", True):
                    return "; Ray marked the node dead"
        except Exception:  # noqa: BLE001 - the cluster's view is a bonus
            return ""
        return ""


def _last_line(error: BaseException) -> str:
    """The last non-empty line of a (remote) error's text: the exception itself."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__


class RemoteSampler:
    """The supervisor's sampler for a Ray run: every rank's latest figures from its own node, as one sample.

    Memory of the machine is the tightest node's (the least available), the figure that warns first.
    """

    def __init__(self, watch: RunWatch, interval: float = 1.0) -> None:
        self.watch = watch
        self.interval = interval
        self.last: SystemSample | None = None
        self.peaks = MemoryPeaks()
        self.next_due = time.monotonic() + interval

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now`` (never before a rank sent one: an empty sample would read as a machine
        of 0 bytes)."""
        return now >= self.next_due and bool(self.watch.latest())

    def sample(self) -> SystemSample:
        """The ranks' latest figures together (a rank that sent none yet is left out)."""
        self.next_due = time.monotonic() + self.interval
        latest = self.watch.latest()
        ranks: list[RankSystem] = [r for s in latest.values() for r in s.ranks]
        tightest = min(latest.values(), key=lambda s: s.host_available, default=None)
        self.last = SystemSample(time.time(), tuple(sorted(ranks, key=lambda r: r.rank)),
                                 tightest.host_available if tightest else 0, tightest.host_total if tightest else 0)
        self.peaks.add(self.last)
        return self.last

    def before_death(self, rank: int) -> SystemSample | None:
        """The recent sample that showed ``rank``'s memory nearest to running out."""
        return self.peaks.get(rank)

    def close(self) -> None:
        """Nothing to close (the watch owns the streams)."""
        self.next_due = float("inf")
