"""Headless tests for notebook_accel.widgets.dashboard: widget values, throttling, freezing, the snapshot."""

from __future__ import annotations

import pytest
from IPython.display import Image

from notebook_accel.events import Exited, Failed, Finished, Log, Metrics, Progress, RunInfo, RunOutcome, Started, Sink
from notebook_accel.widgets import Dashboard
from notebook_accel.widgets.snapshot import Summary


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


INFO = RunInfo(2, ("cpu", "cpu"), "gloo", "train")


def _dashboard(**kw: object) -> tuple[Dashboard, Clock, list[object]]:
    clock, shown = Clock(), []
    dash = Dashboard(clock=clock, display=shown.append, **kw)  # type: ignore[arg-type]
    dash.start(INFO)
    return dash, clock, shown


def test_is_a_sink_and_displays_its_widgets_once() -> None:
    dash, clock, shown = _dashboard()
    assert isinstance(dash, Sink)
    assert shown == [dash.root]
    assert "train" in dash.header.value and "starting" in dash.header.value
    dash.handle(Started(0, 4242, "cpu"))
    clock.now += 5
    dash.handle(Metrics(0, 1, {"train/loss": 1.0}, 0.0))
    assert shown == [dash.root]  # updated in place, never displayed again


def test_widget_values_follow_the_run() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Started(0, 4242, "cpu"))
    dash.handle(Started(1, 4343, "cpu"))
    for step in range(50):
        dash.handle(Metrics(0, step, {"train/loss": 1.0 / (step + 1), "eval/loss": 2.0 / (step + 1)}, 0.0))
        dash.handle(Progress(0, step + 1, 100, "epoch 0", 10.0 + step * 0.5))
    dash.handle(Log(0, "stdout", "hello from rank 0"))
    dash.handle(Log(1, "stdout", "hello from rank 1"))
    clock.now += 10
    dash.refresh()
    assert "4242" in dash.ranks.value and "running" in dash.ranks.value
    assert dash.bar.value == pytest.approx(0.5)
    assert dash.bar_label.value == "epoch 0: 50/100 · 2.00 it/s · ETA 25.0s"
    assert "train/loss" in dash.metrics.value and "0.02" in dash.metrics.value
    assert "hello from rank 0" in dash.log_main.value and "rank 1" not in dash.log_main.value
    assert "[1] hello from rank 1" in dash.log_all.value
    assert "10.0s" in dash.header.value
    assert bytes(dash.image.value).startswith(b"\x89PNG")
    line = dash.plot.lines["eval/loss"]
    assert list(line.get_xdata()) == list(range(50))
    assert list(line.get_ydata()) == [2.0 / (s + 1) for s in range(50)]


def test_refreshes_are_throttled_by_time() -> None:
    # plot_share=1.0: the redraw interval stays plot_interval unless one render takes more than 10 s
    dash, clock, _ = _dashboard(refresh_interval=0.25, plot_interval=1.0, plot_share=1.0)
    base_refreshes, base_redraws = dash.refreshes, dash.redraws
    for step in range(1000):
        dash.handle(Metrics(0, step, {"loss": float(step)}, 0.0))
    assert dash.refreshes == base_refreshes  # same instant: nothing redrawn
    clock.now += 0.3
    dash.handle(Metrics(0, 1000, {"loss": 0.0}, 0.0))
    assert dash.refreshes == base_refreshes + 1
    assert dash.redraws == base_redraws  # curves wait for plot_interval
    assert "1000" in dash.metrics.value  # the table is not throttled by the curves
    clock.now += 10.0
    dash.handle(Metrics(0, 1001, {"loss": 0.0}, 0.0))
    assert dash.redraws == base_redraws + 1
    xdata = list(dash.plot.lines["loss"].get_xdata())
    assert xdata[0] == 0 and xdata[-1] == 1001 and len(xdata) <= 2 * (200 + 2)  # downsampled to the budget
    clock.now += 5.0
    dash.handle(Log(0, "stdout", "no new metrics"))
    assert dash.redraws == base_redraws + 1  # nothing new to plot: no redraw


def test_a_slow_redraw_stretches_the_plot_interval() -> None:
    dash, clock, _ = _dashboard(plot_interval=0.5, plot_share=1e-9)
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    clock.now += 1.0
    dash.handle(Metrics(0, 1, {"loss": 1.0}, 0.0))
    redraws = dash.redraws
    clock.now += 100.0
    dash.handle(Metrics(0, 2, {"loss": 1.0}, 0.0))
    assert dash.redraws == redraws  # a redraw costs more than 1e-9 of 100 s


def test_status_events_refresh_at_once() -> None:
    dash, _, _ = _dashboard()
    dash.handle(Started(1, 77, "cpu"))
    assert "77" in dash.ranks.value
    dash.handle(Failed(1, "ValueError", "bad <input>", "Traceback (most recent call last):\nValueError: bad"))
    assert dash.error.layout.display == ""
    assert "rank 1 failed: ValueError: bad &lt;input&gt;" in dash.error.value
    assert "Traceback" in dash.error.value


