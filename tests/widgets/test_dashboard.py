"""Headless tests for notebook_accel.widgets.dashboard: widget values, throttling, ticking, the in-place result."""

from __future__ import annotations

import pytest

from notebook_accel.events import EngineReady, Exited, Failed, Finished, Log, Metrics, Progress, RunInfo, RunOutcome, Started, Sink
from notebook_accel.widgets import Dashboard
from notebook_accel.widgets import dashboard as dashboard_module
from notebook_accel.widgets import live_curves as live_curves_module
from notebook_accel.widgets.snapshot import StaticResult


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Shown(list):  # type: ignore[type-arg]
    """Records what was displayed; each display returns a handle recording its in-place updates."""

    def __init__(self) -> None:
        super().__init__()
        self.updates: list[object] = []

    def __call__(self, obj: object) -> "Shown":
        self.append(obj)
        return self

    def update(self, obj: object) -> None:
        self.updates.append(obj)


INFO = RunInfo(2, ("cpu", "cpu"), "gloo", "train")


def _dashboard(**kw: object) -> tuple[Dashboard, Clock, Shown]:
    clock, shown = Clock(), Shown()
    dash = Dashboard(clock=clock, display=shown, **{"live_after": 0.0, **kw})  # type: ignore[arg-type]
    dash.start(INFO)
    return dash, clock, shown


def test_is_a_sink_and_displays_its_widgets_once() -> None:
    dash, clock, shown = _dashboard()
    assert isinstance(dash, Sink)
    assert list(shown) == [dash.view.root]
    assert "train" in dash.parts["header"] and "starting" in dash.parts["header"]
    dash.handle(Started(0, 4242, "cpu"))
    clock.now += 5
    dash.handle(Metrics(0, 1, {"train/loss": 1.0}, 0.0))
    assert list(shown) == [dash.view.root] and shown.updates == []  # updated in place, never displayed again


def test_widget_values_follow_the_run() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Started(0, 4242, "cpu"))
    dash.handle(Started(1, 4343, "cpu"))
    for step in range(50):
        dash.handle(Metrics(0, step, {"train/loss": 1.0 / (step + 1), "eval/loss": 2.0 / (step + 1)}, 0.0))
        dash.handle(Progress(0, step + 1, 100, "train", 10.0 + step * 0.5, 1, "loader"))
    dash.handle(Log(0, "stdout", "hello from rank 0"))
    dash.handle(Log(1, "stdout", "hello from rank 1"))
    clock.now += 10
    dash.refresh()
    assert "4242" in dash.parts["ranks"] and "running" in dash.parts["ranks"]
    assert "progress" not in dash.parts["ranks"]  # only the main process reports: no column of empty cells
    assert dash.fractions["bar"] == pytest.approx(0.5) and "width:50.0%" in dash.view.top.value  # type: ignore[union-attr]
    # ETA 25 s at the last report, counted down by the 10 s since it arrived
    assert ">train · epoch index 0 · 50/100 · 2.00 it/s · ETA 15.0s<" in dash.parts["bar"]
    assert "train/loss" in dash.parts["metrics"] and "0.02" in dash.parts["metrics"]
    main_pane = dash.view.log_main.value  # type: ignore[union-attr]
    assert "hello from rank 0" in main_pane and "rank 1" not in main_pane
    assert "[1] hello from rank 1" in dash.view.log_all.value  # type: ignore[union-attr]
    assert "10.0s" in dash.parts["header"]
    assert dash.parts["curves"].count("<svg") == 1 and dash.parts["curves"].count("<polyline") == 2


def test_values_held_back_by_the_throttle_show_at_the_next_tick() -> None:
    dash, clock, _ = _dashboard(refresh_interval=0.25, plot_interval=0.25)  # the table follows the curves' pace
    dash.handle(Metrics(0, 1, {"loss": 1.0}, 0.0))
    clock.now += 0.1
    dash.handle(Metrics(0, 2, {"loss": 0.123}, 0.0))  # inside the throttle window: held back
    assert "0.123" not in dash.parts["metrics"]
    clock.now += 0.15
    dash.tick(clock.now)  # no event, but the launcher's wake-up shows it
    assert "0.123" in dash.parts["metrics"] and dash.ticks == 1


