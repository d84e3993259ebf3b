"""Device facts without CUDA: NVML mocked through ctypes, nvidia-smi mocked, CUDA_VISIBLE_DEVICES honoured."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from notebook_accel import hardware
from notebook_accel.hardware import GpuInfo

PHYSICAL = [
    ("NVIDIA A100-SXM4-80GB", 80 * 2**30, (8, 0), "GPU-aaaa-1111"),
    ("Tesla V100-SXM2-16GB", 16 * 2**30, (7, 0), "GPU-bbbb-2222"),
    ("NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0), "GPU-cccc-3333"),
]


class FakeNvml:
    """Answers the NVML calls hardware.py makes, writing into the ctypes arguments like the real library."""

    def __init__(self, gpus: list[tuple[str, int, tuple[int, int], str]], init_status: int = 0) -> None:
        self.gpus = gpus
        self.init_status = init_status
        self.shutdowns = 0

    def nvmlInit_v2(self) -> int:  # noqa: N802 - NVML's names
        return self.init_status

    def nvmlShutdown(self) -> int:  # noqa: N802
        self.shutdowns += 1
        return 0

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:  # noqa: N802
        count._obj.value = len(self.gpus)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:  # noqa: N802
        handle._obj.value = index + 1
        return 0

    def _gpu(self, handle: Any) -> tuple[str, int, tuple[int, int], str]:
        return self.gpus[handle.value - 1]

    def nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:  # noqa: N802
        buf.value = self._gpu(handle)[0].encode()
        return 0

    def nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:  # noqa: N802
        buf.value = self._gpu(handle)[3].encode()
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle: Any, memory: Any) -> int:  # noqa: N802
        memory._obj.total = self._gpu(handle)[1]
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:  # noqa: N802
        major._obj.value, minor._obj.value = self._gpu(handle)[2]
        return 0


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    hardware._physical_gpus.cache_clear()
    yield
    hardware._physical_gpus.cache_clear()


def nvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml | None) -> None:
    monkeypatch.setattr(hardware, "_load_nvml", lambda: fake)


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
    nvml(monkeypatch, FakeNvml(PHYSICAL, init_status=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    out = "0, NVIDIA A100-SXM4-80GB, 81920, GPU-aaaa, 8.0\n1, Tesla T4, 15360, GPU-bbbb, 7.5\n"
    smi(monkeypatch, {True: subprocess.CompletedProcess([], 0, out, "")})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert hardware.detect_gpus() == [GpuInfo(0, "Tesla T4", 15360 * 2**20, (7, 5), "GPU-bbbb")]


class OldNvml(FakeNvml):
    def __getattribute__(self, name: str) -> Any:
        if name == "nvmlDeviceGetCount_v2":
            raise AttributeError("undefined symbol: nvmlDeviceGetCount_v2")
        return super().__getattribute__(name)


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
