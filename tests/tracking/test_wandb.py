"""The wandb tracker, offline, read back from the run's .wandb file with wandb's own record definitions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from notebook_accel import Accelerator
from tests.tracking.wandb_records import read_run

wandb = pytest.importorskip("wandb", reason='wandb is not installed (pip install "notebook-accel[wandb]")')


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """wandb offline, writing under ``tmp_path``; the wandb service process is shut down afterwards."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    yield tmp_path
    wandb.teardown()  # the wandb-core service would outlive the test as a child process


def test_config_and_values_reach_the_run_file(offline: Path) -> None:
    acc = Accelerator(cpu=True, log_with="wandb")
    acc.init_trackers("demo", config={"lr": 0.1, "layers": [1, 2]},
                      init_kwargs={"wandb": {"name": "first", "tags": ["t"]}})
    run = acc.get_tracker("wandb", unwrap=True)
    assert isinstance(run, wandb.Run) and run.name == "first"
    acc.log({"train/loss": torch.tensor(0.5), "lr": 0.1}, step=1)
    acc.log({"train/loss": 0.25, "note": "warm"}, step=2)
    acc.end_training()
    assert acc.get_tracker("wandb").tracker is None  # finished
    (run_file,) = offline.glob("wandb/offline-run-*/run-*.wandb")
    got = read_run(run_file, history=2)
    assert got["project"] == "demo"
    assert got["config"]["lr"] == 0.1 and got["config"]["layers"] == [1, 2]
    rows = [{k: v for k, v in row.items() if not k.startswith("_") or k == "_step"} for row in got["history"]]
    assert rows == [{"train/loss": 0.5, "lr": 0.1, "_step": 1}, {"train/loss": 0.25, "note": "warm", "_step": 2}]