def test_the_clock_and_eta_move_without_events() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Started(0, 1, "cpu"))
    dash.handle(Progress(0, 10, 100, "train", 0.0, 1, "loader"))
    dash.handle(Progress(0, 20, 100, "train", 1.0, 1, "loader"))  # 10 it/s: ETA 8 s
    clock.now += 0.3
    dash.tick(clock.now)
    assert "0.3s" in dash.parts["header"] and "ETA 7.7s" in dash.parts["bar"]
    clock.now += 5.0
    dash.tick(clock.now)
    assert "5.3s" in dash.parts["header"] and "ETA 2.7s" in dash.parts["bar"]


def test_curves_follow_at_the_plot_interval_and_stay_within_the_budget() -> None:
    dash, clock, _ = _dashboard(refresh_interval=0.25, plot_interval=0.25, plot_share=1.0)
    base = dash.redraws
    for step in range(1000):
        dash.handle(Metrics(0, step, {"loss": float(step)}, 0.0))
    assert dash.redraws == base  # same instant: nothing redrawn
    clock.now += 0.3
    dash.tick(clock.now)
    assert dash.redraws == base + 1
    points = dash.parts["curves"].split('<polyline points="')[1].split('"')[0].split()
    assert len(points) <= 2 * (200 + 2)  # downsampled to the budget
    clock.now += 5.0
    dash.tick(clock.now)
    assert dash.redraws == base + 1  # nothing new to plot: no redraw


def test_a_single_point_draws_a_marker() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Metrics(0, 3, {"train/loss": 0.5}, 0.0))
    clock.now += 1
    dash.tick(clock.now)
    assert "<circle" in dash.parts["curves"] and "<polyline" not in dash.parts["curves"]


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
    assert "77" in dash.parts["ranks"]
    dash.handle(Failed(1, "ValueError", "bad <input>", "Traceback (most recent call last):\nValueError: bad"))
    assert "failed" in dash.parts["ranks"]


def test_error_box_is_hidden_until_a_failure() -> None:
    dash, _, _ = _dashboard()
    assert dash.parts["error"] == "" and "rank" not in dash.view.top.value.split("nacc-loop")[1]


def test_a_failure_waits_a_moment_for_the_launchers_verdict_then_shows() -> None:
    dash, clock, shown = _dashboard()
    dash.handle(Failed(0, "RuntimeError", "[gloo] Connection closed by peer", "Traceback ...\nRuntimeError: gloo"))
    assert dash.parts["error"] == "" and "gloo" not in dash.view.top.value.split("nacc-loop")[1]  # not torch's words first
    dash.finish(RunOutcome("failed", 1.0, "rank 0 called gather (Cell In[8], line 10) but rank 1 had already returned"))
    page = shown.updates[-1]._repr_mimebundle_()["text/html"]  # type: ignore[attr-defined]
    assert "rank 1 had already returned" in page  # the verdict is the first error the user reads
    dash, clock, _ = _dashboard()
    dash.handle(Failed(1, "ValueError", "bad <input>", "Traceback (most recent call last):\nValueError: bad"))
    clock.now += dashboard_module.ERROR_GRACE + 0.1  # no verdict yet (the run goes on): the failure shows
    dash.tick(clock.now)
    assert "rank 1 failed: ValueError: bad &lt;input&gt;" in dash.parts["error"] and "Traceback" in dash.view.top.value


