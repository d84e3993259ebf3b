"""The live training dashboard: the :class:`~notebook_accel.events.Sink` the launcher uses in a Jupyter kernel.

Layout, top to bottom: a header (function, status, elapsed time), a table of ranks (status, device, pid,
progress), the main progress bar with rate and ETA, the error of the first failing rank (hidden until then),
the live curves (one panel per metric group), a table of the latest values, and the output of the workers in
two tabs, "main process" and "all ranks" (tabs switch in the browser, so they work while the kernel is busy
running the launch; a kernel-side toggle would not).

Cost control: ``handle`` runs on the launcher's loop in the kernel's main thread. It updates the pure-Python
:class:`~notebook_accel.widgets.state.RunState` (O(1) per event); the text widgets are refreshed at most every
``refresh_interval`` seconds (and at once for status changes: started, finished, failed, exited); the curves
are redrawn at most every ``plot_interval`` seconds and never more than ``plot_share`` of the time (a slow
machine redraws less often), only when new metrics arrived. The widgets are displayed once and updated in
place (no ``clear_output``). At ``finish`` the final state is drawn, the dashboard freezes, and a static
snapshot (PNG + summary) is displayed below it for saved notebooks, HTML exports and nbval.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from notebook_accel.events import Event, Exited, Failed, Finished, RunInfo, RunOutcome, Started
from notebook_accel.widgets import views
from notebook_accel.widgets.plots import CurvePlot
from notebook_accel.widgets.snapshot import snapshot_outputs
from notebook_accel.widgets.state import RunState

__all__ = ["Dashboard"]

_URGENT = (Started, Finished, Failed, Exited)
_BAR_STYLES = {"finished": "success", "failed": "danger", "timeout": "danger", "interrupted": "warning"}


def _ipython_display(obj: object) -> None:
    """Display ``obj`` in the current cell (imported late: only the dashboard needs IPython.display)."""
    from IPython.display import display

    display(obj)


class Dashboard:
    """Live view of a launched run, built from ipywidgets and matplotlib (Agg).

    Args:
        show_all_ranks: open the log pane on the "all ranks" tab instead of "main process".
        refresh_interval: the least number of seconds between two refreshes of the text widgets.
        plot_interval: the least number of seconds between two redraws of the curves.
        plot_share: the largest fraction of time spent redrawing curves (the interval grows on slow machines).
        budget: points kept per metric series (min/max buckets; spikes survive).
        max_log_lines: output lines kept per pane; the pane shows the last ``shown_log_lines`` of them.
        shown_log_lines: output lines rendered in each log pane.
        clock: monotonic clock in seconds (injected by tests).
        display: how widgets and the snapshot are shown (default ``IPython.display.display``).

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
        plot_interval: float = 1.0,
        plot_share: float = 0.025,
        budget: int = 200,
        max_log_lines: int = 1000,
        shown_log_lines: int = 200,
        clock: Callable[[], float] = time.monotonic,
        display: Callable[[object], None] | None = None,
    ) -> None:
        self.show_all_ranks = show_all_ranks
        self.refresh_interval = refresh_interval
        self.plot_interval = plot_interval
        self.plot_share = plot_share
        self.budget = budget
        self.max_log_lines = max_log_lines
        self.shown_log_lines = shown_log_lines
        self.clock = clock
        self._display = display or _ipython_display
        self.state: RunState | None = None
        self.plot = CurvePlot()
        self.png: bytes | None = None
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
        self.header = w.HTML()
        self.ranks = w.HTML()
        self.bar = w.FloatProgress(value=0.0, min=0.0, max=1.0, layout=w.Layout(width="50%"))
        self.bar_label = w.Label()
        self.error = w.HTML(layout=w.Layout(display="none"))
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%"))
        self.metrics = w.HTML()
        self.log_main = w.HTML()
        self.log_all = w.HTML()
        self.logs = w.Tab(children=[self.log_main, self.log_all], selected_index=1 if self.show_all_ranks else 0)
        self.logs.set_title(0, "main process")
        self.logs.set_title(1, "all ranks")
        self.root = w.VBox(
            [self.header, self.ranks, w.HBox([self.bar, self.bar_label]), self.error, self.image, self.metrics,
             self.logs]
        )

    # -- Sink protocol ----------------------------------------------------------------------------------

    def start(self, info: RunInfo) -> None:
        """Show the dashboard under the cell for the run described by ``info``."""
        if self.state is not None:  # the same dashboard passed to a second launch: fresh widgets, old view kept
            self._build_widgets()
            self.plot, self.png, self._seen, self._next_plot = CurvePlot(), None, {}, 0.0
        self.state = RunState(info, budget=self.budget, max_log_lines=self.max_log_lines)
        self._started_at = self.clock()
        self.frozen = False
        self._display(self.root)
        self._guarded(self._refresh, True)

    def handle(self, event: Event) -> None:
        """Record ``event``; refresh the widgets when the throttle allows (status changes: at once)."""
        state = self.state
        if state is None or self.frozen:
            return
        state.apply(event)
        now = self.clock()
        if now >= self._next_refresh or isinstance(event, _URGENT):
            self._guarded(self._refresh, False)

    def finish(self, outcome: RunOutcome) -> None:
        """Draw the final state, freeze, and display the static snapshot (curves PNG + summary)."""
        state = self.state
        if state is None or self.frozen:
            return
        state.finish(outcome)
        self._guarded(self._refresh, True)
        self.frozen = True
        for obj in snapshot_outputs(state, self.png if state.series else None, outcome.elapsed):
            self._guarded(self._display, obj)

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
        outcome = state.outcome
        elapsed = outcome.elapsed if outcome is not None else now - self._started_at
        self.header.value = views.header_html(state, elapsed)
        if self._changed("state", state.version):
            self.ranks.value = views.ranks_html(state)
            fraction, label = views.progress_text(state)
            self.bar.value, self.bar_label.value = fraction, label
            self.bar.bar_style = _BAR_STYLES.get(state.status, "")
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
        if (force or now >= self._next_plot) and (self._changed("plot", state.metrics_version) or self.png is None):
            self._redraw(now)

    def _redraw(self, now: float) -> None:
        """Render the curves into the image widget; schedule the next redraw from how long this one took."""
        state = self.state
        if state is None:
            return
        started = time.perf_counter()
        self.png = self.plot.render(state.series)
        self.image.value = self.png
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
