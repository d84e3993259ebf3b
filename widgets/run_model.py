"""The run model behind the dashboard: pure Python, fed by events, testable without widgets.

:class:`RunState` turns the stream of :mod:`notebook_accel.events` into what the dashboard shows: the run's
status and elapsed time, each rank's status, the main loop's progress with rate and ETA, the metric series
(downsampled, see :class:`~notebook_accel.widgets.series.Series`) and their latest values, a bounded log
buffer, and the first failure. Every update is O(1) so the launcher's loop is never slowed down.
"""

from __future__ import annotations

import functools
import ipaddress
import signal
import socket
from dataclasses import dataclass, field
from typing import Literal

from notebook_accel.events import (EngineReady, Event, Exited, Failed, Finished, Log, Metrics, Phase, Progress, RunInfo,
                                   RunOutcome, Stalled, Started, StepTimes, SystemSample)
from notebook_accel.metrics_batch import NO_STEP, MetricsBatch
from notebook_accel.peer_loss import is_peer_loss
from notebook_accel.widgets.log_buffer import LogBuffer, LogLine
from notebook_accel.widgets.progress_model import ProgressState, RunProgress
from notebook_accel.widgets.series import Series
from notebook_accel.widgets.system_state import SystemState

__all__ = ["RankState", "ProgressState", "LogLine", "RunState", "RankStatus", "RunStatus", "ShownStatus", "group_of",
           "label_of", "is_this_machine"]

RankStatus = Literal["starting", "running", "finished", "failed", "stopped", "not started"]
RunStatus = Literal["starting", "running", "finished", "failed", "timeout", "interrupted"]
# what the dashboard says: one vocabulary with the ranks and BackgroundRun.status ("stopped", not "interrupted"),
# and "finishing" while every worker has ended but the launcher has not closed the run yet
ShownStatus = Literal["starting", "running", "finishing", "finished", "failed", "timeout", "stopped"]
_ENDED = ("finished", "failed", "stopped", "not started")
_STOP_SIGNALS = {signal.SIGTERM.name, signal.SIGKILL.name, signal.SIGINT.name}
MAX_SERIES = 48  # metrics drawn (so at most this many panels and curves); later names are in the table only
MAX_TABLE = 200  # metrics in the table of latest values; later names are only counted
_MAX_COUNTED = 100_000  # distinct names beyond the table remembered for counting (beyond: "at least")


def group_of(name: str) -> str:
    """The panel a metric is drawn in: the quantity, i.e. the part after the last ``/``.

    ``"train/loss"`` and ``"eval/loss"`` share the ``"loss"`` panel (so the two curves can be compared);
    ``"lr"`` has a panel of its own. A rank suffix (``"loss (rank 1)"``) stays in the same panel.
    """
    return name.partition(" (rank ")[0].rpartition("/")[2]


def label_of(name: str) -> str:
    """The legend entry of a metric within its panel: the part before the last ``/`` (or the whole name)."""
    base, sep, rest = name.partition(" (rank ")
    return (base.rpartition("/")[0] or base) + sep + rest


@functools.lru_cache(maxsize=64)
def is_this_machine(node: str) -> bool:
    """Whether a rank's :attr:`~notebook_accel.events.Started.node` is this machine: ``""``, this host's name, a
    loopback address or an address a socket can bind here (a Ray node's IP address; no name is looked up)."""
    if node in ("", "localhost", socket.gethostname()):
        return True
    try:
        address = ipaddress.ip_address(node)
        if address.is_loopback:
            return True
        with socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((node, 0))
    except (ValueError, OSError):  # a host name, or an address of another machine (EADDRNOTAVAIL)
        return False
    return True


@dataclass
class RankState:
    """One worker: its status, node (``""``: this machine), device, pid, last progress count and each loop's count
    (``loops``: loop name -> ``"9/23"``, the most recently reported last); ``consequence``: it was stopped because
    another rank failed."""

    rank: int
    status: RankStatus = "starting"
    node: str = ""
    device: str = ""
    pid: int | None = None
    progress: str = ""
    detail: str = ""
    loops: dict[str, str] = field(default_factory=dict)
    consequence: bool = False


