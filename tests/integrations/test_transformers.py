"""transformers' ``Trainer`` inside ``notebook_launcher``: one process group over every rank, and its logs and
position on the dashboard through :class:`DashboardCallback`, added without a line of user code.

Skipped when ``transformers`` is not installed (it is in the ``test`` extra).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist

from notebook_accel import channel, notebook_launcher
from notebook_accel.events import Event, Metrics, Progress
from notebook_accel.integrations import add_trainer_callback
from tests.helpers import import_accelerate
from tests.launcher.recording import RecordingSink

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[test])")

from notebook_accel.integrations.transformers import DashboardCallback, metric_names  # noqa: E402
from tests.integrations import trainer_workers  # noqa: E402


class ListWriter:
    """A stand-in for the worker's event writer that keeps what is posted."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.flushed = threading.Event()

    def post(self, event: Event) -> None:
        self.events.append(event)

    send = post

    def flush(self) -> None:
        self.flushed.set()


@pytest.fixture
def writer() -> Any:
    """A ListWriter installed as this process's channel for the test."""
    previous = channel.uninstall()
    fake = ListWriter()
    channel.install(fake)  # type: ignore[arg-type]
    yield fake
    channel.uninstall()
    if previous is not None:
        channel.install(previous)


def _state(main: bool = True, step: int = 3) -> Any:
    return transformers.TrainerState(global_step=step, max_steps=10, epoch=0.3, is_world_process_zero=main)


_ARGS = SimpleNamespace(process_index=0)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ours_first", [False, True], ids=["trainer-makes-the-group", "accelerator-made-it-first"])
def test_a_trainer_on_two_processes_trains_as_one_group_and_its_logs_reach_the_sink(
        tmp_path: Path, ours_first: bool) -> None:
    sink = RecordingSink()
    out = notebook_launcher(trainer_workers.train, (str(tmp_path), ours_first), num_processes=2, dashboard=sink,
                            use_cpu=True)
    assert sink.outcome is not None and sink.outcome.status == "finished"
    # one process group: each rank fetched its own half of the items, the two halves cover the data once
    assert out["world_size"] == 2 and out["same_group"]
    rank0, rank1 = (set(f) for f in out["fetched"])
    assert len(out["fetched"][0]) == len(out["fetched"][1]) == trainer_workers.ITEMS // 2
    assert rank0 | rank1 == set(range(trainer_workers.ITEMS)) and not rank0 & rank1
    assert out["max_steps"] == trainer_workers.ITEMS // (2 * trainer_workers.BATCH)
    assert out["same_weights"] and out["moved"] > 1e-3  # trained, and DDP kept both ranks' weights equal
    assert "DashboardCallback" in out["callbacks"]
    # every loss rank 0 logged arrived once, with rank 0's values, at the Trainer's step
    metrics = [e for e in sink.events if isinstance(e, Metrics)]
    assert {e.rank for e in metrics} == {0}
    assert [(e.step, e.values["train/loss"]) for e in metrics if "train/loss" in e.values] == out["losses"]
    assert len(out["losses"]) == out["max_steps"]
    assert all("train/learning_rate" in e.values for e in metrics)
    train = [e for e in sink.events if isinstance(e, Progress) and e.desc == "train"]
    assert {e.rank for e in train} == {0}
    assert [e.n for e in train] == list(range(out["max_steps"] + 1))  # each position once (train end adds none)
    assert train[-1].total == out["max_steps"]


@pytest.mark.timeout(300)
def test_a_run_in_the_kernel_reports_and_leaves_the_kernels_trainer_defaults_as_they_were(tmp_path: Path) -> None:
    import transformers.trainer as trainer_module

    accelerate = import_accelerate()  # deepspeed's import-time variable, set before the leak check's snapshot
    before = list(trainer_module.DEFAULT_CALLBACKS)
    sink = RecordingSink()
    try:
        out = notebook_launcher(trainer_workers.train_alone, (str(tmp_path),), num_processes=1, dashboard=sink,
                                use_cpu=True)
    finally:  # the Trainer's accelerate made a one-process group here, in the test's process: not ours to keep
        accelerate.state.AcceleratorState._reset_state(True)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert trainer_module.DEFAULT_CALLBACKS == before
    assert "DashboardCallback" in out["callbacks"]
    losses = [(e.step, e.values["train/loss"]) for e in sink.events
              if isinstance(e, Metrics) and "train/loss" in e.values]
    assert losses == out["losses"] and losses


