"""Facts about this machine's devices, learned without initialising CUDA.

Forked workers can only use CUDA if the parent never initialised it, so counting GPUs must not go through
the CUDA runtime (``torch.cuda.device_count()`` may, and then a later fork is unusable). This module asks
NVML instead, through NVIDIA's binding (:mod:`notebook_accel.nvml`), and falls back to
``nvidia-smi --query-gpu`` when NVML cannot answer. Neither creates a CUDA context.

``CUDA_VISIBLE_DEVICES`` is honoured the way CUDA does: entries are indices or (prefixes of) UUIDs,
listed in the order given, and the list stops at the first entry that matches no device. The ``index`` of a
:class:`GpuInfo` is therefore the CUDA device index a process sees (``cuda:<index>``).

Nothing here imports torch.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, replace

from notebook_accel import environment
from notebook_accel.nvml import Nvml

__all__ = ["GpuInfo", "detect_gpus", "visible_gpu_count", "cpu_count", "supports_bf16"]

_SMI_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as this process sees it.

    Attributes:
        index: the CUDA device index in this process (after ``CUDA_VISIBLE_DEVICES``).
        name: the product name, e.g. ``"NVIDIA H100 80GB HBM3"``.
        total_memory_bytes: memory size in bytes.
        compute_capability: ``(major, minor)``, ``None`` when the driver does not say.
        uuid: the device's UUID (``"GPU-..."``), empty when unknown.
    """

    index: int
    name: str
    total_memory_bytes: int
    compute_capability: tuple[int, int] | None
    uuid: str = ""


def _load_nvml() -> Nvml | None:
    """An NVML session, or ``None`` when the binding or the driver is missing."""
    return Nvml.open()


def _nvml_gpus(session: Nvml) -> list[GpuInfo] | None:
    """Every physical GPU via NVML (index = physical index), or ``None`` when NVML cannot list them."""
    try:
        listed = session.physical_gpus()
    finally:
        session.close()
    if listed is None:
        return None
    return [GpuInfo(g.index, g.name, g.total_memory_bytes, g.compute_capability, g.uuid) for g in listed]


def _parse_smi_line(line: str) -> GpuInfo | None:
    """One ``index, name, memory.total [MiB], uuid[, compute_cap]`` row of nvidia-smi, else ``None``."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 4:
        return None
    try:
        index, memory_mib = int(parts[0]), int(float(parts[2]))
    except ValueError:
        return None
    capability: tuple[int, int] | None = None
    if len(parts) > 4 and "." in parts[4]:
        major, _, minor = parts[4].partition(".")
        if major.isdigit() and minor.isdigit():
            capability = (int(major), int(minor))
    return GpuInfo(index, parts[1], memory_mib * 1024 * 1024, capability, parts[3])


def _smi_gpus() -> list[GpuInfo]:
    """Every physical GPU via ``nvidia-smi`` (older drivers lack ``compute_cap``: asked for separately)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    for fields in ("index,name,memory.total,uuid,compute_cap", "index,name,memory.total,uuid"):
        try:
            result = subprocess.run(
                [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=_SMI_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return []
        if result.returncode == 0:
            return [gpu for gpu in map(_parse_smi_line, result.stdout.splitlines()) if gpu is not None]
    return []


@functools.lru_cache(maxsize=1)
def _physical_gpus() -> tuple[GpuInfo, ...]:
    """Every GPU of the machine, physical indices; cached (GPUs do not come and go during a session)."""
    session = _load_nvml()
    gpus = _nvml_gpus(session) if session is not None else None
    if gpus is None:
        gpus = _smi_gpus()
    return tuple(gpus)


def _select_visible(physical: tuple[GpuInfo, ...], visible: list[str] | None) -> list[GpuInfo]:
    """Apply ``CUDA_VISIBLE_DEVICES`` entries (indices or UUID prefixes) and renumber from 0."""
    if visible is None:
        return list(physical)
    chosen: list[GpuInfo] = []
    for entry in visible:
        if entry.lstrip("-").isdigit():
            match = next((g for g in physical if g.index == int(entry)), None)
        else:
            match = next((g for g in physical if g.uuid and g.uuid.startswith(entry)), None)
        if match is None or match in chosen:
            break  # CUDA stops at the first invalid (or repeated) entry
        chosen.append(match)
    return [replace(gpu, index=i) for i, gpu in enumerate(chosen)]


def detect_gpus() -> list[GpuInfo]:
    """The GPUs this process can use, in CUDA order, without initialising CUDA.

    Returns:
        One :class:`GpuInfo` per visible GPU (``[]`` without a driver or with ``CUDA_VISIBLE_DEVICES=""``).

    Example:
        >>> [gpu.name for gpu in detect_gpus()]   # doctest: +SKIP
        ['NVIDIA H100 80GB HBM3']
    """
    return _select_visible(_physical_gpus(), environment.cuda_visible_devices())


def visible_gpu_count() -> int:
    """How many CUDA devices this process would see (``CUDA_VISIBLE_DEVICES`` honoured); 0 without a driver.

    Safe to call before forking: it uses NVML / nvidia-smi, never the CUDA runtime.

    Example:
        >>> visible_gpu_count() >= 0
        True
    """
    return len(detect_gpus())


def cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. under ``taskset`` or a container), at least 1.

    Example:
        >>> cpu_count() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def supports_bf16(gpus: list[GpuInfo]) -> bool:
    """Whether bf16 mixed precision runs natively on ``gpus`` (compute capability 8.0+); True on CPU (``[]``).

    A GPU whose capability is unknown counts as not supporting it.

    Example:
        >>> supports_bf16([])
        True
    """
    if not gpus:
        return True
    return all(g.compute_capability is not None and g.compute_capability >= (8, 0) for g in gpus)
