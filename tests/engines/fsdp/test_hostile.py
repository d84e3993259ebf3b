"""Crafted FSDP checkpoints (manifest made to agree) are refused on 2 real processes without running code from
them and before anything changes; a checkpoint with other keys is refused as a plain one is."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel import notebook_launcher
from tests.checkpointing.hostile import CodeRunning, record, torch_bytes
from tests.engines.fsdp import workers


def launch(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` on 2 CPU processes; rank 0's result."""
    return notebook_launcher(functools.partial(fn, *args, **kwargs), (), num_processes=2, dashboard=False,
                             use_cpu=True)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A good sharded checkpoint of TinyNet after 4 steps (copied per test by ``checkpoint``)."""
    directory = tmp_path_factory.mktemp("fsdp") / "ckpt"
    launch(workers.resume, "FULL_SHARD", str(directory), False, 4, 0)
    return directory


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same in the layout before format 4 (model and optimizer in DCP files of their own)."""
    directory = tmp_path_factory.mktemp("fsdp-apart") / "ckpt"
    launch(workers.resume_apart, "FULL_SHARD", str(directory), False, 4, 0)
    return directory


def _copy(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "ckpt"
    copy.mkdir()
    for file in source.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    return copy


@pytest.fixture
def checkpoint(sharded: Path, tmp_path: Path) -> Path:
    return _copy(sharded, tmp_path)


def _refused_without_running(directory: Path, marker: Path, pattern: str, **kwargs: Any) -> None:
    out = launch(workers.load_refused, str(directory), workers.WIDTH, trained=2, **kwargs)
    assert not marker.exists(), "the checkpoint ran code"
    assert "CheckpointError" in out["error"] and pattern in out["error"], out["error"]
    assert out["unchanged"], out


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["fsdp_state_0.metadata", "pytorch_model_fsdp_0.metadata", "optimizer_0.metadata"])
def test_metadata_that_would_run_code_is_refused(sharded: Path, apart: Path, tmp_path: Path, name: str) -> None:
    checkpoint = _copy(sharded if name.startswith("fsdp_state_") else apart, tmp_path)  # both layouts are read
    marker = tmp_path / "ran"
    (checkpoint / name).write_bytes(pickle.dumps(CodeRunning(str(marker))))
    record(checkpoint, name)
    _refused_without_running(checkpoint, marker, f"{name} is not sharded-checkpoint metadata as DCP writes it "
                                                 "(UnsafeMetadataError: it refers to posix.mkdir")


def _repoint(checkpoint: Path, name: str, fqn: str, **change: Any) -> None:
    """Rewrite object ``name``'s metadata so that the storage of ``fqn`` has the fields ``change``."""
    file = checkpoint / f"{name}.metadata"
    metadata = pickle.loads(file.read_bytes())  # the test's own file
    for index, info in list(metadata.storage_data.items()):
        if index.fqn == fqn:
            metadata.storage_data[index] = dataclasses.replace(info, **change)
    file.write_bytes(pickle.dumps(metadata))
    record(checkpoint, file.name)


@pytest.mark.timeout(180)
def test_a_shard_value_that_would_run_code_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    shard = checkpoint / "fsdp_state_0_rank0_0.distcp"
    payload = torch_bytes(CodeRunning(str(marker)))
    offset = shard.stat().st_size
    with open(shard, "ab") as f:  # the learning rate is stored as a pickle: point it at one that runs code
        f.write(payload)
    record(checkpoint, shard.name)
    _repoint(checkpoint, "fsdp_state_0", "optimizer_0.param_groups.0.lr", relative_path=shard.name, offset=offset,
             length=len(payload))
    _refused_without_running(checkpoint, marker, "the value of 'optimizer_0.param_groups.0.lr' in its shards cannot be read as "
                                                 "plain data")


@pytest.mark.timeout(180)
def test_a_shard_value_of_another_type_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    shard = checkpoint / "fsdp_state_0_rank0_0.distcp"
    payload = torch_bytes("fast")
    offset = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(payload)
    record(checkpoint, shard.name)
    _repoint(checkpoint, "fsdp_state_0", "optimizer_0.param_groups.0.lr", relative_path=shard.name, offset=offset,
             length=len(payload))
    _refused_without_running(checkpoint, tmp_path / "ran", "optimizer_0.param_groups.0.lr is a str in the checkpoint, a float "
                                                           "here")


@pytest.mark.timeout(180)
def test_metadata_pointing_outside_the_shards_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    _repoint(checkpoint, "fsdp_state_0", "model.head.bias", relative_path="../../outside.distcp")
    _refused_without_running(checkpoint, tmp_path / "ran", "fsdp_state_0.metadata is malformed: the "
                             "storage of 'model.head.bias' is in '../../outside.distcp', which is not one of this object's "
                             "shard files")


@pytest.mark.timeout(180)
def test_full_weights_that_would_run_code_are_refused(tmp_path: Path) -> None:
    directory = tmp_path / "full"
    launch(workers.resume, "FULL_SHARD", str(directory), False, 2, 0, "FULL_STATE_DICT")
    marker = tmp_path / "ran"
    (directory / "pytorch_model_fsdp_0.bin").write_bytes(torch_bytes({"embed.weight": CodeRunning(str(marker))}))
    record(directory, "pytorch_model_fsdp_0.bin")
    _refused_without_running(directory, marker, "with torch.load(weights_only=True)",
                             state_dict_type="FULL_STATE_DICT")


@pytest.mark.timeout(180)
def test_a_full_optimizer_state_that_does_not_fit_is_refused_first(tmp_path: Path) -> None:
    directory = tmp_path / "full"
    launch(workers.resume, "FULL_SHARD", str(directory), False, 2, 0, "FULL_STATE_DICT")
    file = directory / "optimizer_0.bin"
    state = torch.load(file, weights_only=True)
    state["state"]["head.weight"]["exp_avg"] = torch.zeros(2, workers.WIDTH)
    torch.save(state, file)
    record(directory, file.name)
    _refused_without_running(directory, tmp_path / "ran", "the full optimizer state does not fit this model and "
                             "optimizer: exp_avg of 'head.weight' has shape (2, 16) in the checkpoint, the parameter "
                             "is (1, 16)", state_dict_type="FULL_STATE_DICT")


@pytest.mark.timeout(180)
def test_a_checkpoint_with_an_extra_layer_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "aux"
    launch(workers.resume, "FULL_SHARD", str(directory), False, 2, 0, aux=True)
    out = launch(workers.load_refused, str(directory), workers.WIDTH, trained=2)
    assert "CheckpointError" in out["error"], out["error"]
    assert "model 0 (FSDPTinyNet) with optimizer 0 (AdamW): the sharded state does not fit this model: keys differ " \
           "(missing in the checkpoint: [], unexpected: ['model.aux.bias', 'model.aux.weight', " in out["error"]
    assert out["unchanged"]
