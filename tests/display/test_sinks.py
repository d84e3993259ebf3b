"""Choosing the sink, and a faulty sink not breaking a run."""

from __future__ import annotations

import pytest

from notebook_accel.errors import LaunchError
from notebook_accel.events import Event, RunInfo, RunOutcome
from notebook_accel.launcher import notebook_launcher
from notebook_accel.display import sinks
from notebook_accel.display.console import ConsoleSink
from tests.launcher.recording import RecordingSink


def test_false_and_none_outside_a_kernel_give_the_console() -> None:
    assert not sinks.in_jupyter_kernel()
    assert isinstance(sinks.choose_sink(False, False), ConsoleSink)
    sink = sinks.choose_sink(None, True, main_rank=2)
    assert isinstance(sink, ConsoleSink) and sink.show_all_ranks and sink.main_rank == 2


def test_a_sink_object_is_used_as_is() -> None:
    sink = RecordingSink()
    assert sinks.choose_sink(sink, False) is sink


def test_anything_else_is_refused() -> None:
    with pytest.raises(LaunchError, match="dashboard='yes'"):
        sinks.choose_sink("yes", False)


def _no_dashboard(show_all_ranks: bool) -> None:
    raise ImportError("No module named 'ipywidgets'")


def test_dashboard_true_without_ipywidgets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sinks, "_dashboard", _no_dashboard)
    with pytest.raises(LaunchError, match="pip install ipywidgets"):
        sinks.choose_sink(True, False)


def test_auto_in_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sinks, "in_jupyter_kernel", lambda: True)
    made = object()
    monkeypatch.setattr(sinks, "_dashboard", lambda show_all_ranks: made)
    assert sinks.choose_sink(None, False) is made
    monkeypatch.setattr(sinks, "_dashboard", _no_dashboard)
    assert isinstance(sinks.choose_sink(None, False), ConsoleSink)


class BrokenSink:
    def start(self, info: RunInfo) -> None:
        pass

    def handle(self, event: Event) -> None:
        raise RuntimeError("display bug")

    def finish(self, outcome: RunOutcome) -> None:
        raise AssertionError("never called after the sink was dropped")


def two() -> int:
    return 2


def test_a_broken_sink_is_reported_once_and_the_run_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert notebook_launcher(two, num_processes=2, dashboard=BrokenSink()) == 2
    err = capsys.readouterr().err
    assert err.count("BrokenSink.handle raised RuntimeError: display bug") == 1


def test_a_sink_without_handle_metrics_gets_every_posted_metrics_event_through_the_guard() -> None:
    from notebook_accel.events import Metrics
    from notebook_accel.metrics_batch import pack

    posted = [Metrics(0, i, {"loss": float(i)}, 0.0) for i in range(50)]
    [batch] = pack(posted)
    inner = RecordingSink()
    sinks.GuardedSink(inner).handle_metrics(batch)
    assert inner.events == posted


def test_a_failing_handle_metrics_drops_the_sink_once(capsys: pytest.CaptureFixture[str]) -> None:
    from notebook_accel.events import Metrics
    from notebook_accel.metrics_batch import MetricsBatch, pack

    class Broken(RecordingSink):
        def handle_metrics(self, batch: MetricsBatch) -> None:
            raise RuntimeError("cannot draw")

    [batch] = pack([Metrics(0, i, {"loss": 1.0}, 0.0) for i in range(3)])
    guarded = sinks.GuardedSink(Broken())
    guarded.handle_metrics(batch)
    guarded.handle_metrics(batch)
    assert capsys.readouterr().err.count("Broken.handle_metrics raised RuntimeError: cannot draw") == 1
