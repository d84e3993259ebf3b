"""Tests for notebook_accel.tracking.tensorboard: event files written and read back; the missing-package error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from notebook_accel.tracking import TrackerHub, TrackerUnavailableError
from notebook_accel.tracking.tensorboard import TensorBoardTracker

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard not installed")


def test_scalars_text_and_hparams_reach_the_event_file(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = TensorBoardTracker("run", tmp_path)
    tracker.start()
    tracker.store_init_configuration({"lr": 0.1, "model": "mlp", "sizes": [1, 2]})
    for step in range(3):
        tracker.log({"train/loss": torch.tensor(1.0 / (step + 1)), "note": f"step {step}"}, step=step)
    tracker.log({"pair": {"a": 1.0, "b": 2.0}}, step=3)
    tracker.finish()
    tracker.finish()
    files = list((tmp_path / "run").glob("events.out.tfevents.*"))
    assert files, "no event file written"
    acc = EventAccumulator(str(tmp_path / "run"))
    acc.Reload()
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [round(e.value, 4) for e in loss] == [1.0, 0.5, 0.3333]


def test_non_scalar_values_warn_once(tmp_path: Path) -> None:
    tracker = TensorBoardTracker("run", tmp_path)
    with pytest.warns(UserWarning, match="matrix"):
        tracker.log({"matrix": torch.ones(2, 2), "loss": 1.0}, step=0)
    tracker.finish()


@pytest.mark.usefixtures("without_package_trackers")
def test_missing_tensorboard_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(TrackerUnavailableError, match=r"notebook-accel\[tensorboard\]"):
        TensorBoardTracker("run", tmp_path)
    with pytest.raises(TrackerUnavailableError, match="jsonl"):
        TrackerHub(log_with="tensorboard", logging_dir=tmp_path, is_main_process=True, rank=0)
    hub = TrackerHub(log_with="all", logging_dir=tmp_path, is_main_process=True, rank=0)  # "all": skipped quietly
    hub.start("run", None, {})
    assert [t.name for t in hub.trackers] == ["jsonl"]
    hub.finish()