def test_error_box_is_hidden_until_a_failure() -> None:
    dash, _, _ = _dashboard()
    assert dash.error.layout.display == "none" and dash.error.value == ""


def test_finish_draws_the_final_state_freezes_and_leaves_a_snapshot() -> None:
    dash, clock, shown = _dashboard()
    dash.handle(Started(0, 1, "cpu"))
    for step in range(10):
        dash.handle(Metrics(0, step, {"train/loss": 1.0 - step / 10}, 0.0))  # all in one throttle window
    dash.handle(Finished(0, 3))
    dash.finish(RunOutcome("finished", 12.0))
    assert len(dash.plot.lines["train/loss"].get_xdata()) == 10  # the last values are drawn
    assert "finished" in dash.header.value and "12.0s" in dash.header.value
    assert dash.bar.bar_style == "success"
    image, summary = shown[1:]
    assert isinstance(image, Image) and image.data == dash.png
    assert isinstance(summary, Summary)
    assert "train: finished in 12.0s" in repr(summary) and "train/loss = 0.1" in repr(summary)
    assert "<table>" in summary._repr_html_()
    refreshes, value = dash.refreshes, dash.metrics.value
    clock.now += 10
    dash.handle(Metrics(0, 99, {"train/loss": 9.0}, 0.0))
    dash.finish(RunOutcome("finished", 13.0))
    assert (dash.refreshes, dash.metrics.value, len(shown)) == (refreshes, value, 3)


def test_failure_snapshot_names_the_error_and_has_no_image_without_metrics() -> None:
    dash, _, shown = _dashboard()
    dash.handle(Failed(1, "ValueError", "bad", "tb"))
    dash.handle(Exited(0, -15, "SIGTERM"))
    dash.finish(RunOutcome("failed", 1.0, "rank 1 failed: ValueError: bad", (1,)))
    assert len(shown) == 2 and isinstance(shown[1], Summary)
    assert "error: rank 1 failed: ValueError: bad" in repr(shown[1])
    assert "ranks: 0=stopped, 1=failed" in repr(shown[1])
    assert dash.bar.bar_style == "danger"


def test_show_all_ranks_opens_the_all_ranks_tab() -> None:
    assert _dashboard()[0].logs.selected_index == 0
    assert _dashboard(show_all_ranks=True)[0].logs.selected_index == 1


def test_log_pane_shows_a_bounded_tail() -> None:
    dash, clock, _ = _dashboard(shown_log_lines=5)
    for i in range(100):
        dash.handle(Log(0, "stdout", f"line {i}"))
    clock.now += 1
    dash.refresh()
    assert "line 99" in dash.log_main.value and "line 94" not in dash.log_main.value


def test_a_drawing_error_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    dash, clock, _ = _dashboard()

    def boom(series: object) -> bytes:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(dash.plot, "render", boom)
    clock.now += 1000  # past any redraw interval, however slow the first render was
    with pytest.warns(RuntimeWarning, match="could not draw: RuntimeError: no fonts"):
        dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.finish(RunOutcome("finished", 1.0))
    assert dash.sink_errors[0] == "RuntimeError: no fonts"


def test_events_before_start_are_ignored() -> None:
    dash = Dashboard(display=lambda obj: None)
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.finish(RunOutcome("finished", 0.0))
    assert dash.state is None


def test_a_second_launch_gets_fresh_widgets_and_leaves_the_first_view_alone() -> None:
    dash, _, shown = _dashboard()
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.finish(RunOutcome("finished", 1.0))
    first_root, first_table = dash.root, dash.metrics.value
    dash.start(INFO)
    assert dash.root is not first_root and shown[-1] is dash.root
    assert "no metrics logged yet" in dash.metrics.value and "loss" in first_table
    dash.handle(Started(0, 1, "cpu"))
    assert not dash.frozen and "running" in dash.ranks.value


def test_a_timeout_without_a_failed_event_shows_the_outcome_error() -> None:
    dash, _, shown = _dashboard()
    assert dash.bar.bar_style == ""  # starting is not an error
    dash.handle(Started(0, 1, "cpu"))
    dash.finish(RunOutcome("timeout", 30.0, "the run exceeded timeout=30 s"))
    assert dash.error.layout.display == "" and "exceeded timeout=30 s" in dash.error.value
    assert dash.bar.bar_style == "danger"
    assert "train: timeout in 30.0s" in repr(shown[-1])


def test_an_interrupt_is_a_warning_not_an_error() -> None:
    dash, _, _ = _dashboard()
    dash.finish(RunOutcome("interrupted", 2.0, "KeyboardInterrupt"))
    assert dash.bar.bar_style == "warning" and "interrupted" in dash.header.value
