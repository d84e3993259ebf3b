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
    _refused(make_accelerator(seed=2), saved, "pytorch_model.bin: its XXH3-128 checksum differs")


def test_unsafe_pickle_is_refused(saved) -> None:
    """A file that needs arbitrary unpickling (here: a Python object) is not loaded, even with a valid manifest."""
    import pickle

    path = os.path.join(saved, "custom_checkpoint_0.pkl")
    torch.save({"value": Counter(3)}, path, pickle_module=pickle)
    from notebook_accel.checkpointing.atomic import file_digest

    size, digest = file_digest(path)
    _edit_manifest(saved, lambda d: d["files"].update({"custom_checkpoint_0.pkl": {"size": size, "xxh3_128": digest}}))
    _refused(make_accelerator(seed=2), saved, "weights_only=True")


# -- crafted payloads (issue 11, item 5): refused before anything changes ------------------------------------
def _replace_payload(path: str, name: str, edit) -> None:
    """Load ``name``, apply ``edit`` to it, save it back and make the manifest agree (size and XXH3-128)."""
    from notebook_accel.checkpointing.atomic import file_digest

    file = os.path.join(path, name)
    payload = torch.load(file, weights_only=True)
    payload = edit(payload)
    torch.save(payload, file)
    size, digest = file_digest(file)
    _edit_manifest(path, lambda d: d["files"].__setitem__(name, {"size": size, "xxh3_128": digest}))


def test_rng_with_the_right_keys_but_wrong_types(saved) -> None:
    def break_rng(state):
        state["numpy"]["keys"] = torch.zeros(3, dtype=torch.int64)  # a Mersenne state has 624 keys
        return state

    _replace_payload(saved, "random_states_0.pkl", break_rng)
    _refused(make_accelerator(seed=2), saved, "RNG state cannot be restored")


def test_loader_state_with_missing_keys(saved) -> None:
    _replace_payload(saved, "dl_state_dict_rank0.bin", lambda s: {"position": 3})
    _refused(make_accelerator(seed=2), saved, "dataloader 0: the saved state lacks \\['epoch'\\]")


def test_a_model_entry_that_is_not_a_tensor(saved) -> None:
    def break_model(state):
        state["2.bias"] = [0.0, 0.0]  # the last entry: a half-copied model if it were applied in order
        return state

    _replace_payload(saved, "pytorch_model.bin", break_model)
    _refused(make_accelerator(seed=2), saved, "2.bias is a list in the checkpoint, not a tensor")


def test_optimizer_buffers_of_the_wrong_shape(saved) -> None:
    def break_momentum(state):
        state["state"][0]["momentum_buffer"] = torch.zeros(3, 3)
        return state

    _replace_payload(saved, "optimizer.bin", break_momentum)
    _refused(make_accelerator(seed=2), saved, "momentum_buffer of parameter 0 has shape \\(3, 3\\)")


@pytest.mark.parametrize(
    ("field", "value"),
    [("step", "7"), ("iteration", -1), ("complete", "yes"), ("world_size", 0), ("step", True), ("created", "now")],
)
def test_manifest_fields_of_the_wrong_type(saved, field: str, value: object) -> None:
    _edit_manifest(saved, lambda d: d.update({field: value}))
    _refused(make_accelerator(seed=2), saved, f"manifest .* is corrupt: .*{field}")


@pytest.mark.parametrize("name", ["../outside.bin", "/etc/passwd", "sub/dir.bin", "..", "x{rank:999999999}.bin",
                                  "{0}.bin", "a{rank}.bin"])
def test_manifest_file_names_stay_inside_the_folder(saved, name: str) -> None:
    def point_away(data):
        model = next(e for e in data["entries"] if e["kind"] == "model")
        model["file"] = name  # a shared entry: a {rank} pattern is refused too

    _edit_manifest(saved, point_away)
    _refused(make_accelerator(seed=2), saved, "manifest .* is corrupt: entry model 0: file name")


def test_a_file_replaced_by_a_link_is_refused(saved, tmp_path) -> None:
    target = os.path.join(saved, "optimizer.bin")
    moved = str(tmp_path / "elsewhere.bin")
    os.replace(target, moved)
    os.symlink(moved, target)
    _refused(make_accelerator(seed=2), saved, "optimizer.bin: a symbolic link")


def test_a_huge_manifest_is_not_read_whole(saved) -> None:
    with open(os.path.join(saved, MANIFEST_NAME), "w") as f:
        f.write(" " * (17 << 20))
    _refused(make_accelerator(seed=2), saved, "larger than")


def test_an_error_names_a_checkpoint_inside_the_working_directory_relatively(tmp_path, monkeypatch) -> None:
    # tutorial 04's refusal showed the machine's absolute path of a folder beside the notebook
    from notebook_accel.checkpointing.load import _named

    monkeypatch.chdir(tmp_path)
    assert _named(str(tmp_path / "ckpt" / "step_40")) == os.path.join("ckpt", "step_40")
    assert _named("/elsewhere/step_40") == "/elsewhere/step_40"
