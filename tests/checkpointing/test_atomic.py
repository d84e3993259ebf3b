"""Crash-safe writes, temporary siblings, commit and delete."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest
import torch

from notebook_accel.checkpointing import atomic, serialize
from notebook_accel.checkpointing.atomic import (
    commit_dir,
    is_temporary,
    make_dir,
    read_torch,
    remove_dir,
    temp_sibling,
    write_bytes,
    write_torch,
)
from notebook_accel.checkpointing.errors import CheckpointError


def test_temp_sibling_is_hidden_next_to_target_and_unique(tmp_path) -> None:
    a, b = temp_sibling(str(tmp_path / "ckpt")), temp_sibling(str(tmp_path / "ckpt"))
    assert a != b
    assert os.path.dirname(a) == str(tmp_path)
    assert os.path.basename(a).startswith(".tmp-ckpt-") and is_temporary(os.path.basename(a))
    assert not is_temporary("checkpoint_3")


def test_temp_sibling_does_not_touch_global_rngs(tmp_path) -> None:
    state = torch.get_rng_state()
    import random

    py = random.getstate()
    temp_sibling(str(tmp_path / "x"))
    assert torch.equal(torch.get_rng_state(), state) and random.getstate() == py


def test_write_and_read_torch(tmp_path) -> None:
    write_torch(str(tmp_path / "t.bin"), {"a": torch.arange(3), "b": [1, "x", None]})
    out = read_torch(str(tmp_path / "t.bin"))
    assert torch.equal(out["a"], torch.arange(3)) and out["b"] == [1, "x", None]


def test_write_error_names_path_and_cause(tmp_path, monkeypatch) -> None:
    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", no_space)
    with pytest.raises(CheckpointError, match=r"could not write .*t.bin.*No space left on device.*disk is full"):
        write_bytes(str(tmp_path / "t.bin"), b"x")


def test_torch_runtime_write_error_becomes_checkpoint_error(tmp_path, monkeypatch) -> None:
    def broken(obj, f):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(serialize, "save_without_crc", broken)
    with pytest.raises(CheckpointError, match="file write failed.*bytes are free there"):
        write_torch(str(tmp_path / "t.bin"), {})


def test_read_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="could not read"):
        read_torch(str(tmp_path / "missing.bin"))
    (tmp_path / "junk.bin").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="corrupt"):
        read_torch(str(tmp_path / "junk.bin"))


def test_make_dir_error(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="could not create directory .*file/sub"):
        make_dir(str(tmp_path / "file" / "sub"))


def test_commit_new_and_replace(tmp_path) -> None:
    final = str(tmp_path / "ckpt")
    for content in (b"one", b"two"):
        temp = temp_sibling(final)
        os.mkdir(temp)
        write_bytes(os.path.join(temp, "f"), content)
        commit_dir(temp, final)
        assert open(os.path.join(final, "f"), "rb").read() == content
    assert os.listdir(tmp_path) == ["ckpt"]


def test_failed_commit_puts_previous_back(tmp_path, monkeypatch) -> None:
    final = str(tmp_path / "ckpt")
    os.mkdir(final)
    write_bytes(os.path.join(final, "f"), b"old")
    temp = temp_sibling(final)
    os.mkdir(temp)
    real_rename = os.rename

    def failing(src, dst):
        if src == temp:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", failing)
    with pytest.raises(CheckpointError, match="Invalid cross-device link"):
        commit_dir(temp, final)
    assert open(os.path.join(final, "f"), "rb").read() == b"old"


def test_remove_dir(tmp_path) -> None:
    os.makedirs(tmp_path / "checkpoint_1" / "sub")
    remove_dir(str(tmp_path / "checkpoint_1"))
    remove_dir(str(tmp_path / "never-existed"))
    assert os.listdir(tmp_path) == []


def test_a_full_disk_is_named_as_such(tmp_path) -> None:
    """A real 1 MiB tmpfs (root only): the write fails with ENOSPC (inside torch's writer, or as its obscure
    RuntimeError); the error says the disk is full, and the process lives on."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a 1 MiB tmpfs")
    try:
        with pytest.raises(CheckpointError, match="(?i)the disk is full"):
            atomic.write_torch(str(mount / "weights.bin"), torch.zeros(1_000_000))
    finally:
        subprocess.run(["umount", str(mount)], check=True)