def test_finish_replaces_the_live_view_in_place_and_closes_the_widgets() -> None:
    dash, clock, shown = _dashboard()
    dash.handle(Started(0, 1, "cpu"))
    for step in range(10):
        dash.handle(Metrics(0, step, {"train/loss": 1.0 - step / 10}, 0.0))  # all in one throttle window
    dash.handle(Log(0, "stdout", "epoch 1 done"))
    clock.now += 12
    dash.handle(Finished(0, 3))
    dash.handle(Finished(1))
    clock.now += 3  # the workers exit, the launcher tears down: the run's clock has stopped
    dash.tick(clock.now)
    assert "finishing" in dash.parts["header"] and "12.0s" in dash.parts["header"]
    dash.finish(RunOutcome("finished", 15.5))  # the launcher's count also has the set-up before the dashboard
    assert list(shown) == [dash.view.root]  # nothing displayed below: the live view itself was replaced
    (result,) = shown.updates
    assert isinstance(result, StaticResult)
    bundle = result._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert dash.image is not None and dash.image.count(b"<circle") == 1  # the curves, as drawn live
    assert 'src="data:image/svg+xml;base64,' in bundle["text/html"]
    assert "<details open><summary>output of rank 0" in bundle["text/html"] and "epoch 1 done" in bundle["text/html"]
    assert "train: finished in 12.0s" in bundle["text/plain"] and "train/loss = 0.1" in bundle["text/plain"]
    assert "<th" in bundle["text/html"] and ">finished</b>" in bundle["text/html"]  # the ranks' rows, as seen live
    dash2, clock2, shown2 = _dashboard()
    dash2.handle(Progress(0, 16, 16, "train", 1.0, 3, "loader"))
    dash2.finish(RunOutcome("finished", 1.0))
    final = shown2.updates[-1]._repr_mimebundle_()["text/html"]  # type: ignore[attr-defined]
    assert ">train · epoch index 2 · 16/16<" in final and "ETA" not in final  # where it stopped; no rate or ETA
    # closed, layouts too: no model left for the front end
    assert dash.view.root.comm is None and dash.view.body.comm is None and dash.view.body.layout.comm is None  # type: ignore[union-attr]
    dash.handle(Metrics(0, 99, {"train/loss": 9.0}, 0.0))
    dash.tick(clock.now + 10)
    dash.finish(RunOutcome("finished", 13.0))
    assert len(shown.updates) == 1


def test_failure_result_names_the_error_once_and_has_no_image_without_metrics() -> None:
    dash, _, shown = _dashboard()
    dash.handle(Failed(1, "ValueError", "bad", "Traceback ... tb-marker"))
    dash.handle(Exited(0, -15, "SIGTERM"))
    dash.finish(RunOutcome("failed", 1.0, "rank 1 failed: ValueError: bad", (1,)))
    (result,) = shown.updates
    page = result._repr_mimebundle_()["text/html"]
    assert page.count("ValueError: bad") == 1 and "tb-marker" not in page and "<img" not in page
    assert "error: rank 1 failed: ValueError: bad" in repr(result)
    assert "ranks: 0=stopped, 1=failed" in repr(result)


def test_without_a_display_handle_the_result_is_displayed_after() -> None:
    shown: list[object] = []
    dash = Dashboard(clock=Clock(), display=shown.append)
    dash.start(INFO)
    dash.finish(RunOutcome("finished", 1.0))
    assert len(shown) == 2 and isinstance(shown[1], StaticResult)


def test_show_all_ranks_opens_the_all_ranks_tab() -> None:
    assert _dashboard(show_all_ranks=True)[0].view.logs.selected_index == 1  # type: ignore[union-attr]


def test_one_process_has_one_pane_and_several_have_the_all_ranks_tab() -> None:
    clock, shown = Clock(), Shown()
    one = Dashboard(clock=clock, display=shown, live_after=0.0)
    one.start(RunInfo(1, ("cpu",), "gloo", "train"))
    assert one.view.logs is None and one.view.log_all is None
    assert one.view.root.children[-1] is one.view.log_main  # type: ignore[union-attr]
    dash, clock, _ = _dashboard()
    assert dash.view.logs is not None and dash.view.logs.selected_index == 0
    assert dash.view.root.children[-1] is dash.view.logs  # type: ignore[union-attr]
    dash.handle(Log(1, "stdout", "from rank 1"))
    clock.now += 1
    dash.tick(clock.now)
    assert "[1] from rank 1" in dash.view.log_all.value  # type: ignore[union-attr]


