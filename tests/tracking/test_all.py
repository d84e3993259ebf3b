"""``log_with="all"`` in a real 2-process run: every installed tracker starts on rank 0 only, and each package's own
reader finds rank 0's values, once each, and the hyper-parameters (wandb offline, a local MLflow store, a Comet
offline archive, a local Aim repository, DVCLive files)."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from notebook_accel.tracking.registry import TRACKERS
from tests.tracking.wandb_records import read_run

PACKAGES = {"wandb": "wandb", "mlflow": "mlflow", "comet_ml": "comet_ml", "aim": "aim", "dvclive": "dvclive",
            "tensorboard": "tensorboard"}
# Looked up, not imported: comet_ml imported here, before tensorboard, would mirror TensorBoard's scalars into the
# Comet experiment (its auto-logging) in the forked workers.
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(any(importlib.util.find_spec(p) is None for p in PACKAGES.values()),
                       reason="a tracker package is missing (the trackers and aim extras install them all)"),
]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every service offline and quiet; the files under ``tmp_path``."""
    for name, value in {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true", "WANDB_DIR": str(tmp_path),
        "MLFLOW_ALLOW_FILE_STORE": "true", "GIT_PYTHON_REFRESH": "quiet", "MLFLOW_DISABLE_TELEMETRY": "true",
        "COMET_START_ONLINE": "false", "COMET_OFFLINE_DIRECTORY": str(tmp_path / "comet"),
        "COMET_ERROR_TRACKING_ENABLE": "false", "COMET_DISABLE_AUTO_LOGGING": "1",
        "COMET_AUTO_LOG_ENV_DETAILS": "false",
        "COMET_AUTO_LOG_GIT_METADATA": "false", "COMET_AUTO_LOG_GIT_PATCH": "false", "COMET_AUTO_LOG_CODE": "false",
        "COMET_AUTO_LOG_CLI_ARGUMENTS": "false", "COMET_LOGGING_CONSOLE": "error",
        "DVC_STUDIO_OFFLINE": "true", "DVC_NO_ANALYTICS": "1", "ITERATIVE_DO_NOT_TRACK": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # DVCLive looks for a DVC repository in the working directory
    return tmp_path


_LAUNCH = """
import json, sys
from notebook_accel import notebook_launcher
from tests.tracking import workers
value = notebook_launcher(workers.log_all, (sys.argv[1],), num_processes=2, dashboard=False, use_cpu=True)
sys.__stdout__.write("RESULT " + json.dumps(value) + "\\n")
"""


def test_all_trackers_log_rank_0_values_once_in_a_two_process_run(offline: Path) -> None:
    # Launched from a fresh interpreter, as from a fresh kernel: Aim's storage threads, once started in a process
    # (by the Aim tests before this one), do not survive a fork, and a worker closing its Aim run would hang.
    done = subprocess.run([sys.executable, "-c", _LAUNCH, str(offline)], cwd=offline, capture_output=True, text=True,
                          timeout=200, env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = [line[7:] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    (rank0, names0, ids), (rank1, names1, _) = sorted(json.loads(lines[-1]))
    assert (rank0, rank1) == (0, 1)
    assert sorted(names0) == sorted(["live", *TRACKERS]) and names1 == []  # every installed tracker, rank 0 only
    expected = [(0, 0.0), (1, 1.0)]  # rank 0's values; rank 1's (10, 11) appear nowhere

    (wandb_file,) = offline.glob("wandb/offline-run-*/run-*.wandb")
    run = read_run(wandb_file, history=2)
    assert run["project"] == "demo" and run["config"]["lr"] == 0.1 and run["config"]["world_size"] == 2
    assert [(row["_step"], row["loss"]) for row in run["history"]] == expected

    import mlflow

    client = mlflow.tracking.MlflowClient(os.path.join(offline, "mlruns"))
    got = client.get_run(ids["mlflow"])
    assert got.data.params == {"lr": "0.1", "world_size": "2"} and got.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(ids["mlflow"], "loss")] == expected

    (archive,) = (offline / "comet").glob("*.zip")
    with zipfile.ZipFile(archive) as z:
        messages = [json.loads(line) for line in z.read("messages.json").decode().splitlines() if line.strip()]
    metrics = [(m["payload"]["metric"]["step"], m["payload"]["metric"]["metricValue"]) for m in messages
               if m["type"] == "metric_msg" and m["payload"]["metric"]["metricName"] == "loss"]
    assert metrics == expected
    params = {p["payload"]["param"]["paramName"]: p["payload"]["param"]["paramValue"] for p in messages
              if p["type"] == "parameter_msg" and p["payload"]["param"]["source"] == "manual"}
    assert params["lr"] == 0.1 and params["world_size"] == 2

    from tests.tracking.test_aim import _read as read_aim

    aim_run = read_aim(offline, ids["aim"])
    assert aim_run["hparams"] == {"lr": 0.1, "world_size": 2}
    assert [(step, values[0]) for m in aim_run.metrics() if m.name == "loss" for step, values in m.data.items()] \
        == expected

    with open(offline / "dvclive" / "plots" / "metrics" / "loss.tsv") as f:
        assert [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(f, delimiter="\t")] == expected

    (jsonl,) = offline.glob("demo/*.jsonl")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [(r["step"], r["values"]["loss"]) for r in rows] == expected
    assert list(offline.glob("demo/**/events.out.tfevents.*")), "tensorboard wrote nothing"


def test_all_in_one_process_finishes_and_puts_the_streams_back(offline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """wandb, Comet and Aim each wrap sys.stdout/stderr; finished in the wrong order, a write recursed forever."""
    import wandb

    from notebook_accel import Accelerator

    monkeypatch.setenv("WANDB_SERVICE", "")  # wandb sets it in this process
    monkeypatch.delenv("WANDB_SERVICE")
    # the store through the environment: init_kwargs' tracking_uri would set MLflow's process-wide URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (offline / "mlruns").as_uri())
    streams = (sys.stdout, sys.stderr)
    acc = Accelerator(cpu=True, log_with="all", project_dir=str(offline))
    acc.init_trackers("demo", config={"lr": 0.1}, init_kwargs={
        "aim": {"system_tracking_interval": None},
        "dvclive": {"dir": str(offline / "dvclive"), "save_dvc_exp": False}})
    acc.log({"loss": 1.0}, step=0)
    try:
        acc.end_training()
    finally:
        wandb.teardown()  # the wandb-core service would outlive the test as a child process
    print("the streams still write", file=sys.stderr)
    assert (sys.stdout, sys.stderr) == streams
