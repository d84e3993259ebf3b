"""Experiment trackers behind ``Accelerator(log_with=...)``: live dashboard, JSONL files, TensorBoard, and
Weights & Biases, MLflow, Comet, Aim and DVCLive through their own packages (optional extras).

:class:`TrackerHub` is what the Accelerator delegates to; see :mod:`notebook_accel.tracking.hub` for the
routing rules (the live dashboard is always fed when launched; only the main process writes).
This package imports no UI code, and none of the trackers' packages until a tracker starts.
"""

from __future__ import annotations

from notebook_accel.tracking.aim import AimTracker
from notebook_accel.tracking.base import GeneralTracker, TrackerError, TrackerUnavailableError
from notebook_accel.tracking.comet import CometMLTracker
from notebook_accel.tracking.dvclive import DVCLiveTracker
from notebook_accel.tracking.hub import TRACKER_NAMES, TrackerHub
from notebook_accel.tracking.jsonl import JSONLTracker
from notebook_accel.tracking.live import LiveTracker
from notebook_accel.tracking.mlflow import MLflowTracker
from notebook_accel.tracking.tensorboard import TensorBoardTracker
from notebook_accel.tracking.wandb import WandBTracker

__all__ = [
    "AimTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "JSONLTracker",
    "LiveTracker",
    "MLflowTracker",
    "TensorBoardTracker",
    "TrackerError",
    "TrackerHub",
    "TrackerUnavailableError",
    "TRACKER_NAMES",
    "WandBTracker",
]
