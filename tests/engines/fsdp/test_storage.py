"""The DCP reader of one process: records read once, and a record that fills a tensor whole is not copied."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import xxhash

from notebook_accel.checkpointing import CheckpointError, verified_reads
from notebook_accel.checkpointing.verified_reads import Expected, verifying
from notebook_accel.engines.fsdp.storage import load_sharded, save_sharded


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    return {"model": {"w": torch.randn(64, 32), "b": torch.randn(64)},
            "optimizer_0": {"state": {"w": {"exp_avg": torch.randn(64, 32), "step": torch.tensor(3.0)}},
                            "param_groups": [{"lr": 0.1, "params": ["w"]}]}}


def _template() -> dict[str, Any]:
    return {"model": {"w": torch.zeros(64, 32), "b": torch.zeros(64)},
            "optimizer_0": {"state": {"w": {"exp_avg": torch.zeros(64, 32), "step": torch.tensor(0.0)}},
                            "param_groups": [{"lr": 0.5, "params": ["w"]}]}}


def test_whole_records_become_the_values_and_the_template_is_never_written(tmp_path: Path) -> None:
    saved = _state()
    save_sharded(saved, str(tmp_path), "fsdp_state_0", "model 0")
    template = _template()
    empty = {"w": template["model"]["w"], "exp_avg": template["optimizer_0"]["state"]["w"]["exp_avg"]}
    loaded = load_sharded(template, str(tmp_path), "fsdp_state_0", "model 0")
    assert torch.equal(loaded["model"]["w"], saved["model"]["w"])
    assert torch.equal(loaded["optimizer_0"]["state"]["w"]["exp_avg"], saved["optimizer_0"]["state"]["w"]["exp_avg"])
    assert loaded["optimizer_0"]["state"]["w"]["step"].item() == 3.0
    assert loaded["optimizer_0"]["param_groups"][0]["lr"] == 0.1
    # the values are the tensors the records were read into: the template's were not copied into
    assert loaded["model"]["w"] is not empty["w"] and not empty["w"].any()
    assert loaded["optimizer_0"]["state"]["w"]["exp_avg"] is not empty["exp_avg"] and not empty["exp_avg"].any()


@pytest.mark.parametrize("overlap", [1 << 30, 64], ids=["hashed-inline", "hashed-on-the-helper"])
def test_the_reader_checks_a_shard_while_reading_it_wherever_it_is_hashed(tmp_path: Path, overlap: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard's checksum is checked during the read, its records hashed on the reading thread or (large ones)
    on the helper: a good file loads and is crossed off, a flipped byte inside a record is refused."""
    monkeypatch.setattr(verified_reads, "_OVERLAP", overlap)
    save_sharded(_state(), str(tmp_path), "fsdp_state_0", "model 0")
    (shard,) = [p for p in tmp_path.iterdir() if p.suffix == ".distcp"]
    data = shard.read_bytes()
    expected: dict[str, Expected] = {str(shard.resolve()): ("xxh3_128", xxhash.xxh3_128(data).hexdigest(), len(data))}
    with verifying(dict(expected)) as left:
        loaded = load_sharded(_template(), str(tmp_path), "fsdp_state_0", "model 0")
    assert left == {} and torch.equal(loaded["model"]["w"], _state()["model"]["w"])
    damaged = bytearray(data)
    damaged[data.index(_state()["model"]["w"].numpy().tobytes()[:64]) + 100] ^= 1
    shard.write_bytes(bytes(damaged))
    with verifying(dict(expected)), pytest.raises(CheckpointError, match="XXH3-128 checksum differs"):
        load_sharded(_template(), str(tmp_path), "fsdp_state_0", "model 0")
    assert not [t for t in threading.enumerate() if t.name.startswith("checkpoint-verify")]
