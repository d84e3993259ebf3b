"""Every logged value reaches the kernel in a real 2-process run, in a few batches: the dashboard's series, a sink
that takes only events, ``run.metrics`` of a background run, and the worker's own ``metrics.jsonl``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from notebook_accel import Accelerator
from notebook_accel.events import Metrics
from notebook_accel.launcher import notebook_launcher
from notebook_accel.metrics_batch import MetricsBatch
from notebook_accel.widgets.dashboard import Dashboard
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)
CALLS = 3_000


def log_fast(folder: str) -> int:
    accelerator = Accelerator(cpu=True, log_with="jsonl", project_dir=folder)
    accelerator.init_trackers("run")
    for step in range(CALLS):
        accelerator.log({"train/loss": 1.0 / (step + 1), "lr": 1e-3}, step=step)
    accelerator.end_training()
    return int(os.environ["RANK"])


class CountingDashboard(Dashboard):
    """A dashboard that counts the batches and the log calls it was given."""

    def __init__(self) -> None:
        super().__init__(display=lambda obj: None)
        self.batches = 0
        self.calls = 0

    def handle_metrics(self, batch: MetricsBatch) -> None:
        self.batches += 1
        self.calls += len(batch)
        super().handle_metrics(batch)


def _jsonl_lines(folder: Path) -> int:
    return sum(1 for line in (folder / "run" / "metrics.jsonl").read_text().splitlines() if json.loads(line))


def test_every_value_reaches_the_dashboard_series_in_batches(tmp_path: Path) -> None:
    dash = CountingDashboard()
    assert notebook_launcher(log_fast, args=(str(tmp_path),), num_processes=2, dashboard=dash) == 0
    assert dash.calls == CALLS and dash.batches < CALLS / 10
    state = dash.state
    assert state is not None
    assert state.series["train/loss"].count == state.series["lr"].count == CALLS
    assert state.latest["train/loss"] == (CALLS - 1, pytest.approx(1 / CALLS))
    assert _jsonl_lines(tmp_path) == CALLS


def test_a_sink_that_takes_only_events_and_run_metrics_get_every_log_call(tmp_path: Path) -> None:
    sink = RecordingSink()
    run = notebook_launcher(log_fast, args=(str(tmp_path),), num_processes=2, dashboard=sink, block=False)
    assert run.result(timeout=100) == 0
    got = sink.of_type(Metrics)
    assert [e.step for e in got] == list(range(CALLS))  # type: ignore[union-attr]
    assert not sink.of_type(MetricsBatch)
    assert [row["step"] for row in run.metrics] == list(range(CALLS))
    assert run.metrics[-1]["train/loss"] == pytest.approx(1 / CALLS)
    assert _jsonl_lines(tmp_path) == CALLS
