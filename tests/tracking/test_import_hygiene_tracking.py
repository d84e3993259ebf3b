"""The tracking package and progress() run in workers: they must load no UI code and no tracker package
(TensorBoard, wandb, MLflow, Comet, Aim, DVCLive) until a tracker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = """
import sys
import notebook_accel.tracking, notebook_accel.progress
from notebook_accel.tracking import TrackerHub
TrackerHub(log_with="all", logging_dir="unused", is_main_process=True, rank=0)
loaded = [m for m in ("ipywidgets", "IPython.display", "matplotlib", "torch.utils.tensorboard", "tensorboard",
                      "wandb", "mlflow", "comet_ml", "aim", "dvclive") if m in sys.modules]
assert not loaded, f"loaded at import time: {loaded}"
print("ok")
"""


def test_tracking_and_progress_load_no_ui_and_no_tensorboard() -> None:
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, cwd=repo
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
