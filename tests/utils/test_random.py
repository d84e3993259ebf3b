"""set_seed and the accelerate.utils-compatible names."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import notebook_accel.utils as utils
from notebook_accel.utils import set_seed


def test_seeds_every_rng() -> None:
    set_seed(3)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    set_seed(3)
    assert first == (random.random(), np.random.rand(), torch.rand(1).item())


def test_device_specific_uses_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    set_seed(3, device_specific=True)
    a = torch.rand(1)
    set_seed(4)
    assert torch.equal(a, torch.rand(1))


def test_deterministic_flag() -> None:
    set_seed(0, deterministic=True)
    try:
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_bad_seed() -> None:
    with pytest.raises(TypeError, match="must be an int"):
        set_seed("1")  # type: ignore[arg-type]


def test_compatible_names_resolve() -> None:
    for name in utils.__all__:
        assert getattr(utils, name) is not None
    assert "gather" in dir(utils)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        utils.nope  # noqa: B018
