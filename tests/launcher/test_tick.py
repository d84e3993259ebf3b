"""The supervisor's periodic wake-up: a sink with ``tick`` is called while the workers are silent."""

from __future__ import annotations

import time

import pytest

from notebook_accel.events import TICK_SECONDS, RunInfo, Sink
from notebook_accel.launcher import notebook_launcher
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(60)


class TickingSink(RecordingSink):
    """Records the times ``tick`` was called."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[float] = []

    def tick(self, now: float) -> None:
        self.ticks.append(now)


def quiet_for_a_second() -> int:
    time.sleep(1.2)
    return 7


def test_a_silent_run_still_ticks_the_sink_every_tick_interval() -> None:
    sink = TickingSink()
    assert notebook_launcher(quiet_for_a_second, num_processes=2, dashboard=sink) == 7
    # ~1.2 s of silence at one tick per TICK_SECONDS: a sink ticked only on events would see none. No bound on the
    # gaps between ticks: on a loaded 2-core machine the kernel's thread can be descheduled for longer than a tick.
    assert len(sink.ticks) >= 3
    assert sink.ticks == sorted(sink.ticks)
    assert sink.outcome is not None and sink.outcome.status == "finished"


def test_tick_is_optional_for_a_sink() -> None:
    assert isinstance(RecordingSink(), Sink) and not hasattr(RecordingSink(), "tick")
    assert notebook_launcher(quiet_for_a_second, num_processes=1, dashboard=RecordingSink()) == 7


class StartTimeSink(TickingSink):
    """Also records when the run was shown (``start``), on the launcher's clock."""

    def start(self, info: RunInfo) -> None:
        self.shown_at = time.monotonic()
        super().start(info)


def test_the_first_tick_comes_one_interval_after_the_start_not_at_once() -> None:
    # A tick at once would update the display (and flush the kernel's streams) while a short run's workers start.
    assert notebook_launcher(quiet_for_a_second, num_processes=2, dashboard=False) == 7  # warm: no warm-up ticks
    sink = StartTimeSink()
    assert notebook_launcher(quiet_for_a_second, num_processes=2, dashboard=sink) == 7
    assert sink.ticks and sink.ticks[0] >= sink.shown_at + TICK_SECONDS - 0.05  # the launch began just before
