"""Forking training workers from a live Jupyter kernel (or a script) and supervising them.

``notebook_launcher`` checks everything before the fork (:mod:`.preflight`, :mod:`.ports`), forks one worker
per device (:mod:`.spawn`, whose children run :mod:`.worker`), watches them in one loop (:mod:`.supervisor`)
and shows the run through a sink (:mod:`.console`, or the dashboard; chosen in :mod:`.sinks`).
``num_processes=1`` runs in the kernel itself (:mod:`.inprocess`).
"""

from __future__ import annotations

from notebook_accel.launcher.api import notebook_launcher
from notebook_accel.launcher.kernel.warmup import start_early
from notebook_accel.launcher.supervision.failures import LaunchTimeoutError, WorkerError, WorkerFailure

__all__ = ["notebook_launcher", "WorkerError", "WorkerFailure", "LaunchTimeoutError"]

# In a Jupyter kernel with torch imported and no GPU, torch's lazy distributed imports start now in a background
# thread, while the notebook's next cells run; the first launch waits for them before forking (see .warmup).
start_early()
