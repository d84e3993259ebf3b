"""The snapshot of a background save: one CPU copy, storage by storage, pinned and non-blocking for GPU tensors."""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Any

import torch

from notebook_accel.checkpointing import staging


def _saved(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _tied() -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[1].weight = model[0].weight
    return model


def test_a_snapshot_saves_to_the_same_bytes_and_keeps_tied_storages_tied() -> None:
    model = _tied()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    states = {0: model.state_dict(), 1: optimizer.state_dict(), 2: {"view": torch.arange(10.0)[2:5]}}
    copied = staging.stage(states)
    for i in states:
        assert _saved(copied[i]) == _saved(states[i])
    assert isinstance(copied[0], OrderedDict) and copied[0]._metadata == states[0]._metadata  # type: ignore[attr-defined]
    assert copied[0]["0.weight"].untyped_storage().data_ptr() == copied[0]["1.weight"].untyped_storage().data_ptr()
    assert copied[2]["view"].storage_offset() == 2 and copied[2]["view"].untyped_storage().nbytes() == 40


def test_a_snapshot_does_not_follow_the_live_state() -> None:
    model = torch.nn.Linear(3, 3)
    copied = staging.stage({0: model.state_dict()})[0]
    before = copied["weight"].clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    assert torch.equal(copied["weight"], before)


def test_state_bytes_counts_each_storage_once() -> None:
    model = _tied()
    assert staging.state_bytes(model.state_dict()) == (16 + 4 + 4) * 4  # one 4x4 weight (tied), two biases
    base = torch.zeros(100)
    assert staging.state_bytes({"a": base[:10], "b": base[50:]}) == 400


def test_gpu_tensors_are_copied_into_pinned_memory_without_blocking_then_synchronised(monkeypatch) -> None:
    """No GPU here: the device test is a mock of what stage asks torch for (pinned buffers, non-blocking copies,
    one synchronisation before returning)."""
    calls: dict[str, list[Any]] = {"pin": [], "non_blocking": [], "sync": []}
    real_empty, real_copy = torch.empty, torch.Tensor.copy_

    def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        calls["pin"].append(pin_memory)
        return real_empty(*args, **kwargs)

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        calls["non_blocking"].append(non_blocking)
        return real_copy(self, src)

    monkeypatch.setattr(staging, "_on_gpu", lambda tensor: True)
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls["sync"].append(a))
    state = {"w": torch.randn(3, 3), "b": torch.randn(3)}
    copied = staging.stage({0: state})[0]
    assert torch.equal(copied["w"], state["w"]) and torch.equal(copied["b"], state["b"])
    assert True in calls["pin"] and calls["non_blocking"] == [True, True] and len(calls["sync"]) == 1


def test_a_pool_lends_the_same_buffers_to_the_next_snapshot_once_given_back() -> None:
    pool = staging.StagingPool()
    model = torch.nn.Linear(8, 8)
    first = staging.stage({0: model.state_dict()}, pool=pool)[0]
    pointer = first["weight"].untyped_storage().data_ptr()
    assert pool.free_bytes() == 0  # lent while the first snapshot is written
    pool.give_back()
    assert pool.free_bytes() == (64 + 8) * 4
    with torch.no_grad():
        model.weight.add_(1.0)
    second = staging.stage({0: model.state_dict()}, pool=pool)[0]
    assert second["weight"].untyped_storage().data_ptr() == pointer  # no new buffer, no first touch
    assert torch.equal(second["weight"], model.weight) and pool.free_bytes() == 0
    pool.give_back()
    pool.clear()
    assert pool.free_bytes() == 0
