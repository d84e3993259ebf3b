"""Helpers for testing training code, under accelerate's ``accelerate.test_utils`` names.

Tests written for accelerate import a toy regression problem and a few checks from ``accelerate.test_utils``;
with ``from notebook_accel.test_utils import ...`` they run unchanged. Importing this module touches no CUDA
(``torch_device`` is decided through NVML), so it is safe in a notebook before the launcher forks.

Example:
    >>> from notebook_accel.test_utils import RegressionDataset, RegressionModel
    >>> data = RegressionDataset(length=4, seed=0)
    >>> model = RegressionModel(a=1, b=0)
    >>> model(x=torch.tensor(data[0]["x"])).item() == float(data[0]["x"])
    True
"""

from __future__ import annotations

import contextlib
import unittest
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch

from notebook_accel.hardware import visible_gpu_count
from notebook_accel.utils.availability import is_bnb_available, is_cuda_available

__all__ = [
    "RegressionDataset",
    "RegressionModel",
    "are_the_same_tensors",
    "assert_exception",
    "device_count",
    "require_bnb",
    "require_cpu",
    "require_cuda",
    "require_multi_gpu",
    "torch_device",
]

F = TypeVar("F", bound=Callable[..., Any])

torch_device: str = "cuda" if visible_gpu_count() > 0 else "cpu"
"""``"cuda"`` when this process sees a GPU, else ``"cpu"`` (decided without initialising CUDA)."""

device_count: int = max(1, visible_gpu_count())
"""How many devices of ``torch_device``'s kind this process sees (1 on CPU)."""


class RegressionDataset:
    """``length`` noisy points on the line ``y = a*x + b``, as float32 numpy scalars in ``{"x": ..., "y": ...}``.

    Args:
        a: slope. b: intercept. length: number of points.
        seed: seed of the numpy generator that draws x and the noise (None: different every time).
    """

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.length = length
        self.x = rng.normal(size=(length,)).astype(np.float32)
        self.y = (a * self.x + b + rng.normal(scale=0.1, size=(length,))).astype(np.float32)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": self.x[index], "y": self.y[index]}


class RegressionModel(torch.nn.Module):
    """``forward(x) = x * a + b`` with two scalar parameters ``a`` and ``b`` (float32)."""

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor(float(a)))
        self.b = torch.nn.Parameter(torch.tensor(float(b)))
        self.first_batch = True

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        """``x * a + b``; prints the dtypes once, on the first batch (shows what mixed precision did)."""
        if x is None:
            raise TypeError("RegressionModel.forward needs x=, a tensor of inputs")
        if self.first_batch:
            print(f"Model dtype: {self.a.dtype}, {self.b.dtype}. Input dtype: {x.dtype}")
            self.first_batch = False
        return x * self.a + self.b


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is equal (same shape and values) on every process; True in a single process."""
    from notebook_accel.ops import gather_object

    mine = tensor.detach().cpu()
    return all(torch.equal(other, mine) for other in gather_object([mine]))


@contextlib.contextmanager
def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
    """Context manager: the body must raise ``exception_class`` (with ``msg`` in its text, when given).

    Raises:
        AssertionError: the body raised nothing, another exception type, or a message without ``msg``.
    """
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - compared below
        if not isinstance(exc, exception_class):
            raise AssertionError(f"expected {exception_class.__name__}, got {type(exc).__name__}: {exc}") from exc
        if msg is not None and msg not in str(exc):
            raise AssertionError(f"expected {msg!r} in the {exception_class.__name__} message, got {exc}") from exc
    else:
        raise AssertionError(f"expected {exception_class.__name__}, but the body raised nothing")


def _skip_unless(condition: bool, reason: str) -> Callable[[F], F]:
    """``unittest.skipUnless`` (pytest honours it too), typed for decorators."""
    return unittest.skipUnless(condition, reason)


def require_bnb(test: F) -> F:
    """Skip ``test`` unless bitsandbytes is installed."""
    return _skip_unless(is_bnb_available(), "test requires bitsandbytes")(test)


def require_cuda(test: F) -> F:
    """Skip ``test`` unless a CUDA GPU is visible."""
    return _skip_unless(is_cuda_available(), "test requires a CUDA GPU")(test)


def require_cpu(test: F) -> F:
    """Skip ``test`` when a GPU is visible (it checks CPU-only behaviour)."""
    return _skip_unless(torch_device == "cpu", "test requires a machine without GPUs")(test)


def require_multi_gpu(test: F) -> F:
    """Skip ``test`` unless at least two CUDA GPUs are visible."""
    return _skip_unless(visible_gpu_count() > 1, "test requires two or more CUDA GPUs")(test)
