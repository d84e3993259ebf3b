"""Device facts without CUDA: NVML's binding mocked, nvidia-smi mocked, CUDA_VISIBLE_DEVICES honoured."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from notebook_accel import hardware
from notebook_accel.hardware import GpuInfo
from notebook_accel.nvml import Nvml

PHYSICAL = [
    ("NVIDIA A100-SXM4-80GB", 80 * 2**30, (8, 0), "GPU-aaaa-1111"),
    ("Tesla V100-SXM2-16GB", 16 * 2**30, (7, 0), "GPU-bbbb-2222"),
    ("NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0), "GPU-cccc-3333"),
]


class FakeNvml:
    """Answers the calls of NVIDIA's Python binding (pynvml) that hardware.py makes; raises as it does."""

    def __init__(self, gpus: list[tuple[str, int, tuple[int, int], str]], init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.init_fails:
            raise RuntimeError("NVML_ERROR_DRIVER_NOT_LOADED")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:  # noqa: N802 - older bindings return bytes
        return self.gpus[handle][0].encode()

    def nvmlDeviceGetUUID(self, handle: int) -> str:  # noqa: N802
        return self.gpus[handle][3]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(total=self.gpus[handle][1], used=0, free=self.gpus[handle][1])

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:  # noqa: N802
        return self.gpus[handle][2]


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hardware._physical_gpus.cache_clear()
    yield
    hardware._physical_gpus.cache_clear()


def nvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml | None) -> None:
    monkeypatch.setattr(hardware, "_load_nvml", lambda: None if fake is None else Nvml.open(fake))


def test_nvml_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(PHYSICAL)
    nvml(monkeypatch, fake)
    gpus = hardware.detect_gpus()
    assert [g.index for g in gpus] == [0, 1, 2]
    assert gpus[0] == GpuInfo(0, "NVIDIA A100-SXM4-80GB", 80 * 2**30, (8, 0), "GPU-aaaa-1111")
    assert hardware.visible_gpu_count() == 3
    assert fake.shutdowns == 1  # cached: NVML asked once


@pytest.mark.parametrize(
    ("visible", "names"),
    [
        ("2,0", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]),
        ("1", ["Tesla V100-SXM2-16GB"]),
        ("", []),
        ("1,7,0", ["Tesla V100-SXM2-16GB"]),  # CUDA stops at the first invalid entry
        ("GPU-cccc", ["NVIDIA H100 80GB HBM3"]),  # a UUID prefix
        ("0,0", ["NVIDIA A100-SXM4-80GB"]),
    ],
)
def test_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, visible: str, names: list[str]) -> None:
    nvml(monkeypatch, FakeNvml(PHYSICAL))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    gpus = hardware.detect_gpus()
    assert [g.name for g in gpus] == names
    assert [g.index for g in gpus] == list(range(len(names)))
    assert hardware.visible_gpu_count() == len(names)


def smi(monkeypatch: pytest.MonkeyPatch, outputs: dict[bool, subprocess.CompletedProcess[str]]) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(hardware.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return outputs["compute_cap" in cmd[1]]

    monkeypatch.setattr(hardware.subprocess, "run", run)
    return calls


def test_nvidia_smi_fallback_when_nvml_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml(monkeypatch, FakeNvml(PHYSICAL, init_fails=True))
    out = "0, NVIDIA A100-SXM4-80GB, 81920, GPU-aaaa, 8.0\n1, Tesla T4, 15360, GPU-bbbb, 7.5\n"
    smi(monkeypatch, {True: subprocess.CompletedProcess([], 0, out, "")})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert hardware.detect_gpus() == [GpuInfo(0, "Tesla T4", 15360 * 2**20, (7, 5), "GPU-bbbb")]


class OldNvml(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - the binding raises NVMLError_FunctionNotFound
        raise RuntimeError("Function Not Found")


def test_old_driver_without_an_nvml_function_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml(monkeypatch, OldNvml(PHYSICAL))
    smi(monkeypatch, {True: subprocess.CompletedProcess([], 0, "0, Tesla P100, 16280, GPU-pppp, 6.0\n", "")})
    assert [g.name for g in hardware.detect_gpus()] == ["Tesla P100"]


def test_old_nvidia_smi_without_compute_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml(monkeypatch, None)
    calls = smi(
        monkeypatch,
        {
            True: subprocess.CompletedProcess([], 2, "", "Field \"compute_cap\" is not a valid field"),
            False: subprocess.CompletedProcess([], 0, "0, Tesla K80, 11441, GPU-kkkk\nbad line\n", ""),
        },
    )
    assert hardware.detect_gpus() == [GpuInfo(0, "Tesla K80", 11441 * 2**20, None, "GPU-kkkk")]
    assert len(calls) == 2


def test_no_driver_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml(monkeypatch, None)
    monkeypatch.setattr(hardware.shutil, "which", lambda name: None)
    assert hardware.detect_gpus() == [] and hardware.visible_gpu_count() == 0


def test_real_machine_answers_without_initialising_cuda() -> None:
    import torch

    assert hardware.visible_gpu_count() >= 0
    assert not torch.cuda.is_initialized()


def test_cpu_count_honours_affinity() -> None:
    import os

    assert hardware.cpu_count() == len(os.sched_getaffinity(0))


def test_supports_bf16() -> None:
    a100 = GpuInfo(0, "A100", 1, (8, 0))
    v100 = GpuInfo(1, "V100", 1, (7, 0))
    unknown = GpuInfo(2, "?", 1, None)
    assert hardware.supports_bf16([]) is True
    assert hardware.supports_bf16([a100]) is True
    assert hardware.supports_bf16([a100, v100]) is False
    assert hardware.supports_bf16([unknown]) is False
