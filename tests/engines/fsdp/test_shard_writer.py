"""A rank's DCP shard file as :mod:`notebook_accel.engines.fsdp.shard_writer` writes it: what DCP's own reader and
``torch.load`` read, with few writes, no zip CRCs, fsync'd after its last byte, its digest in the save's ledger."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
import xxhash

from notebook_accel.checkpointing.checksum import recording
from notebook_accel.engines.fsdp import shard_writer
from notebook_accel.engines.fsdp.shard_writer import Coalescer
from notebook_accel.engines.fsdp.storage import load_sharded, metadata_file, save_sharded

_NAME = "fsdp_state_0"
_FILE = f"{_NAME}_rank0_0.distcp"


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    big = torch.randn(300, 300)  # a record larger than the gathering threshold
    return {"model": {"w": big, "b": torch.randn(300), "half": torch.randn(7, 5).half(),
                      "view": torch.arange(100.0)[10:30]},  # a view: written as a tensor of its own size
            "optimizer_0": {"state": {"w": {"exp_avg": torch.randn(300, 300), "step": torch.tensor(3.0)}},
                            "param_groups": [{"lr": 0.1, "params": ["w"]}]}}


def _template() -> dict[str, Any]:
    return {"model": {"w": torch.zeros(300, 300), "b": torch.zeros(300), "half": torch.zeros(7, 5).half(),
                      "view": torch.zeros(20)},
            "optimizer_0": {"state": {"w": {"exp_avg": torch.zeros(300, 300), "step": torch.tensor(0.0)}},
                            "param_groups": [{"lr": 0.5, "params": ["w"]}]}}


class _DcpsOwnReader(dcp.FileSystemReader):
    """DCP's stock reader (its own ``read_data``, its own ``torch.load`` of every record), told our metadata name."""

    def _get_metadata_path(self, rank: int | None = None) -> Any:
        return Path(self.path) / metadata_file(_NAME)


def _assert_same(loaded: dict[str, Any], saved: dict[str, Any]) -> None:
    for key, value in saved["model"].items():
        assert torch.equal(loaded["model"][key], value), key
    assert torch.equal(loaded["optimizer_0"]["state"]["w"]["exp_avg"], saved["optimizer_0"]["state"]["w"]["exp_avg"])
    assert loaded["optimizer_0"]["state"]["w"]["step"].item() == 3.0


def test_dcps_own_reader_and_ours_read_the_file(tmp_path: Path) -> None:
    """The format is DCP's: its stock reader loads every value; so does ours. Fails when torch changes the
    ``WriteResult`` / ``_StorageInfo`` this writer fills in."""
    saved = _state()
    save_sharded(saved, str(tmp_path), _NAME, "model 0")
    assert sorted(os.listdir(tmp_path)) == sorted([_FILE, metadata_file(_NAME)])
    theirs = _template()
    dcp.load(theirs, storage_reader=_DcpsOwnReader(str(tmp_path)), no_dist=True)
    _assert_same(theirs, saved)
    _assert_same(load_sharded(_template(), str(tmp_path), _NAME, "model 0"), saved)


def test_each_record_is_a_torch_archive_without_crcs(tmp_path: Path) -> None:
    """Every tensor record, cut out at its recorded offset, is what ``torch.load`` reads; its zip CRC-32s are 0."""
    saved = _state()
    save_sharded(saved, str(tmp_path), _NAME, "model 0")
    metadata = _DcpsOwnReader(str(tmp_path)).read_metadata()
    data = (tmp_path / _FILE).read_bytes()
    tensors = {index.fqn: info for index, info in metadata.storage_data.items()
               if isinstance(metadata.state_dict_metadata[index.fqn], dcp.metadata.TensorStorageMetadata)}
    assert tensors
    for fqn, info in tensors.items():
        record = data[info.offset:info.offset + info.length]
        value = torch.load(io.BytesIO(record), weights_only=True)
        assert value.untyped_storage().nbytes() == value.nbytes  # a view was written compactly
        crcs = [struct.unpack_from("<I", record, i + 16)[0] for i in range(len(record) - 4)
                if record[i:i + 4] == b"PK\x01\x02"]  # the central directory's CRC-32 of each entry
        assert crcs and not any(crcs), fqn
    assert torch.equal(torch.load(io.BytesIO(data[tensors["model.view"].offset:][:tensors["model.view"].length]),
                                  weights_only=True), saved["model"]["view"])


def test_few_writes_reach_the_file_and_its_digest_is_recorded(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """About three writes a record reach the hashing stream (DCP's own writer made about 39), and the save's
    ledger holds the file's size and XXH3-128."""
    writes: list[int] = []
    real = shard_writer.Coalescer.flush

    def counting(self: Coalescer) -> None:
        if self._pending:
            writes.append(len(self._pending))
        real(self)

    monkeypatch.setattr(shard_writer.Coalescer, "flush", counting)
    with recording() as ledger:
        save_sharded(_state(), str(tmp_path), _NAME, "model 0")
    data = (tmp_path / _FILE).read_bytes()
    assert ledger[str(tmp_path / _FILE)] == (len(data), xxhash.xxh3_128(data).hexdigest())
    records = 5 + 2  # the tensors, and the non-tensor values (lr, params)
    assert len(writes) <= 3 * records, writes


def test_the_file_is_fsynced_after_its_last_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fsync comes after every byte reached the file (nothing gathered or buffered is left out)."""
    sizes: dict[str, int] = {}
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else ""
        if path.endswith(".distcp"):
            sizes[path] = os.fstat(fd).st_size
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    save_sharded(_state(), str(tmp_path), _NAME, "model 0")
    if not sizes:
        pytest.skip("no /proc/self/fd here to tell which file an fsync is for")
    assert sizes == {str(tmp_path / _FILE): (tmp_path / _FILE).stat().st_size}


def test_the_coalescer_keeps_the_order_and_counts_every_byte() -> None:
    out = io.BytesIO()
    stream = Coalescer(out)
    pieces = [b"a" * 10, b"b" * (shard_writer.SMALL_WRITE + 1), b"c" * 3, memoryview(b"d" * 5)]
    for piece in pieces:
        stream.write(piece)
    assert stream.position == sum(len(bytes(p)) for p in pieces)
    assert out.getvalue() == b"".join(bytes(p) for p in pieces[:2])  # the large write pushed the small one out
    stream.flush()
    assert out.getvalue() == b"".join(bytes(p) for p in pieces)


def test_gathered_bytes_go_on_once_there_are_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard_writer, "GATHERED", 100)
    out = io.BytesIO()
    stream = Coalescer(out)
    for _ in range(11):
        stream.write(b"x" * 10)
    assert len(out.getvalue()) == 100  # the tenth write reached the threshold
