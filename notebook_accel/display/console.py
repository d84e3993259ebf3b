"""The console sink: a run shown as plain text (a terminal, a script, or a notebook without ipywidgets).

What it prints:

- the launcher's first line, saying what really runs (``Launching 2 processes on CPU (gloo)``), and where
  every rank's whole output is kept;
- the main process's output, each line whole, to stdout/stderr as the worker wrote it, with its colours on a
  terminal or in a notebook (stripped in a file or a pipe); on a terminal, the unfinished lines (a tqdm bar)
  are drawn live at the bottom on stderr and redrawn in place (:class:`TerminalOutput`);
- other ranks' stderr (warnings, errors) prefixed ``[rank N]``; their stdout only with ``show_all_ranks``
  (then every line, the main process's included, is prefixed);
- a progress line from ``Progress`` events at most every ``progress_interval`` seconds, and a short metrics
  line at most every ``metrics_interval`` seconds (main process only);
- one closing line: finished / failed / timed out / interrupted, with the elapsed time.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import Callable, Literal, TextIO

from notebook_accel.display.base import BaseSink
from notebook_accel.display.flush import flush_soon
from notebook_accel.durations import format_duration
from notebook_accel.engines.registry import PLAIN_ENGINES
from notebook_accel.events import (
    EngineReady,
    Event,
    Log,
    Metrics,
    Progress,
    RunInfo,
    RunOutcome,
    Stalled,
    StepTimes,
    SystemSample,
    epoch_label,
)
from notebook_accel.float8.facts import precision_label
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.monitor.idle import stopped_from_outside
from notebook_accel.monitor.summary import SystemSummary, sample_line
from notebook_accel.monitor.verdict import StepBreakdown, verdict
from notebook_accel.terminal import strip_ansi

__all__ = ["ConsoleSink", "TerminalOutput", "describe_launch"]

_MAX_CONSOLE_VALUES = 20  # values per metrics line; a run logging thousands of names gets a count


def describe_launch(info: RunInfo) -> str:
    """The launcher's first line: what really runs, on which devices, with which backend.

    Example:
        >>> describe_launch(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))
        'Launching 2 processes on CPU (gloo)'
        >>> describe_launch(RunInfo(2, ("cuda:0", "cuda:1"), "nccl", "train", mixed_precision="bf16"))
        'Launching 2 processes on 2 GPUs [0, 1] (nccl), mixed precision bf16'
        >>> describe_launch(RunInfo(1, ("cuda:0",), "none", "train", mixed_precision="fp8"))
        'Running train in this process on 1 GPU [0] (num_processes=1: no fork), mixed precision fp8 (torchao)'
        >>> describe_launch(RunInfo(2, ("cpu", "cpu"), "gloo", "train", engine="FSDP FULL_SHARD"))
        'Launching 2 processes on CPU (gloo), FSDP FULL_SHARD'
        >>> describe_launch(RunInfo(2, ("cuda:0", "cuda:0"), "nccl", "train", cluster="Ray cluster 10.0.0.1:6379"))
        'Launching 2 processes on 2 GPUs of the Ray cluster 10.0.0.1:6379 (nccl)'
    """
    count = f"{info.num_processes} process" + ("es" if info.num_processes != 1 else "")
    gpus = [int(d.split(":")[1]) for d in info.devices if d.startswith("cuda:")]
    where = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} {gpus}" if gpus else "CPU"
    if info.cluster:  # each worker's device is its own node's: the indices say nothing
        where = (f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}" if gpus else "CPU") + f" of the {info.cluster}"
    if info.num_processes == 1 and info.backend == "none":
        text = f"Running {info.function_name} in this process on {where} (num_processes=1: no fork)"
    else:
        text = f"Launching {count} on {where} ({info.backend})"
    if info.engine:
        text += f", {info.engine}"
    if info.mixed_precision not in ("", "no"):
        text += f", mixed precision {precision_label(info.mixed_precision)}"
    return text


def _rate(n: int, elapsed: float) -> str:
    """``12.3 it/s`` (or ``s/it`` when slow)."""
    if elapsed <= 0 or n <= 0:
        return "? it/s"
    per_second = n / elapsed
    return f"{per_second:.1f} it/s" if per_second >= 1 else f"{1 / per_second:.1f} s/it"


def _is_tty(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _shows_colours(stream: TextIO) -> bool:
    """A terminal, or a Jupyter kernel's stream (front ends render ANSI colours)."""
    return _is_tty(stream) or type(stream).__module__.startswith("ipykernel")


