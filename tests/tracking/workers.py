"""Worker bodies for the multi-process tracker tests (module level, so the launcher can run them)."""

from __future__ import annotations

import os

from notebook_accel import Accelerator


def log_dvclive(folder: str) -> list[str]:
    """Every rank asks for DVCLive in ``<folder>/rank<r>`` and logs ``rank + step``; returns every rank's tracker
    class name (gathered)."""
    acc = Accelerator(cpu=True, log_with="dvclive")
    rank = acc.process_index
    acc.init_trackers("demo", config={"world_size": acc.num_processes},
                      init_kwargs={"dvclive": {"dir": os.path.join(folder, f"rank{rank}"), "save_dvc_exp": False}})
    for step in range(2):
        acc.log({"loss": float(rank + step)}, step=step)
    kind = type(acc.get_tracker("dvclive")).__name__
    acc.end_training()
    return acc.gather_object(kind)
