"""The DVCLive tracker, read back from the files DVCLive writes (params.yaml, plots/metrics/*.tsv, metrics.json);
and on 2 real processes, where only rank 0 writes."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from notebook_accel import Accelerator
from notebook_accel.launcher import notebook_launcher
from tests.tracking import workers

pytest.importorskip("dvclive", reason='dvclive is not installed (pip install "notebook-accel[dvclive]")')


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No DVC Studio, no telemetry; the working directory is ``tmp_path`` (DVCLive looks for a DVC repo there)."""
    monkeypatch.setenv("DVC_STUDIO_OFFLINE", "true")
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    monkeypatch.setenv("ITERATIVE_DO_NOT_TRACK", "1")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tsv(path: Path) -> list[dict[str, Any]]:
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items() if k != "timestamp"} for row in csv.DictReader(f, delimiter="\t")]


def test_params_and_metric_files(quiet: Path) -> None:
    out = quiet / "live"
    acc = Accelerator(cpu=True, log_with="dvclive")
    acc.init_trackers("demo", config={"lr": 0.1, "model": {"layers": 2}},
                      init_kwargs={"dvclive": {"dir": str(out), "save_dvc_exp": False}})
    live = acc.get_tracker("dvclive", unwrap=True)
    assert type(live).__name__ == "Live" and live.dir == str(out)
    with pytest.warns(UserWarning, match="'note'"):
        acc.log({"train/loss": torch.tensor(0.5), "note": "text"}, step=1)
    acc.log({"train/loss": 0.25, "acc": 1}, step=2)
    acc.end_training()
    assert yaml.safe_load((out / "params.yaml").read_text()) == {"lr": 0.1, "model": {"layers": 2}}
    assert _tsv(out / "plots" / "metrics" / "train" / "loss.tsv") == [{"step": 1, "loss": 0.5},
                                                                      {"step": 2, "loss": 0.25}]
    assert _tsv(out / "plots" / "metrics" / "acc.tsv") == [{"step": 2, "acc": 1.0}]
    assert json.loads((out / "metrics.json").read_text()) == {"train": {"loss": 0.25}, "acc": 1.0, "step": 2}


def test_without_a_step_dvclive_counts(quiet: Path) -> None:
    out = quiet / "live"
    acc = Accelerator(cpu=True, log_with="dvclive")
    acc.init_trackers("demo", init_kwargs={"dvclive": {"dir": str(out), "save_dvc_exp": False}})
    for loss in (3.0, 2.0, 1.0):
        acc.log({"loss": loss})
    acc.end_training()
    assert _tsv(out / "plots" / "metrics" / "loss.tsv") == [{"step": s, "loss": v} for s, v in enumerate([3, 2, 1])]


@pytest.mark.timeout(120)
def test_two_processes_only_rank_0_writes(quiet: Path) -> None:
    kinds = notebook_launcher(workers.log_dvclive, (str(quiet),), num_processes=2, dashboard=False, use_cpu=True)
    assert kinds == ["DVCLiveTracker", "GeneralTracker"]  # rank 1 got a blank tracker
    assert sorted(p.name for p in quiet.glob("rank*")) == ["rank0"]
    rows = _tsv(quiet / "rank0" / "plots" / "metrics" / "loss.tsv")
    assert rows == [{"step": 0, "loss": 0.0}, {"step": 1, "loss": 1.0}]  # rank 0's values, logged once each
    assert yaml.safe_load((quiet / "rank0" / "params.yaml").read_text()) == {"world_size": 2}
