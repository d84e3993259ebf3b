"""The Comet tracker as an offline experiment, read back from the offline archive Comet writes."""

from __future__ import annotations

import importlib
import importlib.util
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel import Accelerator

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("comet_ml") is None, reason='comet_ml is not installed (pip install "notebook-accel[comet]")'
)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Any, Path]:
    """comet_ml, offline, its archive in ``tmp_path / "comet"``; no error reports to Comet's Sentry, no automatic
    logging of code, git, command line or system (set before comet_ml is first imported, which reads them)."""
    folder = tmp_path / "comet"
    for name, value in {
        "COMET_ERROR_TRACKING_ENABLE": "false",
        "COMET_AUTO_LOG_CLI_ARGUMENTS": "false",
        "COMET_START_ONLINE": "false",
        "COMET_OFFLINE_DIRECTORY": str(folder),
        "COMET_AUTO_LOG_ENV_DETAILS": "false",
        "COMET_AUTO_LOG_GIT_METADATA": "false",
        "COMET_AUTO_LOG_GIT_PATCH": "false",
        "COMET_AUTO_LOG_CODE": "false",
        "COMET_DISABLE_AUTO_LOGGING": "1",
        "COMET_LOGGING_CONSOLE": "error",
    }.items():
        monkeypatch.setenv(name, value)
    return importlib.import_module("comet_ml"), folder


def _messages(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The experiment description and the messages in the one offline archive under ``folder``."""
    (archive,) = folder.glob("*.zip")
    with zipfile.ZipFile(archive) as z:
        experiment = json.loads(z.read("experiment.json"))
        messages = [json.loads(line) for line in z.read("messages.json").decode().splitlines() if line.strip()]
    return experiment, messages


def test_parameters_metrics_and_others_reach_the_archive(offline: tuple[Any, Path]) -> None:
    comet_ml, folder = offline
    acc = Accelerator(cpu=True, log_with="comet_ml")
    acc.init_trackers("demo", config={"lr": 0.1, "optimizer": "adam"})
    experiment = acc.get_tracker("comet_ml", unwrap=True)
    assert isinstance(experiment, comet_ml.OfflineExperiment)
    acc.log({"loss": torch.tensor(0.5), "note": "warm", "eval": {"acc": 0.75}}, step=1)
    acc.log({"loss": 0.25}, step=2)
    acc.end_training()
    description, messages = _messages(folder)
    assert description["project_name"] == "demo"
    params = {p["paramName"]: p["paramValue"] for p in _payloads(messages, "parameter_msg", "param")
              if p["source"] == "manual" and p["paramName"] != "curr_step"}
    assert params == {"lr": 0.1, "optimizer": "adam"}
    metrics = [(m["metricName"], m["metricValue"], m["step"]) for m in _payloads(messages, "metric_msg", "metric")]
    assert [m for m in metrics if not m[0].startswith("sys.")] == [("loss", 0.5, 1), ("eval_acc", 0.75, 1),
                                                                    ("loss", 0.25, 2)]
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert others["note"] == "warm"


def _payloads(messages: list[dict[str, Any]], kind: str, field: str) -> list[dict[str, Any]]:
    """The ``payload[field]`` of every message of type ``kind``."""
    return [m["payload"][field] for m in messages if m["type"] == kind]
