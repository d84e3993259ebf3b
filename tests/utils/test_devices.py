"""accelerate 1.16's device helpers: CPU and CUDA answers (CUDA mocked), never initialising CUDA to answer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from notebook_accel.utils import (
    get_accelerator_free_memory,
    get_distributed_backend,
    get_torch_accelerator_backend,
    normalize_device,
)
from notebook_accel.utils import devices


def test_no_gpu_means_no_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "is_cuda_available", lambda: False)
    assert get_torch_accelerator_backend() == (None, None)


def test_a_usable_gpu_is_cuda_with_torch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    assert get_torch_accelerator_backend() == ("cuda", torch.cuda)


def test_without_the_check_a_cuda_build_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []
    monkeypatch.setattr(devices, "is_cuda_available", lambda: asked.append(True) or False)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    assert get_torch_accelerator_backend(check_available=False) == ("cuda", torch.cuda) and asked == []
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert get_torch_accelerator_backend(check_available=False) == (None, None)
    with pytest.raises(TypeError, match="pass True or False"):
        get_torch_accelerator_backend("yes")  # type: ignore[arg-type]


def test_the_answer_does_not_initialise_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel asks before forking: nothing may call into the CUDA runtime (NVML answers instead)."""
    def forbidden(*args: object) -> None:
        raise AssertionError("CUDA was initialised")

    monkeypatch.setattr(torch.cuda, "init", forbidden)
    monkeypatch.setattr(torch.cuda, "is_available", forbidden)
    monkeypatch.setattr(torch.cuda, "device_count", forbidden)
    monkeypatch.setattr(devices, "is_cuda_available", lambda: True)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    assert get_torch_accelerator_backend()[0] == "cuda"


def test_distributed_backends() -> None:
    assert get_distributed_backend("cuda") == "nccl" and get_distributed_backend(None) is None
    assert get_distributed_backend("cpu") is None and get_distributed_backend("npu") == "hccl"
    with pytest.raises(TypeError, match="pass a device type"):
        get_distributed_backend(0)  # type: ignore[arg-type]


def test_normalize_device_keeps_cpu_and_cuda_forms() -> None:
    assert normalize_device(0) == 0 and normalize_device("cuda:1") == "cuda:1" and normalize_device("cpu") == "cpu"
    assert normalize_device(torch.device("cpu")) == torch.device("cpu")


def test_free_memory_through_the_module_returned() -> None:
    cuda_like = SimpleNamespace(mem_get_info=lambda index: (1_000 + index, 8_000))
    assert get_accelerator_free_memory(cuda_like, 2) == 1_002  # type: ignore[arg-type]
    accelerator_like = SimpleNamespace(get_memory_info=lambda index: (5_000, 9_000))
    assert get_accelerator_free_memory(accelerator_like, 0) == 5_000  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot tell free memory"):
        get_accelerator_free_memory(None, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the device's index, an int"):
        get_accelerator_free_memory(cuda_like, "0")  # type: ignore[arg-type]
