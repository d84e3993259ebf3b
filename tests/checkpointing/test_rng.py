"""RNG capture/restore, weights_only-safe, with the CUDA path mocked (there is no GPU here)."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch

from notebook_accel.checkpointing import rng
from notebook_accel.checkpointing.errors import CheckpointError


def _draws() -> tuple:
    return random.random(), random.gauss(0, 1), np.random.rand(3).tolist(), np.random.randn(), torch.rand(3).tolist()


def test_round_trip_through_weights_only_load() -> None:
    random.gauss(0, 1), np.random.randn()  # leave a cached gaussian in both generators
    state = rng.capture_rng_state()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    expected = _draws()
    rng.restore_rng_state(torch.load(buffer, weights_only=True))
    assert _draws() == expected


def test_malformed_state_is_refused() -> None:
    with pytest.raises(CheckpointError, match="not an RNG state"):
        rng.restore_rng_state({"python": None})


class _FakeCuda:
    """torch.cuda as seen on a machine with ``count`` GPUs."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.states = [torch.full((16,), i, dtype=torch.uint8) for i in range(count)]
        self.restored: list[torch.Tensor] | None = None

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return self.states

    def set_rng_state_all(self, states: list[torch.Tensor]) -> None:
        self.restored = states


def test_cuda_states_are_captured_and_restored(monkeypatch) -> None:
    fake = _FakeCuda(2)
    monkeypatch.setattr(torch, "cuda", fake)
    state = rng.capture_rng_state()
    assert [t.tolist() for t in state["cuda"]] == [t.tolist() for t in fake.states]
    rng.restore_rng_state(state)
    assert fake.restored is not None and len(fake.restored) == 2


def test_cuda_device_count_mismatch(monkeypatch) -> None:
    monkeypatch.setattr(torch, "cuda", _FakeCuda(2))
    state = rng.capture_rng_state()
    monkeypatch.setattr(torch, "cuda", _FakeCuda(1))
    with pytest.raises(CheckpointError, match="2 visible CUDA device.*sees 1.*CUDA_VISIBLE_DEVICES"):
        rng.restore_rng_state(state)


def test_cuda_state_skipped_without_cuda(monkeypatch) -> None:
    monkeypatch.setattr(torch, "cuda", _FakeCuda(2))
    state = rng.capture_rng_state()
    monkeypatch.undo()
    monkeypatch.setattr(torch, "cuda", _FakeCuda(0))
    rng.restore_rng_state(state)  # CPU streams restored, CUDA part ignored
