"""Tests for notebook_accel.tracking.jsonl: one JSON line per log call, config.json, skipped values."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from notebook_accel.tracking.jsonl import JSONLTracker


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_log_call_is_one_line(tmp_path: Path) -> None:
    tracker = JSONLTracker("run", tmp_path)
    tracker.start()
    tracker.log({"train/loss": torch.tensor(0.5), "lr": 1e-3}, step=1)
    tracker.log({"train/loss": 0.25, "note": "warm-up done"}, step=2)
    tracker.log({"eval/acc": 1})
    tracker.finish()
    lines = _lines(tmp_path / "run" / "metrics.jsonl")
    assert [line["step"] for line in lines] == [1, 2, None]
    assert lines[0]["values"] == {"train/loss": 0.5, "lr": 1e-3}
    assert lines[1]["values"] == {"train/loss": 0.25, "note": "warm-up done"}
    assert lines[2]["values"] == {"eval/acc": 1.0}
    assert all(isinstance(line["time"], float) for line in lines)


def test_lines_are_on_disk_before_finish(tmp_path: Path) -> None:
    tracker = JSONLTracker("run", tmp_path)
    tracker.log({"loss": 1.0}, step=0)  # log without start opens the file
    assert _lines(tmp_path / "run" / "metrics.jsonl")[0]["values"] == {"loss": 1.0}
    assert tracker.tracker is not None
    tracker.finish()
    tracker.finish()
    assert tracker.tracker is None


def test_non_scalars_are_skipped_with_one_warning(tmp_path: Path) -> None:
    tracker = JSONLTracker("run", tmp_path)
    with pytest.warns(UserWarning, match="weights"):
        tracker.log({"loss": 1.0, "weights": torch.ones(3)}, step=0)
    tracker.log({"loss": 0.5, "weights": torch.ones(3)}, step=1)
    tracker.finish()
    assert [line["values"] for line in _lines(tmp_path / "run" / "metrics.jsonl")] == [{"loss": 1.0}, {"loss": 0.5}]


def test_config_is_written_as_json(tmp_path: Path) -> None:
    tracker = JSONLTracker("run", tmp_path)
    tracker.store_init_configuration({"lr": 3e-4, "layers": [1, 2], "device": torch.device("cpu")})
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config == {"lr": 3e-4, "layers": [1, 2], "device": "device(type='cpu')"}


def test_a_write_cut_short_by_a_full_disk_leaves_only_whole_lines(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = JSONLTracker("run", tmp_path)
    tracker.log({"loss": 1.0}, step=0)
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 20:  # the first attempt: half of it fits
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError, match="could not take this log line .*every line logged before") as info:
        tracker.log({"loss": 0.5, "note": "x" * 40}, step=1)
    assert info.value.errno == errno.ENOSPC
    monkeypatch.setattr(os, "write", real_write)
    tracker.log({"loss": 0.25}, step=2)  # space again: logging goes on after the refused line
    tracker.finish()
    assert [row["step"] for row in _lines(tmp_path / "run" / "metrics.jsonl")] == [0, 2]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_tmpfs_keeps_metrics_readable(tmp_path: Path) -> None:
    disk = tmp_path / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("mount is not permitted here")
    tracker = JSONLTracker("run", disk)
    try:
        with pytest.raises(OSError, match="could not take this log line"):
            for step in range(10_000):
                tracker.log({"loss": 1.0 / (step + 1), "note": "n" * 300}, step=step)
        tracker.finish()
        steps = [row["step"] for row in _lines(disk / "run" / "metrics.jsonl")]  # every line parses
        assert steps == list(range(len(steps))) and len(steps) > 5
    finally:
        tracker.finish()  # an open file would keep the mount busy
        subprocess.run(["umount", str(disk)], check=False)
