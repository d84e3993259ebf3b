"""Experiment trackers behind ``Accelerator(log_with=...)``: live dashboard, JSONL files, TensorBoard.

:class:`TrackerHub` is what the Accelerator delegates to; see :mod:`notebook_accel.tracking.hub` for the
routing rules (the live dashboard is always fed when launched; only the main process writes).
This package imports no UI code.
"""

from __future__ import annotations

from notebook_accel.tracking.base import GeneralTracker, TrackerError, TrackerUnavailableError
from notebook_accel.tracking.hub import TRACKER_NAMES, TrackerHub
from notebook_accel.tracking.jsonl import JSONLTracker
from notebook_accel.tracking.live import LiveTracker
from notebook_accel.tracking.tensorboard import TensorBoardTracker

__all__ = [
    "GeneralTracker",
    "JSONLTracker",
    "LiveTracker",
    "TensorBoardTracker",
    "TrackerError",
    "TrackerHub",
    "TrackerUnavailableError",
    "TRACKER_NAMES",
]
