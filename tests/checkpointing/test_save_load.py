"""save_state / load_state in one process, with fake Accelerator parts."""

from __future__ import annotations

import errno
import json
import os
import random

import numpy as np
import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, load_state, save_state, serialize
from notebook_accel.checkpointing.manifest import MANIFEST_NAME
from tests.checkpointing.fakes import Counter, fingerprint, make_accelerator, train_step


def _layout(path: str) -> list[str]:
    return sorted(os.listdir(path))


def test_round_trip_restores_everything(tmp_path) -> None:
    acc = make_accelerator(seed=0)
    for _ in range(3):
        train_step(acc)
    path = save_state(acc, tmp_path / "ckpt")
    expected_draws = (random.random(), np.random.rand(), torch.rand(2).tolist())
    expected = fingerprint(acc)

    fresh = make_accelerator(seed=1)
    assert fingerprint(fresh) != expected
    assert load_state(fresh, path) == str(tmp_path / "ckpt")
    assert fingerprint(fresh) == expected
    assert (random.random(), np.random.rand(), torch.rand(2).tolist()) == expected_draws
    load_state(fresh, path)  # RNG is global to the process: restore it before each continuation
    train_step(fresh)
    load_state(acc, path)
    train_step(acc)
    assert fingerprint(fresh) == fingerprint(acc)


