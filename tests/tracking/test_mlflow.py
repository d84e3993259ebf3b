"""The MLflow tracker with a local file store, read back with ``MlflowClient``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from notebook_accel import Accelerator

mlflow = pytest.importorskip("mlflow", reason='mlflow is not installed (pip install "notebook-accel[mlflow]")')


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A ``file:`` tracking store in ``tmp_path`` (MLflow 3 needs MLFLOW_ALLOW_FILE_STORE for it)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("GIT_PYTHON_REFRESH", "quiet")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("_MLFLOW_TELEMETRY_SESSION_ID", "")  # mlflow sets this one itself: restore its absence
    monkeypatch.delenv("_MLFLOW_TELEMETRY_SESSION_ID")
    return (tmp_path / "mlruns").as_uri()


def test_params_and_metric_history(store: str) -> None:
    acc = Accelerator(cpu=True, log_with="mlflow")
    with pytest.warns(UserWarning, match=r"dropped the parameters \['huge'\]: MLflow stores at most 6000"):
        acc.init_trackers("demo", config={"lr": 0.1, "optimizer": "adam", "huge": "x" * 7000},
                          init_kwargs={"mlflow": {"run_name": "first", "tags": {"team": "a"}}})
    run = acc.get_tracker("mlflow", unwrap=True)
    assert isinstance(run, mlflow.ActiveRun)
    with pytest.warns(UserWarning, match="'note'"):
        acc.log({"loss": torch.tensor(0.5), "note": "not a metric"}, step=1)
    acc.log({"loss": 0.25, "acc": 1}, step=2)
    acc.end_training()
    client = mlflow.tracking.MlflowClient(store)
    got = client.get_run(run.info.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "first"
    assert client.get_experiment(got.info.experiment_id).name == "demo"
    assert got.data.params == {"lr": "0.1", "optimizer": "adam"}  # "huge" is over MLflow's limit: dropped
    assert got.data.tags["team"] == "a"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "acc")] == [(2, 1.0)]


def test_explicit_tracking_uri_and_existing_experiment(store: str, tmp_path: Path) -> None:
    other = (tmp_path / "other").as_uri()
    for run_name in ("a", "b"):  # the second run finds the experiment the first one created
        acc = Accelerator(cpu=True, log_with="mlflow")
        acc.init_trackers("demo", init_kwargs={"mlflow": {"tracking_uri": other, "run_name": run_name}})
        acc.log({"loss": 1.0}, step=0)
        acc.end_training()
    client = mlflow.tracking.MlflowClient(other)
    experiment = client.get_experiment_by_name("demo")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["a", "b"]
    mlflow.set_tracking_uri(store)  # back to the store of the environment
