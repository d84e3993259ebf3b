"""Events: the only contract between the workers and whatever shows a run (dashboard, console, tests).

Workers send small picklable dataclasses through their channel (:mod:`notebook_accel.channel`); the
launcher in the kernel turns the workers' captured output into :class:`Log` events itself, adds the
events it alone can see (a worker that died without a word), and hands every event to a :class:`Sink`.

A sink sees, in order: ``start(info)`` once, ``handle(event)`` for each event, ``finish(outcome)`` once,
whatever happened (success, a failing rank, a timeout or the stop button).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, runtime_checkable

if TYPE_CHECKING:  # metrics_batch builds on Metrics: named here only for the type
    from notebook_accel.metrics_batch import MetricsBatch

__all__ = [
    "TICK_SECONDS",
    "Started",
    "Log",
    "Metrics",
    "Progress",
    "epoch_label",
    "Finished",
    "Failed",
    "Exited",
    "Saved",
    "EngineReady",
    "Phase",
    "RankSystem",
    "SystemSample",
    "StepTimes",
    "Stalled",
    "Event",
    "RunInfo",
    "RunOutcome",
    "Sink",
]


TICK_SECONDS = 0.25  # the longest the launcher's loop waits before calling an optional ``Sink.tick``


@dataclass(frozen=True)
class Started:
    """A worker is up: its rank, process id and device (``"cpu"``, ``"cuda:0"``).

    ``node`` is the machine the rank runs on: its address as the placement knows it (a Ray node's IP address),
    ``""`` for this machine (a local run's workers).
    """

    rank: int
    pid: int
    device: str
    node: str = ""


@dataclass(frozen=True)
class Log:
    """Output of a worker's ``stream``, as a terminal shows it (``\\r`` redraws and cursor movements applied).

    ``partial=False`` (the usual case): whole lines that can no longer change, joined by ``\\n`` (no trailing
    newline), in the order the worker wrote them across stdout and stderr. They also end the stream's live
    region: a consumer stops showing the last ``partial`` text of this rank and stream.

    ``partial=True``: the stream's *live region* (the line being written, e.g. a tqdm bar, or the few rows a
    nested bar redraws in place) now reads ``text``; it replaces the previous partial text of this rank and
    stream (``""``: nothing). Its final form arrives later as whole lines.

    Lines keep the worker's colours as ANSI SGR sequences (``\\x1b[31m``); see :mod:`notebook_accel.terminal`
    to strip them or turn them into HTML.
    """

    rank: int
    stream: Literal["stdout", "stderr"]
    text: str
    partial: bool = False


@dataclass(frozen=True)
class Metrics:
    """Scalar values logged by a worker at ``step`` (``None`` when the user gave no step)."""

    rank: int
    step: int | None
    values: dict[str, float]
    time: float


@dataclass(frozen=True)
class Progress:
    """A loop's position: ``n`` of ``total`` items done (``total`` is ``None`` when unknown).

    ``desc`` names the loop: for a prepared DataLoader what the user iterates (``"train"``, ``"eval"`` or the
    loader's explicit ``name``), for :func:`~notebook_accel.progress.progress` its ``desc``. ``epoch`` is the
    1-based epoch a prepared loader is in (``None`` for other loops); ``source`` says which of the two sent it.
    """

    rank: int
    n: int
    total: int | None
    desc: str
    time: float
    epoch: int | None = None
    source: Literal["loader", "loop"] = "loop"


def epoch_label(epoch: int) -> str:
    """How the dashboard and the console name a :class:`Progress`'s 1-based ``epoch``: by the 0-based index that the
    user's ``for epoch in range(...)`` loop, their ``tqdm`` and ``set_epoch`` show (``epoch_label(2)`` is
    ``"epoch index 1"``), so the run's progress and the user's own lines never count the same epoch two ways."""
    return f"epoch index {epoch - 1}"


@dataclass(frozen=True)
class Finished:
    """A worker's function returned ``value`` (only rank 0's value is sent; others send ``None``)."""

    rank: int
    value: Any = None


@dataclass(frozen=True)
class Failed:
    """A worker's function raised: the exception's type name, message and the user's traceback text.

    ``call`` names the library function the user's code was in when it raised, with the user's line
    (``"gather (Cell In[8], line 12)"``), or is empty when the user's own code raised.
    """

    rank: int
    exc_type: str
    message: str
    traceback: str
    call: str = ""


@dataclass(frozen=True)
class Exited:
    """Made by the launcher: a worker process ended with ``exit_code`` (negative: killed by a signal).

    ``failure`` is the launcher's verdict when the end was a failure of the rank's own, one it did not report
    itself (killed by another process or the OOM killer, its node lost): how it ended, as the error says it; ``""``
    when the rank returned, reported its own exception, or was stopped by the launcher.
    """

    rank: int
    exit_code: int
    signal_name: str | None = None
    failure: str = ""


@dataclass(frozen=True)
class Saved:
    """The main process committed a checkpoint (``save_state``) at ``path``: where a restart resumes from."""

    rank: int
    path: str
    step: int = 0


@dataclass(frozen=True)
class EngineReady:
    """The main process's Accelerator has decided how it trains: ``engine`` names it (``"DDP"``,
    ``"FSDP FULL_SHARD"``, ``"DeepSpeed ZeRO-3 (offload: optimizer)"``; see :mod:`notebook_accel.engines.label`)."""

    rank: int
    engine: str


@dataclass(frozen=True)
class Phase:
    """A worker is busy with something slow that no loop reports (``"DeepSpeed is compiling its CPU communication
    op ..."``), until a later ``Phase`` of the same rank with ``text=""`` says it is over."""

    rank: int
    text: str
    time: float = 0.0


@dataclass(frozen=True)
class RankSystem:
    """One worker's share of the machine at a sample: its process tree's CPU % (100 = one core) and resident
    bytes (DataLoader workers included), the run's peak of that, its GPU's figures (``None`` on CPU or when
    NVML does not report them; ``gpu_memory_*`` in bytes, temperature in °C, power in W), and the memory cgroup
    limit it runs under with that group's usage (``None`` when no cgroup limits it). The resident bytes leave out
    the compiler's processes (torch.compile's workers, the C++ compiler), whose bytes are ``compiler_rss_bytes``
    (see :mod:`notebook_accel.monitor.compiler`)."""

    rank: int
    cpu_percent: float
    rss_bytes: int
    peak_rss_bytes: int
    gpu_utilization: float | None = None
    gpu_memory_used: int | None = None
    gpu_memory_total: int | None = None
    gpu_peak_memory: int | None = None
    gpu_temperature: float | None = None
    gpu_power_watts: float | None = None
    memory_limit: int | None = None  # the memory cgroup limit over the worker, when tighter than the machine
    memory_group_usage: int | None = None  # what that cgroup holds now
    compiler_rss_bytes: int = 0  # resident bytes of the compiler processes the rank started, apart from its own


@dataclass(frozen=True)
class SystemSample:
    """Made by the launcher about once a second: every local worker's :class:`RankSystem` and the machine's
    available and total memory (bytes). ``time`` is ``time.time()``."""

    time: float
    ranks: tuple[RankSystem, ...]
    host_available: int
    host_total: int


@dataclass(frozen=True)
class StepTimes:
    """Sums over ``steps`` training steps of one worker, in seconds (see :mod:`notebook_accel.monitor.steps`):
    the whole steps, the wait for data, forward plus backward, backward alone, gradient communication in flight,
    and the optimizer step; ``loader_workers`` is the DataLoader's ``num_workers``."""

    rank: int
    steps: int
    step_seconds: float
    data_seconds: float
    forward_backward_seconds: float
    backward_seconds: float
    comm_seconds: float
    optimizer_seconds: float
    loader_workers: int = 0


@dataclass(frozen=True)
class Stalled:
    """A worker's main thread has stayed in one place, using next to no CPU, for a couple of seconds
    (``stuck=True``), or has moved on from there (``stuck=False``): what a hung rank waits in (see
    :mod:`notebook_accel.launcher.child.stall_watch`). A report, not progress: no idle stretch ends with it.

    ``collective`` is the collective it waits in as users call it (``"all_reduce"``, ``"barrier"``,
    ``"DDP's gradient all-reduce"`` in backward), ``""`` when it is in none; ``call`` is the call on the user's line
    (``"accelerator.reduce"``, ``"time.sleep"``); ``file`` and ``line`` are that line's (the kernel names a notebook
    cell ``"Cell In[6]"``).
    """

    rank: int
    collective: str
    call: str
    file: str
    line: int
    stuck: bool = True


# A MetricsBatch (many ``log`` calls of one rank, see :mod:`notebook_accel.metrics_batch`) travels like any event;
# the launcher hands it to a sink's ``handle_metrics``, never to ``handle``.
Event = Union[Started, Log, Metrics, Progress, Finished, Failed, Exited, Saved, EngineReady, Phase, SystemSample,
              StepTimes, Stalled, "MetricsBatch"]


@dataclass(frozen=True)
class RunInfo:
    """What is being launched, given to :meth:`Sink.start`.

    ``log_dir`` is the run's folder holding each local rank's whole output in ``rank<N>.log`` (empty when output
    is not kept, e.g. ``num_processes=1``, whose output goes straight to the cell). ``engine`` is the engine the
    launch config names; the main process's :class:`EngineReady` replaces it once its Accelerator has decided.
    """

    num_processes: int
    devices: tuple[str, ...]
    backend: str
    function_name: str
    mixed_precision: str = "no"
    start_time: float = 0.0
    log_dir: str = ""  # the folder with every rank's full output (``rank<N>.log``); "" when not kept
    engine: str = ""  # what the launch config asks for ("DDP", "FSDP FULL_SHARD"...); "" when it says nothing
    cluster: str = ""  # where the workers run when not on this machine ("Ray cluster 10.0.0.1:6379"); "" here
    restart: str = ""  # which restart, from where, after what ("restart 1 of 2 from ckpt after ..."); "" at first
    function_key: str = ""  # the function's module and qualified name ("__main__.train"); "" when not known


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended, given to :meth:`Sink.finish`.

    ``status`` is ``"finished"``, ``"failed"``, ``"timeout"`` or ``"interrupted"``; ``error`` is the one-line
    summary of what went wrong (empty on success); ``failed_ranks`` lists the ranks that failed.
    """

    status: Literal["finished", "failed", "timeout", "interrupted"]
    elapsed: float
    error: str = ""
    failed_ranks: tuple[int, ...] = field(default_factory=tuple)


@runtime_checkable
class Sink(Protocol):
    """Receives a run's events in the kernel. Implementations: the console sink, the dashboard, test sinks.

    A sink must be quick (it runs on the launcher's supervising loop) and must not raise; the launcher
    treats a sink error as a bug in the sink, reports it once and carries on without it.

    Optional: a sink may define ``handle_metrics(batch)`` to take a worker's metrics a flush at a time, as one
    :class:`~notebook_accel.metrics_batch.MetricsBatch` (typed arrays: no Python object per value); a sink
    without it gets the same values as :class:`Metrics` events, one per ``log`` call, through ``handle``.

    Optional: a sink may also define ``tick(now: float) -> None``. The supervising loop then wakes at least
    every :data:`TICK_SECONDS` even when no event arrives and calls it with ``time.monotonic()``, so a sink can
    move its clock (elapsed time, rate, ETA) and show values it held back for throttling. It is not part of
    the protocol's required members (``isinstance(obj, Sink)`` does not ask for it).

    :class:`notebook_accel.display.base.BaseSink` has every optional method, doing nothing (its ``tick`` is
    wanted only when its ``needs_tick`` is set); the console and the dashboard build on it.
    """

    def start(self, info: RunInfo) -> None:
        """Called once before the first event."""

    def handle(self, event: Event) -> None:
        """Called for each event, in arrival order."""

    def finish(self, outcome: RunOutcome) -> None:
        """Called once at the end, whatever happened."""