class RunState:
    """Everything the dashboard shows, updated by :meth:`apply` one event at a time.

    Args:
        info: the run being launched.
        budget: point budget of each metric series.
        max_series: the most metrics drawn (each panel and curve costs every redraw); the first names logged
            are drawn, every later one is only in the table.
        max_table: the most metrics in the table of latest values; beyond, names are counted
            (:attr:`metrics_not_shown`), so thousands of names cost what a few hundred do.
        max_log_lines: how many output lines are kept (oldest dropped first), for the main rank and for all.

    Example:
        >>> from notebook_accel.events import RunInfo, Started, Metrics
        >>> state = RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
        >>> state.apply(Started(0, 123, "cpu"))
        >>> state.apply(Metrics(0, 1, {"train/loss": 0.5}, 0.0))
        >>> state.ranks[0].status, state.latest["train/loss"]
        ('running', (1, 0.5))
    """

    def __init__(self, info: RunInfo, budget: int = 200, max_log_lines: int = 1000, max_series: int = MAX_SERIES,
                 max_table: int = MAX_TABLE) -> None:
        self.info = info
        self.budget = budget
        self.max_series = max_series
        self.max_table = max_table
        self._not_shown: set[str] = set()  # names beyond the table (at most _MAX_COUNTED of them)
        self.status: RunStatus = "starting"
        self.ranks: dict[int, RankState] = {r: RankState(r) for r in range(info.num_processes)}
        for rank, device in enumerate(info.devices[: info.num_processes]):
            self.ranks[rank].device = device
        self.run_progress = RunProgress()
        self.series: dict[str, Series] = {}
        self.latest: dict[str, tuple[int | None, float]] = {}
        self.logs_main = LogBuffer(max_log_lines, info.log_dir)
        self.logs_all = LogBuffer(max_log_lines, info.log_dir)
        self.failure: Failed | None = None
        self.outcome: RunOutcome | None = None
        self.version = 0  # bumped on every change, so a view can skip redraws when nothing changed
        self.metrics_version = 0  # bumped when a series changes
        self.logs_version = 0  # bumped when output lines arrive
        self.main_rank = 0  # the rank whose output fills the main log pane; its metrics carry no suffix
        self.engine = info.engine  # the launch config's engine until the main process names the one that runs
        self.phase = ""  # what the launch is doing while nothing else shows it ("starting 2 worker processes")
        self.workers_spoke = False  # a worker sent something of its own (output, metrics, progress, its engine)
        self.ended_at: float | None = None  # the dashboard clock when the last rank ended: the run's duration
        self.worker_phase = ""  # what the main rank is busy with that no loop reports (a Phase event)
        self._heard_from_a_rank = False
        self._now = 0.0
        self.system: SystemState | None = None  # the machine's figures and step times, from the first report on
        self.spans_machines = False  # ranks run on another machine, or on several: the ranks table names each node
        self._nodes: set[str] = set()  # the nodes of the ranks started so far ("": this machine)

    @property
    def shown_status(self) -> ShownStatus:
        """The run's status in the dashboard's words, consistent with the ranks' rows.

        Example:
            >>> state = RunState(RunInfo(1, ("cpu",), "gloo", "train")); state.finish(RunOutcome("interrupted", 1.0))
            >>> state.shown_status
            'stopped'
        """
        if self.outcome is not None:
            return "stopped" if self.outcome.status == "interrupted" else self.outcome.status
        if self.status != "starting" and self.ranks and all(s.status in _ENDED for s in self.ranks.values()):
            return "finishing"
        return "stopped" if self.status == "interrupted" else self.status

    @property
    def metrics_not_shown(self) -> int:
        """How many distinct metric names are neither drawn nor in the table (a lower bound past 100,000)."""
        return len(self._not_shown)

    def metrics_note(self) -> str:
        """A line for under the table when some names are not in it (``""`` otherwise)."""
        hidden = len(self._not_shown)
        if not hidden:
            return ""
        more = "at least " if hidden >= _MAX_COUNTED else ""
        return (f"and {more}{hidden} more metrics not shown (the dashboard draws {self.max_series} and lists "
                f"{self.max_table}); every value is in run.metrics and in the trackers' files")

    @property
    def progress(self) -> ProgressState:
        """The loop that reported last (an empty one before any report)."""
        return self.run_progress.current or ProgressState()

    def groups(self) -> dict[str, list[str]]:
        """Metric names by panel, in the order they first appeared."""
        out: dict[str, list[str]] = {}
        for name in self.series:
            out.setdefault(group_of(name), []).append(name)
        return out

    def apply(self, event: Event, now: float = 0.0) -> None:
        """Update the model with one event or a worker's metrics batch (unknown event types are ignored); ``now``
        is the dashboard clock."""
        if isinstance(event, (SystemSample, StepTimes, Stalled)):  # the system panel's own model and version
            if self.system is None:
                self.system = SystemState()
            self.system.apply(event)
            return
        self.version += 1
        self._now = now
        rank = getattr(event, "rank", None)  # an unknown event with a rank still announces it
        if rank is None:
            return
        if rank not in self.ranks or not self._heard_from_a_rank:
            self._rank(rank)
        if not isinstance(event, (Started, Exited)):
            self.workers_spoke = True
        if self.system is not None and isinstance(event, (Progress, Metrics, MetricsBatch, Log)):
            self.system.progress()  # a sign of life: the ranks are not hung, however little CPU they use
        match event:
            case Metrics():
                self._metrics(event)
            case MetricsBatch():
                self._metrics_batch(event)
            case Progress():
                self._progress(event)
            case Log():
                self._log(event)
            case Started():
                self._started(event)
            case Finished():
                self._rank(rank).status = "finished"
            case Failed():
                self._failed(event)
            case Exited():
                self._exited(event)
            case EngineReady(engine=engine) if rank == self.main_rank:
                self.engine = engine
            case Phase(text=text):
                self._rank(rank).detail = text
                if rank == self.main_rank:
                    self.worker_phase = text
        if self.ended_at is None and isinstance(event, (Finished, Failed, Exited)) and all(
                s.status in _ENDED for s in self.ranks.values()):
            self.ended_at = now

    def finish(self, outcome: RunOutcome) -> None:
        """Record how the run ended. A timeout's ranks were stopped by it (the header says ``timeout``, their rows
        ``stopped``); after a failure, the named ranks failed, except those only stopped because another rank
        failed first; ranks still marked running are marked stopped, and ranks that never started (no worker
        process reported: a refused Ray reservation) ``not started``."""
        self.version += 1
        self.outcome = outcome
        self.status = outcome.status
        if self.system is not None:
            self.system.end(outcome.status)
        if outcome.status == "timeout":
            for rank in outcome.failed_ranks:
                state = self._rank(rank)
                state.status, state.detail = "stopped", "stopped by the run's timeout"
        else:
            named = [self._rank(rank) for rank in outcome.failed_ranks]
            real = [state for state in named if not state.consequence] or named
            for state in real:
                state.status = "failed"
        for state in self.ranks.values():
            if state.status == "starting" and state.pid is None and outcome.status != "finished":
                state.status = "not started"  # no process ever ran: "stopped" (with no pid) would say one did
            elif state.status in ("starting", "running"):
                state.status = "finished" if outcome.status == "finished" else "stopped"

    def _rank(self, rank: int) -> RankState:
        """The state of ``rank``, created when the launcher did not announce it.

        On another node of a multi-node run the ranks are ``node_rank * n + local_rank``: the first rank heard
        from tells the offset, and the placeholder rows are renumbered (the lowest becomes the main rank).
        """
        n = self.info.num_processes
        if not self._heard_from_a_rank:
            self._heard_from_a_rank = True
            if rank not in self.ranks and rank >= n > 0:
                base = rank - rank % n
                self.ranks = {base + i: RankState(base + i, device=s.device) for i, s in enumerate(self.ranks.values())}
                self.main_rank = base
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = RankState(rank)
        return state

    def _started(self, event: Started) -> None:
        """A worker is up: record its pid, device and node; the run is running."""
        state = self._rank(event.rank)
        state.status, state.pid, state.device, state.node = "running", event.pid, event.device, event.node
        self._nodes.add(event.node)
        self.spans_machines = self.spans_machines or len(self._nodes) > 1 or not is_this_machine(event.node)
        if self.status == "starting":
            self.status = "running"

    def _metrics(self, event: Metrics) -> None:
        """Append each value to its series; ``step=None`` counts the series' own points."""
        self.metrics_version += 1
        suffix = "" if event.rank == self.main_rank else f" (rank {event.rank})"
        progress_step: int | None = None
        for key, value in event.values.items():
            step = self._value(key + suffix if suffix else key, event.step, value)
            if not suffix and step is not None:
                progress_step = step if progress_step is None else max(progress_step, step)
        if progress_step is not None:  # once per event, however many names it carries
            self.run_progress.on_step(progress_step, event.time, self._now)

    def _metrics_batch(self, batch: MetricsBatch) -> None:
        """A worker's many ``log`` calls at once: each metric's values of a run of calls go to its series in one
        :meth:`Series.extend`, its latest value and the step progress are set once (calls without a step:
        value by value, as :meth:`_metrics`)."""
        self.metrics_version += 1
        suffix = "" if batch.rank == self.main_rank else f" (rank {batch.rank})"
        progress_step: int | None = None
        for column in batch.columns():
            name = column.name + suffix if suffix else column.name
            steps, values = column.steps, column.values
            if NO_STEP in steps:
                for step, value in zip(steps, values):
                    self._value(name, None if step == NO_STEP else step, value)
                continue
            series = self._series(name)
            if series is not None:
                series.extend(steps, values)
            self._latest(name, steps[-1], values[-1])
            if not suffix:
                top = max(steps)
                progress_step = top if progress_step is None else max(progress_step, top)
        if progress_step is not None:  # once per batch
            self.run_progress.on_step(progress_step, batch.times[-1], self._now)

    def _value(self, name: str, step: int | None, value: float) -> int | None:
        """Add one value of metric ``name``; return the step it was drawn at (``None``: the series' count)."""
        series = self._series(name)
        if series is not None:
            if step is None:
                step = series.count
            series.append(step, value)
        self._latest(name, step, value)
        return step

    def _series(self, name: str) -> Series | None:
        """The series of ``name``, made while fewer than ``max_series`` exist (``None``: in the table only)."""
        series = self.series.get(name)
        if series is None and len(self.series) < self.max_series:
            series = self.series[name] = Series(self.budget)
        return series

    def _latest(self, name: str, step: int | None, value: float) -> None:
        """Set the latest value of ``name`` in the table, or count it among the names not shown."""
        if name in self.latest or len(self.latest) < self.max_table:
            self.latest[name] = (step, value)
        elif len(self._not_shown) < _MAX_COUNTED:
            self._not_shown.add(name)

    def _progress(self, event: Progress) -> None:
        """Track each rank's count (every rank's loader reports: the ranks table shows each position); the main
        rank alone drives the progress bars, so a rank ahead or behind never moves them back and forth."""
        rank = self._rank(event.rank)
        count = f"{event.n}/{event.total}" if event.total is not None else str(event.n)
        rank.progress = f"{event.desc} {count}" if event.desc else count
        rank.loops.pop(event.desc, None)  # re-inserted: the last key is the loop reported last
        rank.loops[event.desc] = count
        if event.rank != self.main_rank:
            return
        self.run_progress.apply(event, self._now)

    def _log(self, event: Log) -> None:
        """Keep the event's lines, or its live region (the main rank's also in the main buffer)."""
        self.logs_version += 1
        self.logs_all.add(event)
        if event.rank == self.main_rank:
            self.logs_main.add(event)

    def _failed(self, event: Failed) -> None:
        """Mark the rank failed; the first failure is the one shown. A rank whose error only says that its peer
        vanished (:func:`~notebook_accel.peer_loss.is_peer_loss`) did not fail itself: it was stopped."""
        state = self._rank(event.rank)
        state.detail = ": ".join(part for part in (event.exc_type, event.message) if part)
        if is_peer_loss(event.exc_type, event.message):
            state.status, state.consequence = "stopped", True
            state.detail = f"stopped: another rank ended under it ({state.detail})"
            return
        state.status = "failed"
        if self.failure is None:
            self.failure = event

    def _exited(self, event: Exited) -> None:
        """A process ended: an unexpected non-zero exit is a failure; a stop signal after a failure is a stop."""
        state = self._rank(event.rank)
        if state.status in ("finished", "failed") or state.consequence or event.exit_code == 0:
            if state.status in ("starting", "running"):
                state.status = "finished"
            return
        if event.failure:  # the launcher's verdict: its own death (the cause of its peers' lost connections)
            state.status, state.consequence, state.detail = "failed", False, event.failure
            self.failure = self.failure or Failed(event.rank, "", event.failure, "")
            return
        how = f"killed by {event.signal_name}" if event.signal_name else f"exit code {event.exit_code}"
        stopped = self.failure is not None or event.signal_name in _STOP_SIGNALS
        state.status = "stopped" if stopped else "failed"
        state.consequence = self.failure is not None
        state.detail = how
