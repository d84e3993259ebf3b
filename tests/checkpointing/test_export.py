"""Tests for save_model (notebook_accel.checkpointing.export): accelerate's file layout, shards and their index,
torch.save format, tied weights, replacing an earlier save, errors, and 2 real processes (only rank 0 writes)."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

import safetensors
import safetensors.torch
import torch

from notebook_accel import Accelerator
from notebook_accel.checkpointing import CheckpointError, ShardSizeError
from notebook_accel.launcher import notebook_launcher
from tests.checkpointing import export_workers
from tests.helpers import import_accelerate


class Tied(torch.nn.Module):
    """A tiny language-model shape whose output layer reuses the embedding matrix."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _load_sharded(directory: Path, index_name: str, load) -> dict[str, torch.Tensor]:
    index = json.loads((directory / index_name).read_text())
    out: dict[str, torch.Tensor] = {}
    for file in sorted(set(index["weight_map"].values())):
        part = load(directory / file)
        assert {index["weight_map"][k] for k in part} == {file}
        out.update(part)
    assert set(out) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in out.values())
    return out


def _assert_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    expected = model.state_dict()
    assert weights.keys() == expected.keys()
    assert all(torch.equal(weights[k], expected[k]) for k in expected)


@pytest.fixture
def acc() -> Accelerator:
    return Accelerator(cpu=True)


def test_default_is_one_safetensors_file(acc: Accelerator, tmp_path: Path) -> None:
    model = acc.prepare(_model())
    path = acc.save_model(model, tmp_path / "export")
    assert path == str(tmp_path / "export" / "model.safetensors")
    assert os.listdir(tmp_path / "export") == ["model.safetensors"]
    _assert_weights(model, safetensors.torch.load_file(path))
    with open(path, "rb") as f:  # accelerate's metadata, which transformers checks
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert header["__metadata__"] == {"format": "pt"}


def test_sharded_safetensors_with_index(acc: Accelerator, tmp_path: Path) -> None:
    model = _model()  # bytes: 512, 64, 256, 16
    path = acc.save_model(model, tmp_path, max_shard_size="0.6KB")
    assert path == str(tmp_path / "model.safetensors.index.json")
    assert sorted(os.listdir(tmp_path)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    weights = _load_sharded(tmp_path, "model.safetensors.index.json", safetensors.torch.load_file)
    _assert_weights(model, weights)
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fresh.load_state_dict(weights)


def test_torch_format_single_and_sharded(acc: Accelerator, tmp_path: Path) -> None:
    model = _model()
    path = acc.save_model(model, tmp_path / "one", safe_serialization=False)
    assert path == str(tmp_path / "one" / "pytorch_model.bin")
    _assert_weights(model, torch.load(path, weights_only=True))
    acc.save_model(model, tmp_path / "many", max_shard_size=300, safe_serialization=False)
    names = sorted(os.listdir(tmp_path / "many"))
    assert names == [f"pytorch_model-0000{i}-of-00003.bin" for i in (1, 2, 3)] + ["pytorch_model.bin.index.json"]
    weights = _load_sharded(tmp_path / "many", "pytorch_model.bin.index.json", lambda p: torch.load(p, weights_only=True))
    _assert_weights(model, weights)
    with zipfile.ZipFile(path) as archive:  # read by other programs without a manifest: the zip's CRCs are kept
        assert archive.testzip() is None and all(info.CRC for info in archive.infolist() if info.file_size)


def test_tied_weights(acc: Accelerator, tmp_path: Path) -> None:
    model = Tied()
    with pytest.warns(UserWarning, match=r"head.weight \(same tensor as embed.weight\)"):
        path = acc.save_model(model, tmp_path / "safe")
    saved = safetensors.torch.load_file(path)
    assert list(saved) == ["embed.weight"]
    fresh = Tied()
    missing, unexpected = fresh.load_state_dict(saved, strict=False)
    assert missing == ["head.weight"] and unexpected == []
    assert torch.equal(fresh.head.weight, model.embed.weight)  # tied again by the model
    path = acc.save_model(model, tmp_path / "bin", safe_serialization=False)  # torch.save keeps both names
    assert sorted(torch.load(path, weights_only=True)) == ["embed.weight", "head.weight"]


def test_a_new_save_replaces_the_earlier_shards_and_keeps_other_files(acc: Accelerator, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    model = _model()
    acc.save_model(model, tmp_path, max_shard_size=100)
    assert len([n for n in os.listdir(tmp_path) if n.startswith("model-")]) == 4
    acc.save_model(model, tmp_path, max_shard_size=600)
    assert sorted(os.listdir(tmp_path)) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    acc.save_model(model, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.safetensors"]
    _assert_weights(model, safetensors.torch.load_file(tmp_path / "model.safetensors"))


def test_bad_max_shard_size_writes_nothing(acc: Accelerator, tmp_path: Path) -> None:
    with pytest.raises(ShardSizeError, match=r"max_shard_size='10 gigs' is not a size; pass an int \(bytes\)"):
        acc.save_model(_model(), tmp_path / "export", max_shard_size="10 gigs")
    assert not (tmp_path / "export").exists()


def test_unwritable_target_raises_checkpoint_error(acc: Accelerator, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="could not save model weights to .*file"):
        acc.save_model(_model(), tmp_path / "file")


def _launch(fn, *args):
    return notebook_launcher(fn, args, num_processes=2, dashboard=False, use_cpu=True)


@pytest.mark.timeout(120)
def test_two_processes_only_rank_0_writes(tmp_path: Path) -> None:
    seen = _launch(export_workers.save_from_every_rank, str(tmp_path))
    index = str(tmp_path / "model.safetensors.index.json")
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    # both ranks return the index path and find the files written when save_model returns
    assert seen == [{"rank": r, "path": index, "files_after_call": files} for r in (0, 1)]
    weights = _load_sharded(tmp_path, "model.safetensors.index.json", safetensors.torch.load_file)
    _assert_weights(export_workers.rank_model(0), weights)  # rank 0's weights, not rank 1's


@pytest.mark.timeout(120)
def test_two_processes_a_main_process_failure_raises_on_every_rank(tmp_path: Path) -> None:
    messages = _launch(export_workers.main_process_fails, str(tmp_path))
    assert len(messages) == 2 and messages[0] == messages[1]
    assert "(1 of 2 ranks failed): rank 0:" in messages[0]


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "torch"])
@pytest.mark.parametrize("size", ["10GB", "20KB"], ids=["one-file", "sharded"])
def test_same_files_and_index_as_accelerates_save_model(tmp_path: Path, safe: bool, size: str) -> None:
    accelerate = import_accelerate()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.Linear(64, 8))
    theirs, ours = tmp_path / "accelerate", tmp_path / "ours"
    accelerate.Accelerator(cpu=True).save_model(model, theirs, max_shard_size=size, safe_serialization=safe)
    Accelerator(cpu=True).save_model(model, ours, max_shard_size=size, safe_serialization=safe)
    names = sorted(os.listdir(theirs))
    assert sorted(os.listdir(ours)) == names and (len(names) > 1) == (size == "20KB")
    for name in names:
        if name.endswith(".json"):
            assert json.loads((ours / name).read_text()) == json.loads((theirs / name).read_text())
        elif safe:
            a, b = safetensors.safe_open(str(ours / name), "pt"), safetensors.safe_open(str(theirs / name), "pt")
            with a, b:
                assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
                assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())
        else:
            mine, other = torch.load(ours / name), torch.load(theirs / name)
            assert mine.keys() == other.keys() and all(torch.equal(mine[k], other[k]) for k in mine)
