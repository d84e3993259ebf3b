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


def test_a_load_of_tensors_and_plain_values_unpickles_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of a model and its AdamW state is a tensor or plain data: each is read without
    ``torch.load`` (tensors straight into their memory, values from their opcodes), and loads as saved. A
    value that is not plain data still goes through ``torch.load``. The optimizer's state is keyed by ints here
    (as ``optimizer.state_dict()`` has it), which DCP's paths name as strings: those tensors are written into the
    template in place, not put beside it under a new key (they were left unloaded before)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.9))
    model(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "tags": {"a", "b"}}
    save_sharded(saved, str(tmp_path), "fsdp_state_0", "model 0")
    template = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()},
                "optimizer": torch.optim.AdamW(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
                                               .parameters()).state_dict(),
                "tags": {"x"}}
    template["optimizer"]["state"] = {k: {n: torch.zeros_like(t) for n, t in s.items()}
                                      for k, s in optimizer.state_dict()["state"].items()}
    loads: list[object] = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    loaded = load_sharded(template, str(tmp_path), "fsdp_state_0", "model 0")
    assert len(loads) == 1  # the set only
    for key, value in model.state_dict().items():
        assert torch.equal(loaded["model"][key], value)
    for index, states in optimizer.state_dict()["state"].items():
        for name, value in states.items():
            assert torch.equal(loaded["optimizer"]["state"][index][name], value)
    assert loaded["optimizer"]["param_groups"] == optimizer.state_dict()["param_groups"]
    assert loaded["tags"] == {"a", "b"}