def test_log_pane_shows_a_bounded_tail() -> None:
    dash, clock, _ = _dashboard(shown_log_lines=5)
    for i in range(100):
        dash.handle(Log(0, "stdout", f"line {i}"))
    clock.now += 1
    dash.refresh()
    assert "line 99" in dash.view.log_main.value and "line 94" not in dash.view.log_main.value


def test_a_drawing_error_is_recorded_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    dash, clock, _ = _dashboard()

    def boom(series: object, cache: object = None) -> str:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(live_curves_module, "curves_svg", boom)
    clock.now += 1000  # past any redraw interval
    with pytest.warns(RuntimeWarning, match="could not draw: RuntimeError: no fonts"):
        dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.finish(RunOutcome("finished", 1.0))
    assert dash.sink_errors[0] == "RuntimeError: no fonts"


def test_events_before_start_are_ignored() -> None:
    dash = Dashboard(display=lambda obj: None)
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.tick(0.0)
    dash.finish(RunOutcome("finished", 0.0))
    assert dash.state is None


def test_a_second_launch_gets_fresh_widgets() -> None:
    dash, _, shown = _dashboard()
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    dash.finish(RunOutcome("finished", 1.0))
    first_root = dash.view.root
    dash.start(INFO)
    assert dash.view.root is not first_root and shown[-1] is dash.view.root
    assert "no metrics logged yet" in dash.parts["metrics"]
    dash.handle(Started(0, 1, "cpu"))
    assert not dash.frozen and "running" in dash.parts["ranks"]


def test_a_timeout_without_a_failed_event_shows_the_outcome_error() -> None:
    dash, clock, shown = _dashboard()
    dash.handle(Started(0, 1, "cpu"))
    clock.now += 30
    dash.finish(RunOutcome("timeout", 30.0, "the run exceeded timeout=30 s"))
    page = shown.updates[-1]._repr_mimebundle_()["text/html"]  # type: ignore[attr-defined]
    assert "train: timeout in 30.0s" in page and page.count("exceeded timeout=30 s") == 1


def test_the_header_names_the_engine_as_soon_as_the_main_process_reports_it() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Metrics(0, 1, {"train/loss": 1.0}, 0.0))  # a redraw: the next one is throttled
    dash.handle(EngineReady(0, "FSDP FULL_SHARD"))  # no clock advance: urgent, shown at once
    assert "FSDP FULL_SHARD" in dash.parts["header"]
    dash.finish(RunOutcome("finished", 1.0))
    assert "FSDP FULL_SHARD" in dash.parts["header"]


def test_one_clock_and_one_vocabulary_from_the_first_frame_to_the_result() -> None:
    dash, clock, shown = _dashboard()
    dash.phase("starting 2 worker processes")
    assert "starting" in dash.parts["header"] and "starting 2 worker processes" in dash.parts["header"]
    assert "waiting for the workers" in dash.parts["bar"]
    dash.handle(Started(0, 1, "cpu"))
    dash.handle(Started(1, 2, "cpu"))
    dash.phase("")
    clock.now += 4.25
    dash.tick(clock.now)
    assert "running" in dash.parts["header"] and "4.2s" in dash.parts["header"]
    assert "worker processes" not in dash.parts["header"]
    clock.now += 1
    dash.finish(RunOutcome("interrupted", 9.0, "interrupted"))  # the stop button, or run.stop()
    page = shown.updates[-1]._repr_mimebundle_()  # type: ignore[attr-defined]
    assert page["text/plain"].startswith("train: stopped in 5.2s")  # run.status's word, the live clock's time
    assert "interrupted" not in page["text/html"] and "#b42318" not in page["text/html"]  # not an error, not red
    assert "1=stopped" in page["text/plain"]


