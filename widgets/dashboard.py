"""The live training dashboard: the :class:`~notebook_accel.events.Sink` the launcher uses in a Jupyter kernel.

Layout, top to bottom: a header (function, status, elapsed time), a table of ranks (status, device, pid,
progress), the run's overall progress (training batches over all epochs) and the current loop's (train or
eval loader, with the user's 1-based epoch), the error of the first failing rank (hidden until then), the live
curves (inline SVG, one panel per metric group, drawn by the browser: :mod:`notebook_accel.widgets.svg`), a
table of the latest values, and the output of the workers in two tabs, "main process" and "all ranks".

Timing: ``handle`` runs on the launcher's loop in the kernel's main thread and updates the pure-Python
:class:`~notebook_accel.widgets.state.RunState` (O(1) per event); the widgets are refreshed at most every
``refresh_interval`` seconds (at once for status changes). Between events the launcher calls :meth:`tick`
at least every :data:`~notebook_accel.events.TICK_SECONDS`: it moves the clock (elapsed, rate, ETA) and shows
every value held back by the throttle, so nothing waits for the next event. (A timer thread in the dashboard
would do the same but would write widget traits, and so send comm messages, from a second thread while the
main thread does too; the launcher's loop already wakes for its own deadlines, so the tick costs nothing.)
The curves are rebuilt at most
every ``plot_interval`` seconds (and never more than ``plot_share`` of the time) when new metrics arrived.

Layout: every part has its place from the first frame (the curves' height is reserved before the first point, the
progress rows and the log pane have fixed heights, the clock a fixed width, the stop button a fixed place), so the
page below does not jump as the run fills in. Before the workers report, the header says what the launch is doing
(:meth:`Dashboard.phase`). One clock: the live clock, the header's final time and "finished in" are all this
dashboard's clock from :meth:`start`, stopped when the last rank ends.

At ``finish`` the live widget view is *replaced in place* (its display id) by one static output
(:class:`~notebook_accel.widgets.snapshot.StaticResult`: the curves drawn once by matplotlib as a PNG, the
summary, the error once, the output in a collapsible block), and the widgets are closed: a saved notebook, an
HTML export and GitHub show that result and no widget view.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from notebook_accel.events import EngineReady, Event, Exited, Failed, Finished, RunInfo, RunOutcome, Started
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.widgets import views
from notebook_accel.widgets.snapshot import StaticResult
from notebook_accel.widgets.state import RunState
from notebook_accel.widgets.svg import curves_svg

__all__ = ["Dashboard"]

_URGENT = (Started, Finished, Failed, Exited, EngineReady)
_BAR_STYLES = {"finished": "success", "failed": "danger", "timeout": "danger", "stopped": "warning"}
_BAR = {"width": "260px", "flex": "0 0 auto"}  # keyword sets, not Layout objects: a Layout shared by two widgets
_ROW = {"min_height": "24px", "align_items": "center"}  # would hide both when one is hidden
_CURVES_HEIGHT = "184px"  # one row of SVG panels (svg._H) with its gap: reserved before the first point


def _ipython_display(obj: object) -> Any:
    """Display ``obj`` in the current cell with a display id; return the handle that can replace it."""
    from IPython.display import display  # imported late: only the dashboard needs IPython.display

    return display(obj, display_id=True)


class Dashboard:
    """Live view of a launched run, built from ipywidgets (curves as inline SVG; matplotlib for the final PNG).

    Args:
        show_all_ranks: open the log pane on the "all ranks" tab instead of "main process".
        refresh_interval: the least number of seconds between two refreshes of the widgets.
        plot_interval: the least number of seconds between two redraws of the curves.
        plot_share: the largest fraction of time spent redrawing curves (the interval grows on slow machines).
        budget: points kept per metric series (min/max buckets; spikes survive).
        max_log_lines: output lines kept per pane; the pane shows the last ``shown_log_lines`` of them.
        shown_log_lines: output lines rendered in each log pane.
        clock: monotonic clock in seconds (injected by tests).
        display: shows the widgets; may return a handle whose ``update(obj)`` replaces them in place at the end
            (default: ``IPython.display.display(obj, display_id=True)``); without a handle the result is shown
            by a second call.

    Example:
        >>> from notebook_accel import notebook_launcher
        >>> from notebook_accel.widgets import Dashboard
        >>> notebook_launcher(train, num_processes=2, dashboard=Dashboard(show_all_ranks=True))  # doctest: +SKIP
    """

    def __init__(
        self,
        show_all_ranks: bool = False,
        *,
        refresh_interval: float = 0.25,
        plot_interval: float = 0.25,
        plot_share: float = 0.05,
        budget: int = 200,
        max_log_lines: int = 1000,
        shown_log_lines: int = 200,
        clock: Callable[[], float] = time.monotonic,
        display: Callable[[object], Any] | None = None,
    ) -> None:
        self.show_all_ranks = show_all_ranks
        self.refresh_interval = refresh_interval
        self.plot_interval = plot_interval
        self.plot_share = plot_share
        self.budget = budget
        self.max_log_lines = max_log_lines
        self.shown_log_lines = shown_log_lines
        self.clock = clock
        self._display = display if display is not None else _ipython_display
        self.state: RunState | None = None
        self.plot: Any = None  # the matplotlib CurvePlot that drew the final PNG (made at the end)
        self.png: bytes | None = None
        self.svg = ""
        self.display_handle: Any = None
        self.ticks = 0
        self.refreshes = 0
        self.redraws = 0
        self.frozen = False
        self.sink_errors: list[str] = []
        self._started_at = 0.0
        self._next_refresh = 0.0
        self._next_plot = 0.0
        self._seen: dict[str, int] = {}
        self._build_widgets()

    def _build_widgets(self) -> None:
        """Create the widgets once; later only their values change."""
        self.header = w.HTML(layout=w.Layout(flex="1 1 auto"))
        self.stop_button = w.Button(description="Stop run", button_style="danger", icon="stop",
                                    tooltip="Stop this background run (as run.stop())",
                                    layout=w.Layout(display="none", flex="0 0 auto"))
        self.ranks = w.HTML()
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(**_BAR))
        self.bar_label = w.HTML(layout=w.Layout(flex="1 1 auto"))
        self.error = w.HTML(layout=w.Layout(display="none"))
        self.overall_bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(**_BAR))
        self.overall_label = w.HTML(layout=w.Layout(flex="1 1 auto"))
        self.overall_row = w.HBox([self.overall_bar, self.overall_label], layout=w.Layout(**_ROW))
        self.overall_bar.layout.display = "none"
        self.curves = w.HTML(layout=w.Layout(min_height=_CURVES_HEIGHT))
        self.metrics = w.HTML()
        self.log_main = w.HTML()
        self.log_all = w.HTML()
        self.logs = w.Tab(children=[self.log_main, self.log_all], selected_index=1 if self.show_all_ranks else 0)
        self.logs.set_title(0, "main process")
        self.logs.set_title(1, "all ranks")
        self.root = w.VBox([
            w.HBox([self.header, self.stop_button], layout=w.Layout(**_ROW)), self.ranks, self.overall_row,
            w.HBox([self.bar, self.bar_label], layout=w.Layout(**_ROW)), self.error,
            w.HBox([self.curves, self.metrics], layout=w.Layout(flex_flow="row wrap", align_items="flex-start")),
            self.logs,
        ])
        for widget, name in ((self.root, "nacc-dashboard"), (self.header, "nacc-header"), (self.ranks, "nacc-ranks"),
                             (self.stop_button, "nacc-stop"), (self.logs, "nacc-logs")):
            widget.add_class(name)  # stable names for styling and for the browser test

    def attach_stop(self, stop: Callable[[], None]) -> None:
        """Show the stop button, calling ``stop`` when pressed (a background run: the notebook's own stop
        button interrupts the running cell, not the run)."""

        def pressed(_: w.Button) -> None:
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping..."
            stop()

        self.stop_button.on_click(pressed)
        self.stop_button.layout.display = None

    # -- Sink protocol ----------------------------------------------------------------------------------

    def start(self, info: RunInfo) -> None:
        """Show the dashboard under the cell for the run described by ``info``."""
        if self.state is not None:  # the same dashboard passed to a second launch: fresh widgets, old view kept
            self._build_widgets()
            self.png, self.svg, self._seen, self._next_plot = None, "", {}, 0.0
        self.state = RunState(info, budget=self.budget, max_log_lines=self.max_log_lines)
        self._started_at = self.clock()
        self.frozen = False
        self.display_handle = self._display(self.root)
        self._guarded(self._refresh, True)

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
        self.handle(batch)  # type: ignore[arg-type]  # RunState.apply takes batches

    def phase(self, text: str) -> None:
        """Say what the launch is doing while nothing else shows it (``""``: nothing); shown at once, since the
        launcher calls this right before a step that may take a while."""
        if self.state is None or self.frozen:
            return
        self.state.phase = text
        self.state.version += 1
        self._guarded(self._refresh, False)

    def tick(self, now: float) -> None:
        """The launcher's periodic wake-up: move the clock and show every value held back by the throttle.

        ``now`` is the launcher's ``time.monotonic()``; the dashboard reads its own (injectable) clock.
        """
        if self.state is None or self.frozen:
            return
        self.ticks += 1
        self._guarded(self._refresh, False)

    def finish(self, outcome: RunOutcome) -> None:
        """Replace the live view in place by the static result (PNG curves, summary, error, output); close it."""
        state = self.state
        if state is None or self.frozen:
            return
        state.finish(outcome)
        self._guarded(self._refresh, False)  # the final status at once, while the result's image is drawn
        self.frozen = True
        if state.series:
            self._guarded(self._render_png)
        position = views.position_text(state)
        where = views.ranks_html(state, with_detail=False) + (views.label_html(position) if position else "")
        result = StaticResult(state, self.png if state.series else None, self._elapsed(self.clock()), where)
        update = getattr(self.display_handle, "update", None)
        if update is not None:
            self._guarded(update, result)
        else:
            self._guarded(self._display, result)
        self._guarded(self._close_widgets)

    def _render_png(self) -> None:
        """Draw the final curves with matplotlib for the static result (imported only now: the first launch's
        dashboard appears without waiting for matplotlib)."""
        from notebook_accel.widgets.plots import CurvePlot

        if self.state is not None:
            self.plot = CurvePlot()
            self.png = self.plot.render(self.state.series)

    def _close_widgets(self) -> None:
        """Close every widget of the live view (their models leave the front end; nothing is left to save)."""
        for widget in [self.root, *self._all_children(self.root)]:
            widget.close()

    def _all_children(self, box: w.Widget) -> list[w.Widget]:
        """The widgets inside ``box``, depth first."""
        out: list[w.Widget] = []
        for child in getattr(box, "children", ()):
            out += [child, *self._all_children(child)]
        return out

    # -- drawing ----------------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Redraw everything now, curves included (the launcher may call this when it is idle)."""
        if self.state is not None and not self.frozen:
            self._guarded(self._refresh, True)

    def _refresh(self, force: bool) -> None:
        """Update the widgets whose content changed; redraw the curves when due (or ``force``)."""
        state = self.state
        if state is None:
            return
        now = self.clock()
        self.refreshes += 1
        self._next_refresh = now + self.refresh_interval
        self.header.value = views.header_html(state, self._elapsed(now))
        fraction, label = views.progress_text(state, now)
        self.bar.value, self.bar_label.value = fraction, views.label_html(label)
        overall, overall_label = views.overall_text(state, now)
        self.overall_bar.layout.display = "none" if overall is None else None  # length unknown: the label alone
        self.overall_bar.value = overall if overall is not None else 0.0
        self.overall_label.value = views.label_html(overall_label)
        if self._changed("state", state.version):
            self.ranks.value = views.ranks_html(state)
            self.bar.bar_style = _BAR_STYLES.get(state.shown_status, "")
            error = views.error_html(state)
            if error and error != self.error.value:
                self.error.value = error
                self.error.layout.display = ""
        if self._changed("logs", state.logs_version) or force:
            n = self.shown_log_lines
            self.log_main.value = views.logs_html(state.logs_main, with_rank=False, max_lines=n)
            self.log_all.value = views.logs_html(state.logs_all, with_rank=True, max_lines=n)
        if self._changed("table", state.metrics_version):
            self.metrics.value = views.metrics_html(state)
        if (force or now >= self._next_plot) and (self._changed("plot", state.metrics_version) or not self.svg):
            self._redraw(now)

    def _elapsed(self, now: float) -> float:
        """The run's time on this dashboard's clock: from :meth:`start` to ``now``, or to when the last rank ended."""
        end = self.state.ended_at if self.state is not None and self.state.ended_at is not None else now
        return max(end - self._started_at, 0.0)

    def _redraw(self, now: float) -> None:
        """Rebuild the SVG curves; schedule the next redraw from how long this one took."""
        state = self.state
        if state is None:
            return
        started = time.perf_counter()
        self.svg = curves_svg(state.series)
        self.curves.value = self.svg
        self.redraws += 1
        cost = time.perf_counter() - started
        self._next_plot = now + max(self.plot_interval, cost / self.plot_share)

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
        """Displaying the dashboard object shows its widgets."""
        self._display(self.root)
