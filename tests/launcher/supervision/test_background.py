"""notebook_launcher(block=False): the handle, its outcomes, one run at a time, and nothing left behind."""

from __future__ import annotations

import asyncio
import os
import re
import time

import pytest

from notebook_accel import Accelerator
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import LaunchTimeoutError, WorkerError, notebook_launcher
from notebook_accel.launcher.supervision.background import BackgroundRun, RunStoppedError
from tests.helpers import child_pids
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


def train(steps: int, pause: float) -> str:
    accelerator = Accelerator()
    for step in range(steps):
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
        print(f"step {step} on rank {accelerator.process_index}", flush=True)
        time.sleep(pause)
    return "trained"


def fail_on_rank1() -> None:
    if int(os.environ["RANK"]) == 1:
        raise ValueError("rank one failed in the background")
    time.sleep(30)


def test_returns_at_once_and_keeps_the_results() -> None:
    sink = RecordingSink()
    started = time.monotonic()
    run = notebook_launcher(train, args=(15, 0.1), num_processes=2, block=False, dashboard=sink)
    assert isinstance(run, BackgroundRun)
    assert run.status == "running" and not run.done
    assert time.monotonic() - started < 30, "the call waited for the run (hang guard)"
    assert run.result(timeout=60) == "trained"
    assert run.status == "finished" and run.done and run.wait(0)
    assert [row["step"] for row in run.metrics] == list(range(15))
    assert run.metrics[-1]["loss"] == pytest.approx(1 / 15)
    assert "step 14 on rank 1" in run.output[1]
    assert sink.outcome is not None and sink.outcome.status == "finished"
    assert child_pids() == []


def test_result_waits_with_a_timeout_and_the_run_goes_on() -> None:
    run = notebook_launcher(train, args=(20, 0.1), num_processes=2, block=False, dashboard=RecordingSink())
    with pytest.raises(TimeoutError, match="it goes on"):
        run.result(timeout=0.1)
    assert run.status == "running"
    assert run.result(timeout=60) == "trained"


def test_stop_ends_the_run_and_result_says_so(shell: object) -> None:
    sink = RecordingSink()
    run = notebook_launcher(train, args=(10_000, 0.05), num_processes=2, block=False, dashboard=sink)
    deadline = time.monotonic() + 60
    while not run.metrics and time.monotonic() < deadline:
        time.sleep(0.05)
    run.stop()
    assert run.status == "stopped"
    with pytest.raises(RunStoppedError, match="stopped with stop()") as caught:
        run.result()
    # what the cell shows leaves the library's own frames out, as for every other error: only this test's line
    shown = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(caught.value._render_traceback_()))  # type: ignore[attr-defined]
    assert "run.result()" in shown and "stopped with stop()" in shown, shown
    assert "notebook_accel" not in shown and "concurrent" not in shown, shown
    assert sink.outcome is not None and sink.outcome.status == "interrupted"
    assert child_pids() == []
    run.stop()  # idempotent


def test_failure_and_timeout_come_through_the_handle() -> None:
    failed = notebook_launcher(fail_on_rank1, num_processes=2, block=False, dashboard=RecordingSink())
    with pytest.raises(WorkerError, match="rank one failed in the background"):
        failed.result(timeout=60)
    assert failed.status == "failed"
    slow = notebook_launcher(train, args=(10_000, 0.05), num_processes=2, block=False, timeout=1.0,
                             dashboard=RecordingSink())
    with pytest.raises(LaunchTimeoutError):
        slow.result(timeout=60)
    assert slow.status == "timeout"
    assert child_pids() == []


def test_one_run_at_a_time_unless_concurrent() -> None:
    first = notebook_launcher(train, args=(10_000, 0.05), num_processes=2, block=False, dashboard=RecordingSink())
    try:
        with pytest.raises(LaunchError, match="a background run is still going"):
            notebook_launcher(train, args=(1, 0.0), num_processes=2, dashboard=RecordingSink())
        with pytest.raises(LaunchError, match="a background run is still going"):
            notebook_launcher(train, args=(1, 0.0), num_processes=2, block=False, dashboard=RecordingSink())
        second = notebook_launcher(train, args=(2, 0.0), num_processes=2, block=False, concurrent=True,
                                   dashboard=RecordingSink())
        assert second.result(timeout=60) == "trained"
        assert first.status == "running"
    finally:
        first.stop()
    assert notebook_launcher(train, args=(1, 0.0), num_processes=2, dashboard=RecordingSink()) == "trained"


def test_await_in_an_event_loop_does_not_block_it() -> None:
    async def main() -> tuple[str, int]:
        run = notebook_launcher(train, args=(5, 0.1), num_processes=2, block=False, dashboard=RecordingSink())
        ticks = 0

        async def count() -> None:
            nonlocal ticks
            while not run.done:
                ticks += 1
                await asyncio.sleep(0.01)

        counter = asyncio.ensure_future(count())
        value = await run
        await counter
        return value, ticks

    value, ticks = asyncio.run(main())
    assert value == "trained" and ticks > 5


def test_block_false_with_one_process_forks_and_restarts_are_refused() -> None:
    run = notebook_launcher(os.getpid, num_processes=1, block=False, dashboard=RecordingSink())
    assert run.result(timeout=60) != os.getpid()
    with pytest.raises(LaunchError, match="max_restarts=1 with block=False"):
        notebook_launcher(train, args=(1, 0.0), num_processes=2, block=False, max_restarts=1)


def test_the_dashboard_stop_button_stops_the_run() -> None:
    from notebook_accel.widgets import Dashboard

    dashboard = Dashboard(display=lambda obj: None, live_after=0.0)
    assert dashboard.view is None  # no widget before the launch
    run = notebook_launcher(train, args=(10_000, 0.05), num_processes=2, block=False, dashboard=dashboard)
    assert dashboard.view.stop_button is not None and dashboard.view.stop_button.layout.display is None
    deadline = time.monotonic() + 60
    while not run.metrics and time.monotonic() < deadline:
        time.sleep(0.05)
    dashboard.view.stop_button.click()
    assert run.wait(timeout=60) and run.status == "stopped"
    assert child_pids() == []


def test_the_displayed_handle_follows_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: list[dict[str, str]] = []
    updates: list[dict[str, str]] = []

    class Handle:
        def update(self, bundle: dict[str, str], raw: bool) -> None:
            updates.append(bundle)

    def display(bundle: dict[str, str], raw: bool, display_id: bool) -> Handle:
        shown.append(bundle)
        return Handle()

    monkeypatch.setattr(IPython.display, "display", display)
    run = notebook_launcher(train, args=(8, 0.1), num_processes=2, block=False, dashboard=RecordingSink())
    run._ipython_display_()  # what a cell ending in `run` does
    assert shown[0]["text/plain"] == "train: running in the background (run.wait(), run.result(), run.stop())"
    assert "since start" not in shown[0]["text/html"]  # no clock that a saved notebook would keep stale
    run.wait(60)
    assert len(updates) == 1
    assert updates[0]["text/plain"] == "train: finished (background run; run.result() has the outcome)"
    assert "running" not in updates[0]["text/html"]
    run._ipython_display_()  # shown after the end: the final line at once, nothing left to update
    assert shown[1]["text/plain"] == updates[0]["text/plain"] and len(updates) == 1
