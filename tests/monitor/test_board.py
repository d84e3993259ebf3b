"""The system figures shared with the workers for their trackers (``Accelerator(log_system_metrics=True)``)."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.events import Metrics, RankSystem, StepTimes, SystemSample
from notebook_accel.monitor import board as board_module
from notebook_accel.monitor.board import SystemBoard, tracker_board, use_in_worker
from notebook_accel.plugins import ConfigurationError
from tests.launcher.recording import RecordingSink
from tests.monitor import workers

GIB = 1024**3


def _lines(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]


def test_a_forked_process_reads_what_the_kernel_writes_after_the_fork() -> None:
    board = SystemBoard([0, 1])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: waits for the kernel's write, then reads the shared map
        os.close(write)
        os.read(read, 1)
        values = board.fresh()
        os._exit(0 if values.get("system/rank1/gpu_utilization") == 77.0 else 1)
    os.close(read)
    board.write(SystemSample(1.0, (RankSystem(1, 5.0, GIB, GIB, 77.0, GIB, 2 * GIB, GIB, 60.0, 200.0),), GIB, 4 * GIB))
    os.write(write, b"x")
    os.close(write)
    assert os.waitpid(pid, 0)[1] == 0
    board.close()


def test_step_reports_become_fractions_and_unknown_values_are_left_out() -> None:
    board = SystemBoard([0])
    assert board.fresh() == {}
    board.write(StepTimes(0, 10, 2.0, 0.5, 1.0, 0.5, 0.25, 0.2))
    values = board.fresh()
    assert values == pytest.approx({"system/rank0/step_ms": 200.0, "system/rank0/step_data_frac": 0.25,
                                    "system/rank0/step_compute_frac": 0.375, "system/rank0/step_comm_frac": 0.125,
                                    "system/rank0/step_optimizer_frac": 0.1, "system/rank0/step_other_frac": 0.15})
    board.write(StepTimes(0, 10, 1.0, 0.5, 0.25, 0.1, 0.0, 0.05))
    assert board.fresh() == {}  # less than a second since the last values
    board.write(StepTimes(3, 10, 2.0, 0.5, 1.0, 0.5, 0.25, 0.2))  # a rank of another node: no slot, ignored
    values = board.fresh(every=0.0)
    assert values["system/rank0/step_ms"] == 100.0 and "system/rank3/step_ms" not in values
    board.close()


def test_a_worker_reads_the_board_it_was_handed() -> None:
    board = SystemBoard([0])
    use_in_worker(board)
    try:
        assert tracker_board(True, True) is board and tracker_board(True, False) is None
    finally:
        use_in_worker(None)
        board.close()


def test_asking_outside_a_launch_warns_that_nothing_is_logged() -> None:
    with pytest.warns(RuntimeWarning, match="no system/... values are logged; start the run with notebook_launcher"):
        assert tracker_board(True, True) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tracker_board(False, True) is None and tracker_board(True, False) is None


def test_the_option_must_be_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="log_system_metrics"):
        Accelerator(log_system_metrics="yes")  # type: ignore[arg-type]


@pytest.mark.timeout(180)
def test_a_two_process_run_logs_system_values_to_its_jsonl_tracker_only_when_asked(tmp_path: Path) -> None:
    sink = RecordingSink()
    began = time.monotonic()
    steps = notebook_launcher(workers.log_system, (str(tmp_path / "on"), True), num_processes=2, dashboard=sink)
    seconds = time.monotonic() - began
    assert board_module._worker_board is None  # the kernel keeps no board: only its workers were handed one
    live = [k for event in sink.of_type(Metrics) for k in event.values]  # type: ignore[attr-defined]
    assert "loss" in live and not [k for k in live if k.startswith("system/")]  # the dashboard has its own panel
    lines = _lines(tmp_path / "on")
    system = [line["values"] for line in lines if any(k.startswith("system/") for k in line["values"])]  # type: ignore[union-attr]
    assert 2 <= len(system) <= seconds + 1, (len(system), seconds)  # at most once a second, not at every step
    assert len(lines) - len(system) == steps
    last: dict[str, float] = {k: v for values in system for k, v in values.items()}  # type: ignore[union-attr]
    for rank in (0, 1):
        assert last[f"system/rank{rank}/cpu_percent"] > 0 and last[f"system/rank{rank}/memory_gib"] > 0.01
        assert 0 < last[f"system/rank{rank}/step_ms"] < 1000
        fractions = sum(last[f"system/rank{rank}/step_{part}_frac"] for part in ("data", "compute", "comm", "optimizer",
                                                                               "other"))
        assert fractions == pytest.approx(1.0, abs=0.1)
    assert last["system/machine/available_gib"] > 0
    assert not [k for k in last if "gpu" in k]  # a CPU run has no GPU figures
    notebook_launcher(workers.log_system, (str(tmp_path / "off"), False), num_processes=2)
    assert not [line for line in _lines(tmp_path / "off") if any(k.startswith("system/") for k in line["values"])]  # type: ignore[union-attr]