def test_the_layout_has_its_places_from_the_first_frame() -> None:
    dash, clock, _ = _dashboard()
    body = dash.view.body.value  # type: ignore[union-attr]
    assert 'class="nacc-curves" style="min-height:184px;' in body and "after the first accelerator.log" in body
    dash.handle(Metrics(0, 0, {"loss": 1.0}, 0.0))
    clock.now += 1
    dash.tick(clock.now)  # the first metric draws the curves in the row's room
    assert 'class="nacc-curves" style="min-height:184px;' in dash.view.body.value  # type: ignore[union-attr]
    assert "<svg" in dash.view.body.value  # type: ignore[union-attr]
    assert 'min-width:4.2em;font-variant-numeric:tabular-nums' in dash.parts["header"]  # a clock of fixed width
    run_row = 'class="nacc-run" style="display:flex;align-items:center;min-height:24px"'
    assert run_row in dash.view.top.value  # type: ignore[union-attr]
    assert dash.view.stop_button is None  # a background run's only
    dash.attach_stop(lambda: None)
    assert dash.view.stop_button is not None and dash.view.stop_button.layout.flex == "0 0 auto"
    assert dash.view.top.layout.flex == "1 1 auto" and dash.view.top.layout is not dash.view.body.layout  # type: ignore[union-attr]
    assert dash.view.root.children[0].children == (dash.view.top, dash.view.stop_button)  # type: ignore[union-attr]


def test_the_live_view_is_a_handful_of_widgets() -> None:
    """Each widget (and each layout or style of one) is a model the launch opens with a message: ~46 before."""
    dash, _, _ = _dashboard()
    assert dash.view is not None and len(dash.view.models()) <= 10


def test_a_run_of_unknown_length_shows_its_label_without_an_empty_bar() -> None:
    dash, clock, _ = _dashboard()
    dash.handle(Started(0, 1, "cpu"))
    dash.handle(Progress(0, 5, 16, "train", 1.0, 1, "loader"))
    clock.now += 1
    dash.tick(clock.now)
    assert "run · epoch index 0 · 5 batches" in dash.parts["overall"]
    assert dash.fractions["overall"] is None and "260px" not in dash.parts["overall"]  # no invisible bar


def test_the_curves_stay_in_one_row_and_the_result_draws_them_as_the_live_view_did() -> None:
    dash, clock, shown = _dashboard()
    for step in range(5):
        dash.handle(Metrics(0, step, {"train/loss": 1.0 / (step + 1), "lr": 0.1, "acc": 0.5, "grad_norm": 2.0}, 0.0))
    clock.now += 1
    dash.tick(clock.now)
    assert dash.parts["curves"].count("<svg") == 4 and "flex-wrap:nowrap" in dash.parts["curves"]
    dash.finish(RunOutcome("finished", 1.0))
    assert dash.image is not None and dash.image.count(b'<svg x="') == 4  # 3 a row: 2 rows in one image
    assert b'height="366"' in dash.image.split(b">", 1)[0]


def test_the_output_box_has_its_room_before_the_first_line() -> None:
    dash, clock, _ = _dashboard()
    assert dash.view is not None and dash.view.pane.layout.display is None
    assert "height:180px" in dash.view.log_main.value and "no output yet" in dash.view.log_main.value
    dash.handle(Log(1, "stdout", "hello from rank 1\n"))
    clock.now += 1
    dash.tick(clock.now)
    assert "height:180px" in dash.view.log_main.value and "no output yet" not in dash.view.log_all.value  # type: ignore[union-attr]


def test_the_ranks_table_has_a_node_column_live_and_in_the_result_only_for_a_run_on_several_machines() -> None:
    local, _, _ = _dashboard()
    local.handle(Started(0, 1, "cpu"))
    local.handle(Started(1, 2, "cpu"))
    local.refresh()
    assert ">node<" not in local.parts["ranks"] and ">device</th>" in local.parts["ranks"]
    dash, clock, shown = _dashboard()
    dash.handle(Started(0, 1, "cuda:0", node="10.0.0.1"))
    dash.handle(Started(1, 2, "cuda:0", node="10.0.0.2"))
    dash.refresh()
    assert ">node</th>" in dash.parts["ranks"] and ">10.0.0.2</td>" in dash.parts["ranks"]
    dash.handle(Finished(0))
    dash.handle(Finished(1))
    dash.finish(RunOutcome("finished", 1.0))
    bundle = shown.updates[-1]._repr_mimebundle_()  # type: ignore[attr-defined]
    assert ">10.0.0.1</td>" in bundle["text/html"] and "1=finished on 10.0.0.2" in bundle["text/plain"]