def test_metric_names_follow_transformers_tracker_naming_and_leave_bookkeeping_out() -> None:
    logs = {"loss": 0.5, "grad_norm": 1.0, "learning_rate": 1e-3, "epoch": 0.5, "eval_loss": 0.4,
            "eval_accuracy": 0.9, "eval_runtime": 0.2, "eval_samples_per_second": 10.0, "test_f1": 0.7,
            "total_flos": 3.0, "note": "text"}
    assert metric_names(logs) == {"train/loss": 0.5, "train/grad_norm": 1.0, "train/learning_rate": 1e-3,
                                  "eval/loss": 0.4, "eval/accuracy": 0.9, "test/f1": 0.7}
    summary = {"train_runtime": 1.0, "train_loss": 0.4, "train_samples_per_second": 3.0, "epoch": 1.0}
    assert metric_names(summary) == {}


def test_the_callback_reports_from_the_main_process_only(writer: ListWriter) -> None:
    callback = DashboardCallback()
    callback.on_log(_ARGS, _state(main=False), None, logs={"loss": 1.0})
    callback.on_step_end(_ARGS, _state(main=False), None)
    assert writer.events == []
    callback.on_log(_ARGS, _state(), None, logs={"loss": 1.0})
    callback.on_step_end(_ARGS, _state(), None)
    assert [type(e).__name__ for e in writer.events] == ["Metrics", "Progress"]
    progress = writer.events[1]
    assert isinstance(progress, Progress) and (progress.n, progress.total, progress.epoch) == (3, 10, 1)


def test_the_callback_added_twice_to_one_trainer_reports_once(writer: ListWriter) -> None:
    state = _state()
    first, second = DashboardCallback(), DashboardCallback()
    for _ in range(2):
        for callback in (first, second):  # the order a Trainer's handler calls them, event after event
            callback.on_log(_ARGS, state, None, logs={"loss": 1.0})
    assert len(writer.events) == 2


def test_the_callback_does_nothing_outside_a_launched_worker() -> None:
    assert channel.current() is None
    DashboardCallback().on_log(_ARGS, _state(), None, logs={"loss": 1.0})  # no channel: nothing to send to


def test_the_callback_counts_evaluation_batches_and_closes_the_loop(writer: ListWriter) -> None:
    callback = DashboardCallback()
    for _ in range(3):
        callback.on_prediction_step(_ARGS, _state(), None, eval_dataloader=iter(()))  # no len: total unknown
    callback.on_evaluate(_ARGS, _state(), None)
    callback.on_prediction_step(_ARGS, _state(), None, eval_dataloader=[1, 2])
    shown = [(e.n, e.total) for e in writer.events if isinstance(e, Progress)]
    assert shown == [(1, None), (2, None), (3, None), (3, 3), (1, 2)]


def test_on_train_end_flushes_the_posted_events(writer: ListWriter) -> None:
    DashboardCallback().on_train_end(_ARGS, _state(), None)
    assert writer.flushed.is_set()


def _fake_trainer_module(progress_name: str) -> ModuleType:
    module = ModuleType("fake_trainer")
    module.DEFAULT_CALLBACKS = [object]  # type: ignore[attr-defined]
    module.ProgressCallback = type("ProgressCallback", (), {})  # type: ignore[attr-defined]
    module.DEFAULT_PROGRESS_CALLBACK = type(progress_name, (), {})  # type: ignore[attr-defined]
    return module


def test_in_a_worker_the_notebook_progress_bar_becomes_the_console_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_trainer_module("NotebookProgressCallback")  # what transformers picks when imported in a kernel
    monkeypatch.setitem(__import__("sys").modules, "transformers.trainer", module)
    add_trainer_callback(in_worker=True)
    assert module.DEFAULT_PROGRESS_CALLBACK is module.ProgressCallback
    assert module.DEFAULT_CALLBACKS == [object, DashboardCallback]


def test_in_the_kernel_the_progress_bar_stays_and_undo_removes_the_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_trainer_module("NotebookProgressCallback")
    chosen = module.DEFAULT_PROGRESS_CALLBACK
    monkeypatch.setitem(__import__("sys").modules, "transformers.trainer", module)
    undo = add_trainer_callback(in_worker=False)
    assert module.DEFAULT_CALLBACKS == [object, DashboardCallback]
    assert add_trainer_callback(in_worker=False)  # a second run adds nothing more
    assert module.DEFAULT_CALLBACKS == [object, DashboardCallback]
    undo()
    assert module.DEFAULT_CALLBACKS == [object] and module.DEFAULT_PROGRESS_CALLBACK is chosen


def test_a_transformers_that_does_not_fit_gets_a_warning_not_a_failed_import(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _fake_trainer_module("ProgressCallback")
    module.DEFAULT_CALLBACKS = None  # type: ignore[attr-defined]  # not a list: nothing to add to
    monkeypatch.setitem(__import__("sys").modules, "transformers.trainer", module)
    monkeypatch.setattr("notebook_accel.integrations._console_progress", lambda trainer: 1 / 0)
    with pytest.warns(RuntimeWarning, match=r"could not add its dashboard callback.*callbacks=\[DashboardCallback\(\)\]"):
        add_trainer_callback(in_worker=True)