class TerminalOutput:
    """Writes output lines to ``sys.stdout`` / ``sys.stderr`` (looked up at each write) and keeps a live area.

    Final lines keep their ANSI colours where they can be shown and lose them elsewhere. The live area (the
    unfinished lines of the streams shown, e.g. a tqdm bar) is drawn only when stderr is a terminal: at the
    bottom, on stderr, erased and redrawn around every write, cut to the terminal's width.
    """

    def __init__(self) -> None:
        self._live: dict[tuple[int, str], list[str]] = {}
        self._drawn = 0  # lines of the live area on screen now

    def lines(self, stream: Literal["stdout", "stderr"], lines: list[str]) -> None:
        """Write whole lines (under the live area, which is redrawn below them)."""
        target = sys.stderr if stream == "stderr" else sys.stdout
        text = "\n".join(lines) + "\n"
        self._erase()
        target.write(text if _shows_colours(target) else strip_ansi(text))
        flush_soon(target)  # in a kernel: handed to its IO thread, in order, without waiting for the send
        self._draw()

    def live(self, key: tuple[int, str], lines: list[str]) -> None:
        """Replace the live lines of ``key`` (a rank and stream); an empty list removes them."""
        if not _is_tty(sys.stderr):
            return
        if lines:
            self._live[key] = lines
        elif self._live.pop(key, None) is None:
            return
        self._erase()
        self._draw()

    def drop(self, key: tuple[int, str]) -> None:
        """Forget the live lines of ``key`` (its final lines are about to be written)."""
        self._live.pop(key, None)

    def clear(self) -> None:
        """Erase and forget the whole live area (at the end of the run)."""
        self._erase()
        self._live.clear()

    def _erase(self) -> None:
        """Remove the live area from the screen; the cursor ends where it began."""
        if self._drawn:
            sys.stderr.write("\r\x1b[K" + "\x1b[A\x1b[K" * (self._drawn - 1))
            sys.stderr.flush()
            self._drawn = 0

    def _draw(self) -> None:
        """Draw the live area at the cursor, each line cut to the terminal's width (so none wraps)."""
        if not self._live or not _is_tty(sys.stderr):
            return
        width = max(10, shutil.get_terminal_size().columns - 1)
        rows = [strip_ansi(line)[:width] for key in sorted(self._live) for line in self._live[key]]
        sys.stderr.write("\n".join(rows))
        sys.stderr.flush()
        self._drawn = len(rows)


