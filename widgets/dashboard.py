"""The live training dashboard: the notebook backend of :class:`~notebook_accel.display.base.BaseSink` (in a kernel).

Layout, top to bottom: a header (function, status, elapsed time), a table of ranks (status, device, pid,
progress), the run's overall progress (training batches over all epochs) and the current loop's (train or
eval loader, with the epoch index the user's loop counts), the error of the first failing rank (shown :data:`ERROR_GRACE`
seconds after it, unless the launcher's clearer verdict ends the run first), the live curves (inline SVG, one
panel per metric group, drawn by the browser: :mod:`notebook_accel.widgets.svg`), a table of the latest values,
and the output of the workers (tabs "main process" and "all ranks" with several ranks), and from the first system
sample on the system panel (:mod:`notebook_accel.widgets.system_panel`), in room kept free for it from the start.

Cost and room (:mod:`~notebook_accel.widgets.room`): the first paint has the size the function's last run in this
kernel ended in: the widgets at once (:class:`~notebook_accel.widgets.live_view.LiveView`, a handful), or one
compact line of plain HTML (:meth:`Dashboard._frame`, no widget, no comm message); a function not run before
paints an empty output until its size is known. The widgets replace a compact or empty output in place once the
run is known to be long (its first metric, or ``grow_after`` seconds; never before ``live_after``), so a short
launch costs the kernel two display messages and builds no widget.

Timing: ``handle`` runs on the launcher's loop in the kernel's main thread and updates the pure-Python
:class:`~notebook_accel.widgets.run_model.RunState` (O(1) per event); the widgets are refreshed at most every
``refresh_interval`` seconds (at once for status changes). Between events the launcher calls :meth:`tick`
at least every :data:`~notebook_accel.events.TICK_SECONDS`: it moves the clock (elapsed, rate, ETA) and shows
every value held back by the throttle, so nothing waits for the next event (:attr:`needs_tick`). (A timer thread
in the dashboard would do the same but would write widget traits, and so send comm messages, from a second thread
while the main thread does too; the launcher's loop already wakes for its own deadlines, so the tick costs
nothing.) The curves and the table of values (one message) are redrawn when new metrics came, at most every
``plot_interval`` seconds (:class:`~notebook_accel.widgets.live_curves.LiveCurves`).

Layout: in the widgets every part has its place (the curves' row and the output box reserved before their first
values, the clock of a fixed width, the stop button in a fixed place): the page below does not jump as the run
fills in. Before the workers report, the header says what the launch is doing (:meth:`Dashboard.phase`). One
clock, this dashboard's from :meth:`start` (live, final time, "finished in"), stopped when the last rank ends.

At ``finish`` the live view is *replaced in place* (its display id) by one static output
(:class:`~notebook_accel.widgets.snapshot.StaticResult`: the curves as one SVG image, the summary, the error once,
the output in a collapsible block) and the widgets are closed: a saved notebook or an export shows no widget view.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

from notebook_accel.display.base import BaseSink
from notebook_accel.durations import format_duration
from notebook_accel.events import EngineReady, Event, Exited, Failed, Finished, RunInfo, RunOutcome, Started
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.widgets import views
from notebook_accel.widgets.live_curves import LiveCurves
from notebook_accel.widgets.live_view import LiveView
from notebook_accel.widgets.room import GROW_AFTER, KERNEL_MEMORY, PENDING, RoomMemory, compact_html, grows, live_height
from notebook_accel.widgets.snapshot import StaticResult, Summary, ipython_display
from notebook_accel.widgets.run_model import RunState
from notebook_accel.widgets.svg import curves_image, curves_svg
from notebook_accel.widgets.system_panel import SystemPanel

__all__ = ["Dashboard"]

_URGENT = (Started, Finished, Failed, Exited, EngineReady)
_BAR_STYLES = {"finished": "success", "failed": "danger", "timeout": "danger", "stopped": "warning"}
ERROR_GRACE = 2.0  # seconds a failure waits for the launcher's verdict before the live error box shows it


class Dashboard(BaseSink):
    """Live view of a launched run, built from ipywidgets (curves as inline SVG, and as an SVG image at the end).

    Args:
        show_all_ranks: open the log pane on the "all ranks" tab instead of "main process".
        refresh_interval: the least number of seconds between two refreshes of the widgets.
        plot_interval: the least number of seconds between two redraws of the curves.
        plot_share: the largest fraction of time spent redrawing curves (the interval grows on slow machines).
        budget: points kept per metric series (min/max buckets; spikes survive).
        max_log_lines: output lines kept per pane; the pane shows the last ``shown_log_lines`` of them.
        shown_log_lines: output lines rendered in each log pane.
        clock: monotonic clock in seconds (injected by tests).
        display: shows the first frame; may return a handle whose ``update(obj)`` replaces it in place by the
            widgets, and those by the result at the end (default: ``IPython.display.display(obj,
            display_id=True)``); without a handle the widgets come at once and the result is shown by a second
            call.
        live_after: seconds the first frame (static HTML, no widget) stays at least before the widgets replace it;
            ``0``: the widgets at once.
        grow_after: seconds a run without metrics keeps its compact (or empty) first frame (a run that ends sooner
            never builds a widget, and its result keeps that line's room).
        memory: the size each function's last run ended in (default: this kernel's); with ``live_after > 0``
            the first paint takes it.

    Example:
        >>> from notebook_accel import notebook_launcher
        >>> from notebook_accel.widgets import Dashboard
        >>> notebook_launcher(train, num_processes=2, dashboard=Dashboard(show_all_ranks=True))  # doctest: +SKIP
    """

    needs_tick = True  # its clock (elapsed, rate, ETA) moves while the workers are silent: see the module docstring

    def __init__(
        self,
        show_all_ranks: bool = False,
        *,
        refresh_interval: float = 0.25,
        plot_interval: float = 0.5,
        plot_share: float = 0.05,
        budget: int = 200,
        max_log_lines: int = 1000,
        shown_log_lines: int = 200,
        clock: Callable[[], float] = time.monotonic,
        display: Callable[[object], Any] | None = None,
        live_after: float = 0.5,
        grow_after: float = GROW_AFTER,
        memory: RoomMemory | None = None,
    ) -> None:
        self.show_all_ranks = show_all_ranks
        self.refresh_interval = refresh_interval
        self.budget = budget
        self.max_log_lines = max_log_lines
        self.shown_log_lines = shown_log_lines
        self.clock = clock
        self.live_after = live_after
        self.grow_after = grow_after
        self.memory = memory if memory is not None else KERNEL_MEMORY
        self._pending = False  # an unseen function's empty output, until its size is known
        self._live_at = 0.0
        self._display = display if display is not None else ipython_display
        self.state: RunState | None = None
        self.image: bytes | None = None  # the final curves (one SVG document), made at the end
        self.curves = LiveCurves(plot_interval, plot_share)
        self.display_handle: Any = None
        self.ticks = 0
        self.refreshes = 0
        self.frozen = False
        self.sink_errors: list[str] = []
        self._started_at = 0.0
        self._next_refresh = 0.0
        self._seen: dict[str, int] = {}
        self._stop: Callable[[], None] | None = None
        self._failed_at: float | None = None
        self._frame_clock = ""  # the clock the first frame shows (it moves until the widgets replace it)
        self._clear_widgets()

    def _clear_widgets(self) -> None:
        """No widget yet: they are made when the view goes live, with their first values."""
        self.view: LiveView | None = None
        self.system = SystemPanel()  # no widget until the first system sample; its room is kept free below
        self.parts: dict[str, str] = {}  # the HTML of each part, as last drawn (for tests and tools)
        self.fractions: dict[str, float | None] = {}  # each bar's fraction as last drawn (``None``: no bar)

    def _build_widgets(self) -> LiveView:
        """Make the live view (:class:`~notebook_accel.widgets.live_view.LiveView`) with the parts as they are."""
        self._compose()
        all_ranks = self._log_html(main=False) if self._tabbed() else None
        view = self.view = LiveView(views.top_html(self.parts), self._body_html(), self._log_html(main=True), all_ranks,
                                    self.show_all_ranks)
        if self._stop is not None:
            view.add_stop_button(self._stop)
        if self.state is not None:
            self.system.update(self.state, view.root)  # the panel's room (or the panel) before the view is shown
        return view

    def _tabbed(self) -> bool:
        """Whether the output pane has the "all ranks" tab (several ranks, or asked for)."""
        return self.show_all_ranks or (self.state is not None and self.state.info.num_processes > 1)

    def attach_stop(self, stop: Callable[[], None]) -> None:
        """Show the stop button, calling ``stop`` when pressed (a background run: the notebook's own stop
        button interrupts the running cell, not the run); it comes with the widgets when they do not exist yet."""
        self._stop = stop
        if self.view is not None:
            self.view.add_stop_button(stop)

    def start(self, info: RunInfo) -> None:
        """Show the dashboard under the cell for the run described by ``info``."""
        if self.state is not None:  # the same dashboard passed to a second launch: fresh widgets, old view kept
            self._clear_widgets()
            self.image, self._seen = None, {}
            self.curves.reset()
        self.state = RunState(info, budget=self.budget, max_log_lines=self.max_log_lines)
        self._started_at = self._next_refresh = self.clock()
        self.frozen = False
        self._failed_at = None
        self._live_at = self._started_at + self.live_after
        size = self.memory.recall(info) if self.live_after > 0 else "full"
        if size == "full":
            self.display_handle = self._display(self._build_widgets().root)
            return
        self._compose()
        self._frame_clock = format_duration(0.0)
        self._pending = size is None
        self.display_handle = self._display(Summary(PENDING, "") if self._pending else self._frame())

    def _frame(self) -> Summary:
        """The first frame: one compact line (no widget, no comm message) until the run is known to be long
        (:mod:`~notebook_accel.widgets.room`): the header and what the run is doing."""
        state = self.state
        if state is None:
            return Summary("", "")
        label = state.phase or views.progress_text(state, self.clock())[1]
        header = views.header_html(state, self._elapsed(self.clock()), with_phase=False)
        return Summary(compact_html(header, label), f"{state.info.function_name}: {state.shown_status}")

    def _tick_frame(self, now: float) -> None:
        """Before the widgets: move the first frame's clock (a new frame in its place, at most every
        ``refresh_interval``), so a run shorter than :attr:`live_after` shows its time running from the start."""
        clock = format_duration(self._elapsed(now))
        update = getattr(self.display_handle, "update", None)
        if update is None or self._pending or now < self._next_refresh or clock == self._frame_clock:
            return
        self._next_refresh = now + self.refresh_interval
        self._frame_clock = clock
        self._compose()
        update(self._frame())

    def _go_live(self) -> None:
        """Build the widgets and put them where the first frame is. Without a display handle the first frame
        cannot be replaced: it stays (no widget below a stale copy), and the result comes after it."""
        update = getattr(self.display_handle, "update", None)
        if self.view is not None or self.state is None or update is None:
            return
        update(self._build_widgets().root)

    def handle(self, event: Event) -> None:
        """Record ``event``; refresh the widgets when the throttle allows (status changes: at once)."""
        state = self.state
        if state is None or self.frozen:
            return
        now = self.clock()
        state.apply(event, now)
        if now >= self._next_refresh or isinstance(event, _URGENT):
            self._guarded(self._refresh, False)

    def handle_metrics(self, batch: MetricsBatch) -> None:
        """Record a worker's metrics batch (many ``log`` calls at once); refresh as :meth:`handle` does."""
        self.handle(batch)  # RunState.apply takes batches

    def phase(self, text: str) -> None:
        """Say what the launch is doing while nothing else shows it (``""``: nothing); shown at once once the
        widgets exist (the launcher calls this right before a step that may take a while, and ticks during a slow
        one, which brings the widgets after :attr:`live_after`). Before that the first frame says ``starting``
        and "waiting for the workers": a step of a few milliseconds costs no message."""
        if self.state is None or self.frozen:
            return
        self.state.phase = text
        self.state.version += 1
        self._guarded(self._refresh, False)  # before the widgets: shown once they come (a slow step ticks)

    def tick(self, now: float) -> None:
        """The launcher's periodic wake-up: move the clock and show every value held back by the throttle.

        ``now`` is the launcher's ``time.monotonic()``; the dashboard reads its own (injectable) clock.
        """
        if self.state is None or self.frozen:
            return
        self.ticks += 1
        now = self.clock()
        if self.view is None and (now < self._live_at or not grows(self.state, self._elapsed(now), self.grow_after)):
            self._guarded(self._tick_frame, now)
            return
        self._guarded(self._refresh, False)

    def finish(self, outcome: RunOutcome) -> None:
        """Replace the live view in place by the static result (the curves' image, summary, error, output); close it."""
        state = self.state
        if state is None or self.frozen:
            return
        state.finish(outcome)
        self._guarded(self._refresh, False, False)  # the final status at once, while the result's image is drawn
        self.frozen = True
        if state.series:
            self.image = curves_image(state.series)
        position = views.position_text(state)
        where = views.ranks_html(state, with_detail=False) + (views.label_html(position) if position else "")
        compact = self.view is None and self.live_after > 0  # never grew: the compact line's room
        if self.live_after > 0:
            self.memory.remember(state.info, "compact" if compact else "full", outcome.status)
        result = StaticResult(state, self.image if state.series else None, self._elapsed(self.clock()), where,
                              compact=compact, least_height=0 if compact else live_height(
                                  state.info.num_processes, self._tabbed()))
        update = getattr(self.display_handle, "update", None)
        if update is not None:
            self._guarded(update, result)
        else:
            self._guarded(self._display, result)
        self._guarded(self._close_widgets)

    def _close_widgets(self) -> None:
        """Close the live view's widgets (their models leave the front end; nothing is left to save)."""
        if self.view is not None:
            self.view.close()

    def refresh(self) -> None:
        """Redraw everything now, curves included (the launcher may call this when it is idle)."""
        if self.state is not None and not self.frozen:
            self._guarded(self._refresh, True)

    def _refresh(self, force: bool, go_live: bool = True) -> None:
        """Update the widgets whose content changed; redraw the curves when due (or ``force``). Before the widgets
        exist: build them when :attr:`live_after` has passed (and ``go_live``), else leave the first frame."""
        state = self.state
        if state is None:
            return
        now = self.clock()
        if self.view is None:
            if not go_live or now < self._live_at or not grows(state, self._elapsed(now), self.grow_after):
                return
            self._go_live()
        view = self.view
        if view is None:
            return
        self.refreshes += 1
        self._next_refresh = now + self.refresh_interval
        logs_changed = self._compose(force)
        view.set(view.top, views.top_html(self.parts))
        view.set(view.body, self._body_html())
        if logs_changed:
            view.set(view.log_main, self._log_html(main=True))
            if view.log_all is not None:
                view.set(view.log_all, self._log_html(main=False))
        self.system.update(state, view.root)

    def _compose(self, force: bool = True) -> bool:
        """Work out each part's HTML into :attr:`parts` (each only when its content moved); return whether the
        output changed."""
        state = self.state
        if state is None:
            return False
        now = self.clock()
        parts = self.parts
        parts["header"] = views.header_html(state, self._elapsed(now))
        fraction, label = views.progress_text(state, now)
        style = _BAR_STYLES.get(state.shown_status, "")
        parts["bar"] = views.bar_row_html(fraction, label, style, "nacc-loop")
        overall, overall_label = views.overall_text(state, now)
        parts["overall"] = views.bar_row_html(overall, overall_label, style, "nacc-run")
        self.fractions = {"bar": fraction, "overall": overall}
        if self._changed("state", state.version):
            parts["ranks"] = views.ranks_html(state)
            if state.failure is not None and self._failed_at is None:
                self._failed_at = now
        parts["error"] = self._error_part(now)
        if (force or self.curves.due(now)) and self._changed("plot", state.metrics_version):
            self._redraw(now)  # the table follows the curves' pace: one message for both
            parts["metrics"] = views.metrics_html(state)
        parts["curves"] = self.curves.svg or curves_svg({})
        return self._changed("logs", state.logs_version) or force

    def _error_part(self, now: float) -> str:
        """The error box: a worker's failure waits :data:`ERROR_GRACE` seconds for the launcher's verdict (torch's
        first words about a lost connection are not the cause; the result names it), then shows."""
        state = self.state
        if state is None:
            return ""
        held = state.failure is not None and self._failed_at is not None and now < self._failed_at + ERROR_GRACE
        return "" if held else views.error_html(state)

    def _body_html(self) -> str:
        """The curves beside the table of latest values."""
        return views.body_html(self.parts, self.state is not None and bool(self.state.series))

    def _log_html(self, main: bool) -> str:
        """The main process's output pane, or every rank's."""
        state = self.state
        if state is None:
            return ""
        logs = state.logs_main if main else state.logs_all
        return views.part_html(views.logs_html(logs, with_rank=not main, max_lines=self.shown_log_lines))

    def _elapsed(self, now: float) -> float:
        """The run's time on this dashboard's clock: from :meth:`start` to ``now``, or to when the last rank ended."""
        end = self.state.ended_at if self.state is not None and self.state.ended_at is not None else now
        return max(end - self._started_at, 0.0)

    def _redraw(self, now: float) -> None:
        """Rebuild the SVG curves (:class:`~notebook_accel.widgets.live_curves.LiveCurves` schedules the next)."""
        if self.state is not None:
            self.curves.draw(self.state.series, now)

    @property
    def redraws(self) -> int:
        """How many redraws changed the curves."""
        return self.curves.redraws

    def _changed(self, key: str, version: int) -> bool:
        """True (once) when ``version`` moved since the last time ``key`` was drawn."""
        if self._seen.get(key) == version:
            return False
        self._seen[key] = version
        return True

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a drawing step; a failure is recorded and warned about once instead of breaking the launch."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - a sink must never raise into the launcher
            self.sink_errors.append(f"{type(e).__name__}: {e}")
            if len(self.sink_errors) == 1:
                warnings.warn(f"the dashboard could not draw: {type(e).__name__}: {e}", RuntimeWarning, stacklevel=2)

    def _ipython_display_(self) -> None:
        """Displaying the dashboard object shows its widgets (nothing before they exist)."""
        if self.view is not None:
            self._display(self.view.root)
