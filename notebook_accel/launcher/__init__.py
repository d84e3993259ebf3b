"""Starting training workers from a live Jupyter kernel (or a script) and supervising them.

``notebook_launcher`` (:mod:`.api`) checks everything before anything starts (:mod:`.preflight`,
:mod:`.accelerate_args`), builds a :class:`~.plan.Plan`, opens the run's resources in one owner
(:mod:`.run_resources`: the rendezvous of :mod:`.rendezvous`, the kernel-side guards of :mod:`.kernel`), chooses
the sink (:mod:`.sink_choice`), starts the workers through a placement (:mod:`.placement`; each forked child runs
:mod:`.child`), and watches them in one loop (:mod:`.supervision`). ``num_processes=1`` runs in the kernel itself
(:mod:`.placement.inprocess`). docs/ARCHITECTURE.md gives the whole picture.
"""

from __future__ import annotations

from notebook_accel.launcher.api import notebook_launcher
from notebook_accel.launcher.kernel.warmup import start_early
from notebook_accel.launcher.supervision.failures import LaunchTimeoutError, WorkerError, WorkerFailure

__all__ = ["notebook_launcher", "WorkerError", "WorkerFailure", "LaunchTimeoutError"]

# In a Jupyter kernel with torch imported and no GPU, torch's lazy distributed imports start now in a background
# thread, while the notebook's next cells run; the first launch waits for them before forking (see .warmup).
start_early()
