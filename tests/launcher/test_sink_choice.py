"""Choosing the sink: the console outside a kernel, the dashboard inside one (when ipywidgets imports), or the
user's own object."""

from __future__ import annotations

import pytest

from notebook_accel.display.console import ConsoleSink
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import sink_choice as sinks
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
