"""Run folders: where each rank's whole output goes, how they are named, turned off, and pruned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from notebook_accel import environment
from notebook_accel.launcher.supervision.runlogs import create_run_folder, display_path, rank_log


def test_a_new_folder_per_run_under_the_configured_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path / "logs"))
    first = create_run_folder("train")
    second = create_run_folder("train")
    assert first is not None and second is not None and first != second
    assert first.parent == tmp_path / "logs" and first.name.endswith("-train") and not any(first.iterdir())
    assert rank_log(first, 3) == first / "rank3.log"
    assert create_run_folder("<lambda>") is not None


def test_the_default_root_is_runs_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTEBOOK_ACCEL_LOG_DIR")
    monkeypatch.chdir(tmp_path)
    folder = create_run_folder("train")
    assert folder is not None and folder.parent == Path("runs")
    assert display_path(folder) == str(folder)  # shown relative to the working directory
    assert display_path(Path("/")) == "/"


@pytest.mark.parametrize("value", ["off", "OFF", "none", "0", "false"])
def test_off_keeps_no_files(value: str) -> None:
    assert environment.log_root({"NOTEBOOK_ACCEL_LOG_DIR": value}) is None
    assert environment.log_root({}) == "runs"


def test_an_unusable_root_warns_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(blocker / "logs"))
    with pytest.warns(RuntimeWarning, match="cannot create a run folder.*NOTEBOOK_ACCEL_LOG_DIR"):
        assert create_run_folder("train") is None


def test_only_our_oldest_folders_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ACCEL_LOG_DIR", str(tmp_path))
    for stamp in ("20200101-000000", "20200102-000000", "20200103-000000"):
        old = tmp_path / f"{stamp}-train"
        old.mkdir()
        (old / "rank0.log").write_text("old\n")
    (tmp_path / "20200101-000000-train" / "notes.txt").write_text("the user's own file")
    (tmp_path / "tensorboard").mkdir()
    newest = create_run_folder("train", keep=2)
    assert newest is not None
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["20200101-000000-train", "20200103-000000-train", newest.name, "tensorboard"]
    assert os.path.exists(tmp_path / "20200101-000000-train" / "notes.txt")


def test_a_path_outside_or_above_the_working_directory_is_shown_absolute(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert display_path(Path("../runs/x")) == str(tmp_path / "runs" / "x")
    assert display_path(tmp_path / "work" / "runs") == "runs"
    assert display_path(Path("runs/x")) == "runs/x"
