"""A faulty sink not breaking a run, and a plain sink object adapted by the guard."""

from __future__ import annotations

import pytest

from notebook_accel.events import Event, RunInfo, RunOutcome
from notebook_accel.launcher import notebook_launcher
from notebook_accel.display import sinks
from tests.launcher.recording import RecordingSink


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
