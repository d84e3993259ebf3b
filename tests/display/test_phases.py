"""launch_phase: the sink hears what the launch is doing, and its clock moves while a step blocks the thread."""

from __future__ import annotations

import time

from notebook_accel.events import Started
from notebook_accel.launcher import notebook_launcher
from notebook_accel.display.phases import launch_phase
from notebook_accel.display.sinks import GuardedSink
from tests.launcher.recording import RecordingSink


class PhaseSink(RecordingSink):
    """Records phases and ticks beside the events."""

    def __init__(self) -> None:
        super().__init__()
        self.phases: list[str] = []
        self.ticks: list[float] = []
        self.started_before_phase_ended: list[bool] = []

    def phase(self, text: str) -> None:
        self.phases.append(text)
        self.started_before_phase_ended.append(any(isinstance(e, Started) for e in self.events))

    def tick(self, now: float) -> None:
        self.ticks.append(now)


def test_a_ticking_phase_moves_the_clock_and_ends_with_an_empty_phase() -> None:
    sink = PhaseSink()
    with launch_phase(GuardedSink(sink), "importing", ticking=True):  # as the launcher calls it
        time.sleep(0.8)
    assert sink.phases == ["importing", ""]
    assert len(sink.ticks) >= 2  # every 0.25 s while the step blocked this thread
    count = len(sink.ticks)
    time.sleep(0.4)
    assert len(sink.ticks) == count  # the clock thread is gone


def test_a_sink_without_phase_is_left_alone() -> None:
    with launch_phase(GuardedSink(object()), "anything", ticking=True):
        pass


def hello() -> int:
    return 7


def test_the_launcher_says_it_is_starting_the_workers() -> None:
    sink = PhaseSink()
    assert notebook_launcher(hello, num_processes=2, dashboard=sink) == 7
    assert "starting 2 worker processes" in sink.phases and sink.phases[-1] == ""
    assert sink.started_before_phase_ended[sink.phases.index("starting 2 worker processes")] is False


class SlowReservation:
    """A cluster placement whose start blocks the kernel's thread as a Ray reservation does (nothing forked)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def start(self, envs: object, function: object, args: object, board: object) -> list[object]:
        time.sleep(self.seconds)
        return []


def test_the_clock_moves_while_a_cluster_reserves_the_workers() -> None:
    from types import SimpleNamespace

    from notebook_accel.cluster import RayCluster
    from notebook_accel.launcher.api import _start_workers
    from notebook_accel.launcher.run_resources import RunResources

    sink = PhaseSink()
    resources = RunResources()
    resources.envs = [SimpleNamespace(rank=0), SimpleNamespace(rank=1)]  # type: ignore[list-item]  # counted, numbered
    plan = SimpleNamespace(cluster=RayCluster(), function=hello, args=(), limit=None)
    with resources:
        _start_workers(plan, resources, SlowReservation(0.9), GuardedSink(sink), None, time.monotonic())  # type: ignore[arg-type]
    assert sink.phases == ["starting 2 worker processes on the Ray cluster (reserving, then starting)", ""]
    assert len(sink.ticks) >= 2, sink.ticks  # "starting · 0.0s" no longer stands still while Ray reserves
    count = len(sink.ticks)
    time.sleep(0.4)
    assert len(sink.ticks) == count  # the clock thread ended with the phase


def test_code_inside_a_phase_finds_it_says_more_and_nests() -> None:
    from notebook_accel.display.phases import current_phase

    sink = PhaseSink()
    assert current_phase() is None
    with launch_phase(GuardedSink(sink), "starting", deadline=12.5):  # as the launcher calls it
        phase = current_phase()
        assert phase is not None and phase.deadline == 12.5
        with phase.nested("queued: job 7 (Priority)", ticking=True) as queued:
            assert current_phase() is queued and queued.deadline == 12.5
            queued.show("queued: job 7 (Resources)")
        assert current_phase() is phase  # the enclosing phase's words come back
    assert current_phase() is None
    assert sink.phases == ["starting", "queued: job 7 (Priority)", "queued: job 7 (Resources)", "starting", ""]


def test_a_ticking_phase_inside_a_ticking_one_starts_no_second_clock() -> None:
    import threading

    def clocks() -> int:
        return sum(t.name == "notebook-accel launch clock" for t in threading.enumerate())

    sink = PhaseSink()
    with launch_phase(GuardedSink(sink), "starting", ticking=True) as phase:
        assert clocks() == 1
        with phase.nested("queued: job 7 (Resources)", ticking=True) as queued:
            assert queued.ticks and clocks() == 1  # two clocks would tick the sink from two threads at once
        assert clocks() == 1
    assert clocks() == 0
