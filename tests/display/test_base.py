"""BaseSink: the optional hooks do nothing, a batch reaches a sink that overrides only ``handle``, and only a sink
with a clock is ticked."""

from __future__ import annotations

from notebook_accel.display.base import BaseSink
from notebook_accel.display.console import ConsoleSink
from notebook_accel.display.sinks import GuardedSink
from notebook_accel.events import Event, Metrics, RunInfo, RunOutcome
from notebook_accel.metrics_batch import pack
from tests.launcher.recording import RecordingSink


class HandleOnly(BaseSink):
    """Overrides nothing but ``handle``."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def handle(self, event: Event) -> None:
        self.events.append(event)


def _posted() -> list[Metrics]:
    """Forty ``log`` calls with two shapes of values (two runs in the batch)."""
    return [Metrics(0, i, {"loss": i / 2} if i % 10 else {"loss": i / 2, "lr": 0.1}, float(i)) for i in range(40)]


def test_a_subclass_that_overrides_only_handle_receives_every_metric_of_a_batch() -> None:
    [batch] = pack(_posted())
    sink = HandleOnly()
    sink.handle_metrics(batch)
    assert sink.events == _posted()
    guarded = HandleOnly()
    GuardedSink(guarded).handle_metrics(batch)  # the guard hands it on whole: the subclass's default splits it
    assert guarded.events == _posted()


def test_the_optional_hooks_do_nothing_and_no_tick_is_wanted() -> None:
    sink = BaseSink()
    sink.start(RunInfo(1, ("cpu",), "gloo", "train"))
    sink.phase("starting")
    sink.tick(0.0)
    sink.attach_stop(lambda: None)
    sink.finish(RunOutcome("finished", 1.0))
    assert sink.needs_tick is False


def test_a_plain_user_sink_works_through_the_guard() -> None:
    inner = RecordingSink()  # start/handle/finish only, no BaseSink
    guarded = GuardedSink(inner)
    info = RunInfo(2, ("cpu", "cpu"), "gloo", "train")
    guarded.start(info)
    guarded.phase("starting")  # hooks it does not define are skipped
    guarded.tick(1.0)
    guarded.attach_stop(lambda: None)
    [batch] = pack(_posted())
    guarded.handle_metrics(batch)
    guarded.finish(RunOutcome("finished", 1.0))
    assert inner.info == info and inner.events == _posted() and inner.outcome == RunOutcome("finished", 1.0)
    assert guarded.needs_tick is False


def test_a_plain_sink_with_tick_is_ticked_and_its_hooks_are_called() -> None:
    class Ticking(RecordingSink):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, object]] = []

        def tick(self, now: float) -> None:
            self.calls.append(("tick", now))

        def phase(self, text: str) -> None:
            self.calls.append(("phase", text))

    inner = Ticking()
    guarded = GuardedSink(inner)
    assert guarded.needs_tick is True
    guarded.tick(2.0)
    guarded.phase("x")
    assert inner.calls == [("tick", 2.0), ("phase", "x")]


def test_a_console_run_is_not_ticked_and_the_dashboard_is() -> None:
    """The supervisor wakes every TICK_SECONDS only for a sink that needs it: never for the console."""
    console = ConsoleSink()
    assert console.needs_tick is False and GuardedSink(console).needs_tick is False
    from notebook_accel.widgets.dashboard import Dashboard

    dash = Dashboard(display=lambda obj: None)
    assert dash.needs_tick is True and GuardedSink(dash).needs_tick is True