class ConsoleSink(BaseSink):
    """Shows a run as text on ``sys.stdout`` / ``sys.stderr`` (looked up at each write, so notebook cells work).

    The console backend of :class:`BaseSink` (the notebook one is ``notebook_accel.widgets.Dashboard``). It keeps
    no clock, so it needs no tick: the launcher sleeps until a worker has something to say.

    Args:
        show_all_ranks: print every rank's output, prefixed ``[rank N]``.
        main_rank: the rank whose output is the main process's (0; on node k of a multi-node run, its first rank).
        prefix_template: the prefix of other ranks' lines, with ``{rank}`` and ``{local_rank}``; ``None``:
            ``[rank N] `` (``notebook_launcher(log_line_prefix_template=...)``).
        progress_interval: least seconds between two progress lines.
        metrics_interval: least seconds between two metrics lines.
        clock: monotonic clock (tests inject one).

    Example:
        >>> notebook_launcher(train, num_processes=2, dashboard=ConsoleSink(show_all_ranks=True))  # doctest: +SKIP
    """

    def __init__(
        self,
        show_all_ranks: bool = False,
        main_rank: int = 0,
        *,
        prefix_template: str | None = None,
        progress_interval: float = 1.0,
        metrics_interval: float = 5.0,
        system_interval: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.show_all_ranks = show_all_ranks
        self.main_rank = main_rank
        self.prefix_template = prefix_template if prefix_template is not None else "[rank {rank}] "
        self._progress_interval = progress_interval
        self._metrics_interval = metrics_interval
        self._clock = clock
        self._last_progress = -float("inf")
        self._last_metrics = -float("inf")
        self._progress_start: dict[str, tuple[float, int, int]] = {}  # name: first time, first n, last n
        self._out = TerminalOutput()
        self._log_dir = ""
        self._engine = ""
        self._system_interval = system_interval
        self._last_system = -float("inf")
        self._summary = SystemSummary()
        self._steps = StepBreakdown()

    def _write(self, stream: TextIO, text: str) -> None:
        """Write whole lines and flush, so they reach the cell or terminal now (under the live area)."""
        self._out.lines("stderr" if stream is sys.stderr else "stdout", text.split("\n"))

    def start(self, info: RunInfo) -> None:
        """Print what is launched, and where the output of every rank is kept."""
        self._log_dir = info.log_dir
        self._engine = info.engine
        where = f"; every rank's output is kept in {info.log_dir}/" if info.log_dir else ""
        if info.restart:
            self._write(sys.stderr, f"notebook-accel: {info.restart}")
        self._write(sys.stdout, describe_launch(info) + where)

    def handle(self, event: Event) -> None:
        """Print output lines, throttled progress and metrics; ignore the rest."""
        if isinstance(event, (Log, Progress, Metrics, StepTimes)):
            self._summary.idle.progress()  # a sign of life: no idle stretch goes on across it
        if isinstance(event, Log):
            self._log(event)
        elif isinstance(event, Progress) and event.rank == self.main_rank:
            self._progress(event)
        elif isinstance(event, Metrics) and event.rank == self.main_rank:
            self._metrics(event)
        elif isinstance(event, EngineReady) and event.rank == self.main_rank:
            self._engine_line(event.engine)
        elif isinstance(event, SystemSample):
            self._system(event)
        elif isinstance(event, StepTimes):
            self._steps.add(event)
        elif isinstance(event, Stalled):
            self._summary.idle.stalls.add(event)  # where a rank waits: no progress

    def _system(self, sample: SystemSample) -> None:
        """Keep the sample for the closing summary; print a one-line view every ``system_interval`` seconds."""
        self._summary.add(sample)
        now = self._clock()
        if now - self._last_system >= self._system_interval:
            if self._last_system > -float("inf"):  # not at the very start: the first sample shows little
                self._write(sys.stdout, sample_line(sample))
            self._last_system = now

    def _engine_line(self, engine: str) -> None:
        """``Engine: FSDP FULL_SHARD`` when the Accelerator runs another engine than the launch line said (plain
        DDP after a launch line that named none goes without saying)."""
        if engine != self._engine and (self._engine or engine not in PLAIN_ENGINES):
            self._write(sys.stdout, f"Engine: {engine}")
        self._engine = engine

    def _log(self, event: Log) -> None:
        """Main process: as written. Others: stderr prefixed; stdout only with ``show_all_ranks``."""
        plain = event.rank == self.main_rank and not self.show_all_ranks
        if not (plain or self.show_all_ranks or event.stream == "stderr"):
            return
        prefix = "" if plain else self.prefix_template.format(rank=event.rank, local_rank=event.rank - self.main_rank)
        lines = [prefix + line for line in event.text.split("\n")] if event.text or not event.partial else []
        key = (event.rank, event.stream)
        if event.partial:
            self._out.live(key, lines)
        else:
            self._out.drop(key)
            self._out.lines(event.stream, lines)

    def _progress(self, event: Progress) -> None:
        """``desc: 40/100 [40%] 12.3 it/s`` at most every interval, and always at the end."""
        now = self._clock()
        name = event.desc or "progress"
        if event.epoch is not None:
            name += f" {epoch_label(event.epoch)}"
        start = self._progress_start.get(name)
        if start is None or event.n < start[2] or event.n == start[2] == 1:  # a fresh loader, same name: anew
            start = (event.time, event.n, event.n)
        start = self._progress_start[name] = (start[0], start[1], event.n)
        done = event.total is not None and event.n >= event.total
        if not done and now - self._last_progress < self._progress_interval:
            return
        self._last_progress = now
        rate = _rate(event.n - start[1], event.time - start[0])
        if event.total:
            text = f"{event.n}/{event.total} [{100 * event.n / event.total:.0f}%] {rate}"
        else:
            text = f"{event.n} {rate}"
        self._write(sys.stdout, f"{name}: {text}")

    def handle_metrics(self, batch: MetricsBatch) -> None:
        """A worker's batch of ``log`` calls: its latest values, when the throttle allows (as :meth:`handle`)."""
        self._summary.idle.progress()
        if batch.rank == self.main_rank and self._clock() - self._last_metrics >= self._metrics_interval:
            self._metrics(batch.record(-1))

    def _metrics(self, event: Metrics) -> None:
        """``step 12: loss=0.4321, acc=0.9`` at most every interval (the first 20 values, then a count)."""
        now = self._clock()
        if now - self._last_metrics < self._metrics_interval or not event.values:
            return
        self._last_metrics = now
        shown_values = list(event.values.items())[:_MAX_CONSOLE_VALUES]
        values = ", ".join(f"{k}={v:.4g}" for k, v in shown_values)
        if len(event.values) > len(shown_values):
            values += f", and {len(event.values) - len(shown_values)} more"
        where = f"step {event.step}" if event.step is not None else "metrics"
        self._write(sys.stdout, f"{where}: {values}")

    def finish(self, outcome: RunOutcome) -> None:
        """One closing line (to stderr when the run did not finish), after the run's system summary."""
        self._out.clear()
        if self._summary.ranks:
            self._write(sys.stdout, "System: " + "; ".join(self._summary.lines()))
        if self._steps.ranks:
            self._write(sys.stdout, "Steps: " + "; ".join(self._steps.lines()))
        stopped = stopped_from_outside(outcome.status)
        found = verdict(self._steps, self._summary.gpu_means(), self._summary.idle.seconds(),
                        self._summary.idle.stalls.text(past=stopped), stopped)
        if found:
            self._write(sys.stdout, f"Verdict: {found}")
        elapsed = format_duration(outcome.elapsed)
        if outcome.status == "finished":
            self._write(sys.stdout, f"Finished in {elapsed}")
            return
        words = {"failed": "Failed", "timeout": "Timed out", "interrupted": "Interrupted"}[outcome.status]
        detail = f": {outcome.error}" if outcome.error and outcome.status != "interrupted" else ""
        where = f" (every rank's output: {self._log_dir}/)" if self._log_dir else ""
        self._write(sys.stderr, f"{words} after {elapsed}{detail}{where}")
