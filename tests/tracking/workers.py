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


def log_all(folder: str) -> list[tuple[int, list[str], dict[str, str]]]:
    """``log_with="all"`` with every package tracker offline under ``folder``; each rank logs ``10 * rank + step``.

    Returns every rank's (rank, tracker names, run identifiers), gathered.
    """
    acc = Accelerator(cpu=True, log_with="all", project_dir=folder)
    rank = acc.process_index
    acc.init_trackers("demo", config={"lr": 0.1, "world_size": acc.num_processes}, init_kwargs={
        "wandb": {"mode": "offline", "dir": folder},
        "mlflow": {"tracking_uri": os.path.join(folder, "mlruns")},
        "comet_ml": {"online": False},
        "aim": {"system_tracking_interval": None},
        "dvclive": {"dir": os.path.join(folder, "dvclive"), "save_dvc_exp": False},
    })
    for step in range(2):
        acc.log({"loss": float(10 * rank + step)}, step=step)
    ids: dict[str, str] = {}
    if acc.is_main_process:
        ids = {"mlflow": acc.get_tracker("mlflow", unwrap=True).info.run_id,
               "aim": acc.get_tracker("aim", unwrap=True).hash}
    names = [t.name for t in acc.trackers]
    acc.end_training()
    return acc.gather_object([(rank, names, ids)])
