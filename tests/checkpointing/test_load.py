"""load_state refuses missing, partial, damaged and mismatched checkpoints before modifying anything."""

from __future__ import annotations

import json
import os
import random

import pytest
import torch

from notebook_accel.checkpointing import CheckpointError, load_state, save_state
from notebook_accel.checkpointing.manifest import MANIFEST_NAME
from tests.checkpointing.fakes import Counter, FakeLoader, fingerprint, make_accelerator, train_step


@pytest.fixture
def saved(tmp_path) -> str:
    acc = make_accelerator(seed=0)
    train_step(acc)
    return save_state(acc, tmp_path / "ckpt")


def _refused(acc, path: str, pattern: str) -> None:
    """load_state raises matching ``pattern`` and leaves ``acc`` and the RNG as they were."""
    before = fingerprint(acc)
    rng = (random.getstate(), torch.get_rng_state())
    with pytest.raises(CheckpointError, match=pattern):
        load_state(acc, path)
    assert fingerprint(acc) == before
    assert random.getstate() == rng[0] and torch.equal(torch.get_rng_state(), rng[1])


def _edit_manifest(path: str, edit) -> None:
    file = os.path.join(path, MANIFEST_NAME)
    with open(file) as f:
        data = json.load(f)
    edit(data)
    with open(file, "w") as f:
        json.dump(data, f)


def test_missing_directory(tmp_path) -> None:
    _refused(make_accelerator(), str(tmp_path / "nope"), "no checkpoint directory")


def test_missing_manifest_is_partial(saved) -> None:
    os.remove(os.path.join(saved, MANIFEST_NAME))
    _refused(make_accelerator(seed=2), saved, "partial save")


def test_corrupt_manifest(saved) -> None:
    with open(os.path.join(saved, MANIFEST_NAME), "w") as f:
        f.write("{not json")
    _refused(make_accelerator(seed=2), saved, "manifest .* is corrupt")


def test_newer_format_version(saved) -> None:
    _edit_manifest(saved, lambda d: d.update(format_version=99))
    _refused(make_accelerator(seed=2), saved, "format 99.*Upgrade")


def test_incomplete_marker(saved) -> None:
    _edit_manifest(saved, lambda d: d.update(complete=False))
    _refused(make_accelerator(seed=2), saved, "incomplete")


def test_unknown_kind(saved) -> None:
    _edit_manifest(saved, lambda d: d["entries"][0].update(kind="widget"))
    _refused(make_accelerator(seed=2), saved, "unknown object kinds")


def test_other_world_size(saved) -> None:
    _edit_manifest(saved, lambda d: d.update(world_size=4))
    _refused(make_accelerator(seed=2), saved, "saved by 4 process.*this run has 1.*num_processes=4")


def test_other_number_of_objects(saved) -> None:
    acc = make_accelerator(seed=2)
    acc._custom_objects.append(Counter())
    _refused(acc, saved, r"1 \(Counter\) custom object\(s\), this Accelerator has 2 \(Counter, Counter\)")
    acc = make_accelerator(seed=2)
    acc._dataloaders.append(FakeLoader())
    _refused(acc, saved, "dataloader")
    acc = make_accelerator(seed=2)
    acc._schedulers.clear()
    _refused(acc, saved, r"1 \(StepLR\) scheduler.*has 0")


def test_other_optimizer_type(saved) -> None:
    acc = make_accelerator(seed=2)
    model = acc._models[0]
    acc._optimizers[0].optimizer = torch.optim.Adam(model.parameters())
    acc._schedulers[0] = torch.optim.lr_scheduler.StepLR(acc._optimizers[0].optimizer, 2)
    _refused(acc, saved, r"optimizer types differ: \['SGD'\] in the checkpoint, \['Adam'\] here")


def test_other_model_shape_and_keys(saved) -> None:
    acc = make_accelerator(seed=2)
    acc._models[0][2] = torch.nn.Linear(8, 3)
    _refused(acc, saved, r"2.weight has shape \(2, 8\) in the checkpoint, \(3, 8\) here")
    acc = make_accelerator(seed=2)
    acc._models[0].append(torch.nn.Linear(2, 2))
    _refused(acc, saved, r"keys differ \(missing in checkpoint: \['3.bias', '3.weight'\]")


def test_missing_file(saved) -> None:
    os.remove(os.path.join(saved, "optimizer.bin"))
    _refused(make_accelerator(seed=2), saved, "damaged: optimizer.bin: missing")


def test_truncated_file(saved) -> None:
    with open(os.path.join(saved, "random_states_0.pkl"), "r+b") as f:
        f.truncate(10)
    _refused(make_accelerator(seed=2), saved, "random_states_0.pkl: 10 bytes, the manifest says")


def test_changed_file(saved) -> None:
    path = os.path.join(saved, "pytorch_model.bin")
    data = bytearray(open(path, "rb").read())
    data[-30] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)
    _refused(make_accelerator(seed=2), saved, "pytorch_model.bin: SHA-256 differs")


def test_unsafe_pickle_is_refused(saved) -> None:
    """A file that needs arbitrary unpickling (here: a Python object) is not loaded, even with a valid manifest."""
    import pickle

    path = os.path.join(saved, "custom_checkpoint_0.pkl")
    torch.save({"value": Counter(3)}, path, pickle_module=pickle)
    from notebook_accel.checkpointing.atomic import file_digest

    size, digest = file_digest(path)
    _edit_manifest(saved, lambda d: d["files"].update({"custom_checkpoint_0.pkl": {"size": size, "sha256": digest}}))
    _refused(make_accelerator(seed=2), saved, "weights_only=True")
