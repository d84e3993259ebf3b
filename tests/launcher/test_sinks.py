"""Choosing the sink, and a faulty sink not breaking a run."""

from __future__ import annotations

import pytest

from notebook_accel.errors import LaunchError
from notebook_accel.events import Event, RunInfo, RunOutcome
from notebook_accel.launcher import notebook_launcher, sinks
from notebook_accel.launcher.console import ConsoleSink
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
