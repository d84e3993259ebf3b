"""Tests for notebook_accel.widgets.progress_model and its views: the current loop, the whole run, the fallback."""

from __future__ import annotations

import pytest

from notebook_accel.events import Log, Metrics, Progress, RunInfo
from notebook_accel.widgets import views
from notebook_accel.widgets.run_model import RunState


def _state() -> RunState:
    return RunState(RunInfo(2, ("cpu", "cpu"), "gloo", "train"))


def _loader(n: int, total: int, name: str, t: float, epoch: int) -> Progress:
    return Progress(0, n, total, name, t, epoch, "loader")


def test_current_loop_is_named_and_numbered_as_the_user_counts() -> None:
    s = _state()
    s.apply(_loader(9, 23, "train", 1.0, 1))
    assert views.progress_text(s)[1].startswith("train · epoch index 0 · 9/23")
    s.apply(_loader(3, 5, "eval", 2.0, 1))
    assert views.progress_text(s)[1].startswith("eval · epoch index 0 · 3/5")
    # the overall bar still follows training, not the eval loader that ran last
    assert views.overall_text(s)[1] == "run · epoch index 0 · 9 batches"


def test_overall_progress_spans_epochs_when_a_progress_loop_gives_their_number() -> None:
    s = _state()
    s.apply(Progress(0, 0, 3, "epochs", 0.0))  # for epoch in progress(range(3)): ...
    s.apply(_loader(10, 10, "train", 1.0, 1))
    s.apply(Progress(0, 1, 3, "epochs", 1.0))
    s.apply(_loader(2, 10, "train", 1.2, 2))
    fraction, label = views.overall_text(s, now=0.0)
    assert fraction == pytest.approx(12 / 30)
    assert label.startswith("run · epoch index 1 of 3 · 12/30 batches · ETA")
    assert views.progress_text(s)[1].startswith("train · epoch index 1 · 2/10")  # the epoch loop is not "current"


def test_without_any_loop_the_logged_steps_are_the_progress() -> None:
    s = _state()
    s.apply(Metrics(0, 10, {"loss": 1.0}, 100.0), now=0.0)
    s.apply(Metrics(0, 30, {"loss": 0.5}, 102.0), now=2.0)
    s.apply(Metrics(1, 99, {"loss": 0.5}, 102.0), now=2.0)  # other ranks do not count
    assert views.progress_text(s) == (0.0, "step 30 · 10.00 steps/s")
    assert views.overall_text(s) == (None, "")


def test_before_anything_reports_the_label_says_how_to_get_progress() -> None:
    state = _state()
    assert views.progress_text(state)[1] == "waiting for the workers (imports, rendezvous, engine setup)"
    state.apply(Log(0, "stdout", "loading data"))  # a worker is up, but no loop reports
    assert "prepared DataLoader" in views.progress_text(state)[1]
