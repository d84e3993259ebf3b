"""``notebook_launcher(..., block=False)``: the run goes on while the notebook stays usable.

The workers are forked at call time by a thread of the run's own, which then runs the same supervision loop
a blocking launch runs, feeding the same sink (the dashboard under the launching cell updates through widget
traits, which ipykernel sends from any thread). The caller waits only for the forks, inside the launcher
(holding no lock a child could inherit taken), and gets a :class:`BackgroundRun`. The forking thread lives as
long as the run: ``PR_SET_PDEATHSIG`` fires when the *thread* that forked a worker ends, so a fork by the
caller's thread would kill the workers as soon as a short-lived caller (a ``ThreadPoolExecutor`` job,
``asyncio.to_thread``) returned. That thread blocks SIGINT, so the stop button always reaches the thread
running the cell.

The handle's future cannot be cancelled: ``asyncio.wait_for(run, 2)`` timing out cancels the caller's await,
never the run (the handle still says ``"running"`` and ``stop()`` still stops it).

The stop button interrupts whatever cell is running, never the background run: :meth:`BackgroundRun.stop`
(or the dashboard's own stop button) ends it, with the blocking launch's teardown. One background run at a
time per kernel unless ``concurrent=True``; every run still going when the interpreter exits (kernel
shutdown or restart) is stopped first (``atexit``), and the workers die with the kernel in any case
(``PR_SET_PDEATHSIG``).

Displayed in a cell (``run`` as a cell's last line), the handle shows one line that follows the run: "running in
the background" with no clock that could go stale, replaced in place (its display id) by "finished" (or how it
ended) when the run ends, so a saved notebook never keeps an outdated status under the result.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import signal
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, Literal

from notebook_accel.display.base import BaseSink
from notebook_accel.durations import format_duration
from notebook_accel.errors import LaunchError, NotebookAccelError, shown
from notebook_accel.events import Event, Log, Metrics, RunInfo, RunOutcome
from notebook_accel.launcher.placement.spawn import interrupts_held
from notebook_accel.launcher.run_resources import RunResources
from notebook_accel.launcher.supervision.supervisor import StopRequested
from notebook_accel.launcher.tracebacks import user_facing
from notebook_accel.metrics_batch import MetricsBatch

__all__ = ["BackgroundRun", "RunStoppedError", "RunArgumentError", "RunStatus", "check_can_start", "RecordingTee"]

RunStatus = Literal["running", "finished", "failed", "timeout", "stopped"]
_ACTIVE: list[BackgroundRun] = []
_LOCK = threading.Lock()


class RunStoppedError(NotebookAccelError, RuntimeError):
    """The background run was stopped with ``stop()`` before it finished; every worker was stopped."""


class RunArgumentError(NotebookAccelError, ValueError):
    """A :class:`BackgroundRun` method was given a value it cannot use (e.g. ``wait(timeout="5")``)."""


def _seconds(method: str, timeout: object) -> float | None:
    """``timeout`` for ``wait``/``result``: ``None`` (no limit), or seconds (negative: 0; beyond what a wait
    can take: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:
        raise RunArgumentError(f"{method}(timeout={shown(timeout)}) is not allowed; pass a number of seconds, or "
                               "None to wait until the run ends")
    if timeout >= threading.TIMEOUT_MAX:
        return None
    return 0.0 if timeout <= 0 else float(timeout)  # not float() first: -10**5000 has no float


class RecordingTee(BaseSink):
    """Passes every event on to ``sink`` and keeps the metrics of the main rank and every rank's output lines.

    A worker's metrics batch is kept as it came and turned into rows only when asked for (:meth:`snapshot`),
    so a run that logs thousands of values a second costs the kernel a list append per batch.

    Args:
        sink: the sink that shows the run.
        main_rank: whose metrics are kept (rank 0 on node 0).
    """

    def __init__(self, sink: BaseSink, main_rank: int) -> None:
        self.sink = sink
        self.main_rank = main_rank
        self.metrics: list[dict[str, float | int | None]] = []
        self._batches: list[MetricsBatch] = []  # the main rank's batches not yet turned into rows of ``metrics``
        self.output: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self.needs_tick = sink.needs_tick

    def start(self, info: RunInfo) -> None:
        """Forward :meth:`Sink.start`."""
        self.sink.start(info)

    def handle(self, event: Event) -> None:
        """Record metrics and complete lines, then forward."""
        with self._lock:
            if isinstance(event, Metrics) and event.rank == self.main_rank:
                self._rows()
                self.metrics.append({"step": event.step, "time": event.time, **event.values})
            elif isinstance(event, Log) and not event.partial:
                self.output.setdefault(event.rank, []).extend(event.text.split("\n"))
        self.sink.handle(event)

    def handle_metrics(self, batch: MetricsBatch) -> None:
        """Keep the main rank's batch (rows are made when asked for), then forward it."""
        if batch.rank == self.main_rank:
            with self._lock:
                self._batches.append(batch)
        self.sink.handle_metrics(batch)

    def finish(self, outcome: RunOutcome) -> None:
        """Forward :meth:`Sink.finish`."""
        self.sink.finish(outcome)

    def tick(self, now: float) -> None:
        """Forward :meth:`BaseSink.tick`."""
        self.sink.tick(now)

    def _rows(self) -> None:
        """Turn the kept batches into rows of ``metrics``, in arrival order (the caller holds the lock)."""
        for batch in self._batches:
            self.metrics.extend({"step": e.step, "time": e.time, **e.values} for e in batch.events())
        self._batches.clear()

    def snapshot(self) -> tuple[list[dict[str, float | int | None]], dict[int, list[str]]]:
        """Copies of what was recorded so far (safe while the run goes on)."""
        with self._lock:
            self._rows()
            return [dict(row) for row in self.metrics], {rank: list(lines) for rank, lines in self.output.items()}


class BackgroundRun:
    """A launch running in the background; returned by ``notebook_launcher(..., block=False)``.

    Attributes:
        name: the training function's name.
        started: ``time.time()`` when the workers were forked.

    Example:
        >>> run = notebook_launcher(train, num_processes=2, block=False)   # doctest: +SKIP
        >>> run.status                                                     # doctest: +SKIP
        'running'
        >>> value = await run                                              # doctest: +SKIP
    """

    def __init__(self, name: str, tee: RecordingTee, start: Callable[[], Any],
                 body: Callable[[Any, int], Any], resources: RunResources | None = None) -> None:
        """Start the run's thread, which calls ``start()`` (forks, returns the workers), then
        ``body(workers, stop_fd)``; return once ``start`` returned, raising what it raised. Once ``start``
        succeeded the thread owns ``resources`` (until then the caller does) and closes them when ``body`` ends,
        before the run's outcome is settled."""
        self.name = name
        self.started = time.time()
        self._tee = tee
        self._future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._future.set_running_or_notify_cancel()  # a running future cannot be cancelled (asyncio.wait_for)
        self._stop_read, self._stop_write = os.pipe()
        os.set_blocking(self._stop_write, False)  # stop() called many times never blocks on a full pipe
        self._status: RunStatus = "running"
        self.ended: float | None = None  # time.time() when the run ended
        self._displays: list[Any] = []  # display handles showing this run's line (updated when it ends)
        self._forked = threading.Event()
        self._start_error: BaseException | None = None
        self._resources = resources
        self._thread = threading.Thread(target=self._supervise, args=(start, body), name=f"notebook-accel {name}",
                                        daemon=True)
        with _LOCK:
            _ACTIVE.append(self)
        tee.sink.attach_stop(lambda: self.stop(wait=False))
        self._thread.start()
        try:
            with interrupts_held():  # a stop-button press meanwhile: the forks finish, then the run is stopped
                self._forked.wait()
        except KeyboardInterrupt:
            self.stop(wait=True)
            raise
        if self._start_error is not None:
            raise self._start_error

    def _supervise(self, start: Callable[[], Any], body: Callable[[Any, int], Any]) -> None:
        """The thread: fork, run the supervision loop, then settle the future and the status."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the stop button is for the cell's thread
        try:
            workers = start()
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
            self._start_error = e
            self._settle("failed", e)
            self._forked.set()
            return
        if self._resources is not None:
            self._resources.hand_over()  # before the caller is woken: it must not close them now
        self._forked.set()
        try:
            value = self._body(body, workers)
        except StopRequested:
            self._settle("stopped", RunStoppedError(f"the background run of {self.name} was stopped with stop()"))
        except BaseException as e:  # noqa: BLE001 - every outcome goes to whoever asks the handle
            from notebook_accel.launcher.supervision.failures import LaunchTimeoutError

            self._settle("timeout" if isinstance(e, LaunchTimeoutError) else "failed", e)
        else:
            self._forget()
            self._status, self.ended = "finished", time.time()
            self._announce()
            self._future.set_result(value)

    def _body(self, body: Callable[[Any, int], Any], workers: Any) -> Any:
        """Run ``body``, then close the run's resources (whoever waits on the run finds them closed)."""
        try:
            return body(workers, self._stop_read)
        finally:
            if self._resources is not None:
                self._resources.close()

    def _settle(self, status: RunStatus, error: BaseException) -> None:
        self._forget()  # before the future: whoever waits on it finds nothing of the run left open
        self._status, self.ended = status, time.time()
        self._announce()
        self._future.set_exception(error)

    def _forget(self) -> None:
        """The run is over: it leaves the active list and its stop pipe is closed (a later stop() is a no-op)."""
        with _LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
            for fd in (self._stop_read, self._stop_write):
                if fd >= 0:
                    os.close(fd)
            self._stop_read = self._stop_write = -1

    def _announce(self) -> None:
        """Replace every displayed line of this run by how it ended (before anyone waiting is woken)."""
        for handle in self._displays:
            try:
                handle.update(self._repr_mimebundle_(), raw=True)
            except Exception:  # noqa: BLE001 - the front end may be gone; the run's outcome matters more
                pass

    def descriptors(self) -> tuple[int, int]:
        """The stop pipe's ends while the run goes on (for :mod:`notebook_accel.launcher.kernel.fds`)."""
        return self._stop_read, self._stop_write

    @property
    def status(self) -> RunStatus:
        """``"running"``, then ``"finished"``, ``"failed"``, ``"timeout"`` or ``"stopped"``."""
        return self._status

    @property
    def done(self) -> bool:
        """Whether the run has ended (any status but ``"running"``)."""
        return self._future.done()

    @property
    def metrics(self) -> list[dict[str, float | int | None]]:
        """The main process's logged values so far, one dict per ``log`` call (``step``, ``time``, values):
        ``pandas.DataFrame(run.metrics)`` makes a table."""
        return self._tee.snapshot()[0]

    @property
    def output(self) -> dict[int, list[str]]:
        """Every rank's complete output lines so far, by rank."""
        return self._tee.snapshot()[1]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends or ``timeout`` seconds pass; returns whether it has ended."""
        done, _ = concurrent.futures.wait([self._future], _seconds("wait", timeout))
        return bool(done)

    @user_facing  # the error reaches the cell without the launcher's and concurrent.futures' frames
    def result(self, timeout: float | None = None) -> Any:
        """Rank 0's return value, waiting for it; raises what a blocking launch raises (``WorkerError``,
        ``LaunchTimeoutError``), :class:`RunStoppedError` after :meth:`stop`, or ``TimeoutError`` when
        ``timeout`` seconds pass first (the run goes on)."""
        if not self.wait(_seconds("result", timeout)):
            raise TimeoutError(f"the run of {self.name} is still going after {shown(timeout)} s; it goes on")
        return self._future.result()

    def stop(self, wait: bool = True) -> None:
        """End the run as the stop button ends a blocking one (SIGTERM, grace, SIGKILL, reap everything).
        Idempotent; with ``wait``, returns once every worker is gone.

        Raises:
            RunArgumentError: ``wait`` is not ``True`` or ``False`` (nothing is sent).
        """
        if not isinstance(wait, bool):
            raise RunArgumentError(f"stop(wait={shown(wait)}) is not allowed; pass True (return once every worker "
                                   "is gone) or False (return at once)")
        with _LOCK:  # the pipe is closed under the same lock when the run ends
            if self._stop_write >= 0:
                try:
                    os.write(self._stop_write, b"x")
                except BlockingIOError:  # full of earlier requests: the run is stopping already
                    pass
        if wait:
            self.wait()

    def __await__(self) -> Generator[Any, None, Any]:
        """``value = await run`` in a notebook cell: waits without blocking the kernel's event loop."""
        return asyncio.wrap_future(self._future).__await__()

    def __repr__(self) -> str:
        elapsed = (self.ended or time.time()) - self.started
        return f"<BackgroundRun {self.name}: {self.status}, {format_duration(elapsed)} since start>"

    def summary(self) -> str:
        """One line with nothing that goes stale: ``train: running in the background (run.wait(), ...)`` while it
        runs, then ``train: finished (background run; run.result() has the outcome)`` (``failed``, ``timeout``,
        ``stopped``). No duration: the dashboard above gives the run's one clock."""
        if self.ended is None:
            return f"{self.name}: running in the background (run.wait(), run.result(), run.stop())"
        return f"{self.name}: {self.status} (background run; run.result() has the outcome)"

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """The :meth:`summary` as plain text and HTML."""
        import html

        color = {"finished": "#1a7f37", "running": "#1d4ed8", "stopped": "#b45309"}.get(self.status, "#b42318")
        page = f'<span style="font-family:sans-serif;font-size:13px;color:{color}">{html.escape(self.summary())}</span>'
        return {"text/plain": self.summary(), "text/html": page}

    def _ipython_display_(self) -> None:
        """Show the summary with a display id; it is replaced in place when the run ends."""
        from IPython.display import display  # late: the core package loads no display code at import

        handle = display(self._repr_mimebundle_(), raw=True, display_id=True)
        if handle is not None and not self.done:
            self._displays.append(handle)


def check_can_start(concurrent: bool) -> None:
    """Refuse a launch while a background run is going, unless ``concurrent`` (then each run needs its own
    devices: CPU runs can share a machine, GPU runs must use other ``gpu_ids``)."""
    with _LOCK:
        running = [run for run in _ACTIVE if not run.done]
    if running and not concurrent:
        raise LaunchError(
            f"a background run is still going ({running[0]!r}); wait for it (run.wait()), stop it (run.stop()), "
            "or pass concurrent=True to start another one beside it (on other devices: gpu_ids=...)"
        )


def _stop_all_at_exit() -> None:
    """Kernel shutdown or restart: stop every background run before the interpreter goes."""
    for run in list(_ACTIVE):
        run.stop(wait=False)
    for run in list(_ACTIVE):
        run.wait(timeout=10)


atexit.register(_stop_all_at_exit)