def test_layout_and_manifest(tmp_path) -> None:
    acc = make_accelerator(scaler=True)
    path = save_state(acc, tmp_path / "ckpt")
    assert _layout(path) == sorted([
        MANIFEST_NAME, "pytorch_model.bin", "optimizer.bin", "scheduler.bin", "scaler.pt",
        "dl_state_dict_rank0.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl",
    ])
    manifest = json.loads((tmp_path / "ckpt" / MANIFEST_NAME).read_text())
    assert manifest["complete"] is True and manifest["world_size"] == 1 and manifest["format_version"] == 3
    assert all(set(record) == {"size", "xxh3_128"} for record in manifest["files"].values())
    assert {e["kind"] for e in manifest["entries"]} == {"model", "optimizer", "scheduler", "scaler", "dataloader",
                                                        "custom", "rng"}
    assert set(manifest["files"]) == set(_layout(path)) - {MANIFEST_NAME}
    for name in manifest["files"]:  # every file loads with weights_only=True
        torch.load(os.path.join(path, name), weights_only=True)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_save_returns_absolute_path_and_replaces_previous_checkpoint(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    acc = make_accelerator()
    first = save_state(acc, "ckpt")
    assert first == str(tmp_path / "ckpt")
    train_step(acc)
    save_state(acc, "ckpt")
    fresh = make_accelerator(seed=3)
    load_state(fresh, "ckpt")
    assert fresh.step == 1
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


def test_automatic_naming_rotation_and_newest(tmp_path) -> None:
    acc = make_accelerator(project_dir=str(tmp_path), total_limit=2)
    paths = []
    for _ in range(4):
        train_step(acc)
        paths.append(save_state(acc))
    root = tmp_path / "checkpoints"
    assert paths == [str(root / f"checkpoint_{i}") for i in range(4)]
    assert sorted(os.listdir(root)) == ["checkpoint_2", "checkpoint_3"]
    assert acc.project_configuration.iteration == 4

    fresh = make_accelerator(seed=5, project_dir=str(tmp_path), total_limit=2)
    assert load_state(fresh) == str(root / "checkpoint_3")
    assert fresh.step == 4 and fresh.project_configuration.iteration == 4
    assert save_state(fresh) == str(root / "checkpoint_4")


def test_automatic_load_skips_partial_checkpoints(tmp_path) -> None:
    acc = make_accelerator(project_dir=str(tmp_path))
    save_state(acc)
    root = tmp_path / "checkpoints"
    (root / ".tmp-checkpoint_1-deadbeef").mkdir()
    (root / ".tmp-checkpoint_1-deadbeef" / "pytorch_model.bin").write_bytes(b"partial")
    (root / "checkpoint_2").mkdir()  # no manifest: not complete
    fresh = make_accelerator(project_dir=str(tmp_path))
    assert load_state(fresh) == str(root / "checkpoint_0")
    assert fresh.project_configuration.iteration == 1
    save_state(fresh)  # a successful automatic save removes the leftover temporary directory
    assert not (root / ".tmp-checkpoint_1-deadbeef").exists()


def test_automatic_save_refuses_existing_iteration(tmp_path) -> None:
    acc = make_accelerator(project_dir=str(tmp_path))
    save_state(acc)
    acc.project_configuration.iteration = 0
    with pytest.raises(CheckpointError, match="already exists"):
        save_state(acc)


def test_needs_a_directory_without_automatic_naming() -> None:
    acc = make_accelerator()
    with pytest.raises(CheckpointError, match="needs an output_dir"):
        save_state(acc)
    with pytest.raises(CheckpointError, match="needs an input_dir"):
        load_state(acc)


def test_automatic_load_without_any_checkpoint(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        load_state(make_accelerator(project_dir=str(tmp_path)))


def test_refuses_to_overwrite_a_foreign_directory(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not a notebook-accel checkpoint"):
        save_state(make_accelerator(), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        save_state(make_accelerator(), tmp_path / "file")


def test_empty_directory_is_a_valid_target(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    save_state(make_accelerator(), tmp_path / "empty")
    assert (tmp_path / "empty" / MANIFEST_NAME).is_file()


def test_disk_full_keeps_previous_checkpoint(tmp_path, monkeypatch) -> None:
    acc = make_accelerator()
    path = save_state(acc, tmp_path / "ckpt")
    before = {n: (tmp_path / "ckpt" / n).read_bytes() for n in os.listdir(path)}
    train_step(acc)
    real_save = serialize.save_without_crc
    calls = []

    def full_disk(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            f.write(b"half a file")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(serialize, "save_without_crc", full_disk)
    with pytest.raises(CheckpointError) as info:
        save_state(acc, tmp_path / "ckpt")
    message = str(info.value)
    assert "No space left on device" in message and str(tmp_path / ".tmp-ckpt-") in message
    assert "disk is full" in message
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # temporary directory removed
    assert {n: (tmp_path / "ckpt" / n).read_bytes() for n in os.listdir(path)} == before
    monkeypatch.undo()
    load_state(make_accelerator(seed=9), path)


def test_unwritable_directory(tmp_path, monkeypatch) -> None:
    acc = make_accelerator()
    save_state(acc, tmp_path / "ckpt")
    real_makedirs = os.makedirs

    def read_only(path, *args, **kwargs):
        if ".tmp-" in os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_makedirs(path, *args, **kwargs)

    monkeypatch.setattr(os, "makedirs", read_only)
    with pytest.raises(CheckpointError, match="Permission denied.*not writable"):
        save_state(acc, tmp_path / "ckpt")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
    load_state(make_accelerator(), tmp_path / "ckpt")


def test_read_only_file_system(tmp_path) -> None:
    target = "/sys/notebook_accel_checkpoint_test"
    if os.access("/sys", os.W_OK) and not os.path.ismount("/sys"):
        pytest.skip("/sys is writable here")
    with pytest.raises(CheckpointError, match=target):
        save_state(make_accelerator(), target)


def test_custom_objects_and_scaler_round_trip(tmp_path) -> None:
    acc = make_accelerator(scaler=True)
    acc._custom_objects.append(Counter(41))
    acc.scaler.scale(torch.ones(1))
    acc.scaler.update(512.0)
    path = save_state(acc, tmp_path / "c")
    fresh = make_accelerator(scaler=True)
    fresh._custom_objects.append(Counter())
    load_state(fresh, path)
    assert fresh._custom_objects[1].value == 41
    assert fresh.scaler.get_scale() == 512.0


def test_failing_state_dict_fails_the_save_cleanly(tmp_path) -> None:
    class Broken(Counter):
        def state_dict(self) -> dict[str, int]:
            raise ValueError("cannot serialise")

    acc = make_accelerator()
    acc._custom_objects.append(Broken())
    with pytest.raises(CheckpointError, match="ValueError: cannot serialise"):
        save_state(acc, tmp_path / "ckpt")
    assert os.listdir(tmp_path) == []


def test_failing_load_state_dict_is_reported(tmp_path) -> None:
    class Broken(Counter):
        def load_state_dict(self, state: dict[str, int]) -> None:
            raise ValueError("refused")

    acc = make_accelerator()
    acc._custom_objects = [Counter(), Broken()]
    path = save_state(acc, tmp_path / "ckpt")
    train_step(acc)
    before = fingerprint(acc)
    with pytest.raises(CheckpointError, match=r"custom 1 \(Broken\): ValueError: refused \(1 object\(s\) loaded "
                                              r"before it were put back\)"):
        load_state(acc, path)
    assert fingerprint(acc) == before  # custom 0 put back; loader, model, optimizer, scheduler untouched


def test_failing_model_load_says_the_state_is_partial(tmp_path, monkeypatch) -> None:
    acc = make_accelerator()
    path = save_state(acc, tmp_path / "ckpt")
    monkeypatch.setattr(acc._models[0], "load_state_dict", lambda state: (_ for _ in ()).throw(ValueError("bug")))
    with pytest.raises(CheckpointError, match=r"model 0 \(Sequential\): ValueError: bug \(3 object\(s\) loaded "
                                              r"before it were put back; the state is partially restored: optimizer "
                                              r"0 \(SGD\), model 0 \(Sequential\) changed\)"):
        load_state(acc, path)


def test_failing_model_load_without_small_states_does_not_say_nothing_changed(tmp_path, monkeypatch) -> None:
    acc = make_accelerator()
    acc._schedulers, acc._dataloaders, acc._custom_objects = [], [], []
    path = save_state(acc, tmp_path / "ckpt")
    monkeypatch.setattr(acc._models[0], "load_state_dict", lambda state: (_ for _ in ()).throw(ValueError("bug")))
    with pytest.raises(CheckpointError) as caught:
        load_state(acc, path)
    assert "nothing was modified" not in str(caught.value)
    assert "(the state is partially restored: optimizer 0 (SGD), model 0 (Sequential) changed)" in str(caught.value)


class _Big:
    """A registered object whose state is a 4 MB tensor."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"data": torch.ones(1_000_000)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        pass


def test_a_real_full_disk_keeps_the_previous_checkpoint(tmp_path) -> None:
    """save_state on a real 2 MiB tmpfs (root only): the save that does not fit says the disk is full, with the
    path and the free space, and the previous checkpoint stays loadable with no debris."""
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a 2 MiB tmpfs")
    try:
        acc = make_accelerator(seed=0)
        train_step(acc)
        path = save_state(acc, mount / "ckpt")
        before = {n: (mount / "ckpt" / n).read_bytes() for n in os.listdir(path)}
        acc._custom_objects.append(_Big())
        with pytest.raises(CheckpointError, match=r"could not write .*tiny/\.tmp-ckpt-.*No space left on device.*"
                                                  r"(?i:the disk is full)"):
            save_state(acc, mount / "ckpt")
        assert os.listdir(mount) == ["ckpt"]
        assert {n: (mount / "ckpt" / n).read_bytes() for n in os.listdir(path)} == before
        load_state(make_accelerator(seed=4), path)
    finally:
        subprocess.run(["umount", str(mount)], check=True)
