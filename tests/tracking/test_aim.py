"""The Aim tracker with a local repository, read back with Aim's ``Repo``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from notebook_accel import Accelerator

aim = pytest.importorskip("aim", reason='aim is not installed (pip install "notebook-accel[aim]")')


def _read(repo_path: Path, run_hash: str):
    """The run as Aim's reader sees it (indexed first, as ``aim up`` would do)."""
    from aim.sdk.index_manager import RepoIndexManager

    RepoIndexManager.get_index_manager(aim.Repo(str(repo_path))).index(run_hash)
    return aim.Repo(str(repo_path)).get_run(run_hash)


def test_hparams_and_metrics_reach_the_repo(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True, log_with="aim", project_dir=str(tmp_path))
    acc.init_trackers("demo", config={"lr": 0.1, "optimizer": "adam"},
                      init_kwargs={"aim": {"experiment": "exp", "system_tracking_interval": None}})
    run = acc.get_tracker("aim", unwrap=True)
    assert isinstance(run, aim.Run)
    run_hash = run.hash
    with pytest.warns(UserWarning, match="'note'"):
        acc.log({"loss": torch.tensor(0.5), "note": "text is not an Aim metric"}, step=1)
    acc.log({"loss": 0.25, "acc": 1}, step=2)
    acc.end_training()
    got = _read(Path(acc.logging_dir), run_hash)
    assert got.name == "demo" and got.experiment == "exp"
    assert got["hparams"] == {"lr": 0.1, "optimizer": "adam"}
    series = {m.name: [(step, values[0]) for step, values in m.data.items()] for m in got.metrics()}
    assert series == {"loss": [(1, 0.5), (2, 0.25)], "acc": [(2, 1.0)]}


def test_aim_needs_a_logging_dir() -> None:
    from notebook_accel.tracking import TrackerError

    with pytest.raises(TrackerError, match=r"tracker 'aim' writes files but no logging directory"):
        Accelerator(cpu=True, log_with="aim")
