"""Automatic names, the newest complete checkpoint, rotation."""

from __future__ import annotations

import os

import pytest

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.naming import (
    checkpoint_path,
    complete_checkpoints,
    newest_checkpoint,
    remove_stale_temporaries,
    rotate,
)


def _make(root, name: str, complete: bool = True) -> None:
    os.makedirs(root / name)
    if complete:
        (root / name / "manifest.json").write_text("{}")


def test_checkpoint_path(tmp_path) -> None:
    assert checkpoint_path(str(tmp_path), 7) == str(tmp_path / "checkpoints" / "checkpoint_7")
    with pytest.raises(CheckpointError, match="project_dir is None"):
        checkpoint_path(None, 0)


def test_only_complete_checkpoints_sorted_numerically(tmp_path) -> None:
    for name in ("checkpoint_10", "checkpoint_9", "checkpoint_2"):
        _make(tmp_path, name)
    _make(tmp_path, "checkpoint_11", complete=False)
    _make(tmp_path, ".tmp-checkpoint_12-abcd")
    _make(tmp_path, "checkpoint_x")
    assert [n for n, _ in complete_checkpoints(str(tmp_path))] == [2, 9, 10]
    assert newest_checkpoint(str(tmp_path)) == (10, str(tmp_path / "checkpoint_10"))
    assert complete_checkpoints(str(tmp_path / "missing")) == []
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        newest_checkpoint(str(tmp_path / "missing"))


def test_rotate_and_stale_cleanup(tmp_path) -> None:
    for i in range(5):
        _make(tmp_path, f"checkpoint_{i}")
    _make(tmp_path, ".tmp-checkpoint_5-abcd", complete=False)
    assert rotate(str(tmp_path), None) == []
    assert rotate(str(tmp_path), 2) == [str(tmp_path / f"checkpoint_{i}") for i in range(3)]
    assert remove_stale_temporaries(str(tmp_path)) == [str(tmp_path / ".tmp-checkpoint_5-abcd")]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_3", "checkpoint_4"]


def test_rotate_never_deletes_the_checkpoint_just_saved(tmp_path) -> None:
    for i in (0, 5, 6):
        _make(tmp_path, f"checkpoint_{i}")
    assert rotate(str(tmp_path), 2, keep=str(tmp_path / "checkpoint_0")) == [str(tmp_path / "checkpoint_5")]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint_0", "checkpoint_6"]
