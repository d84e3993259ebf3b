"""NVML through NVIDIA's own Python binding (``nvidia-ml-py``, imported as ``pynvml``), never the CUDA runtime.

NVML talks to the driver, not to CUDA, so reading devices here leaves the kernel able to fork CUDA workers
(the launcher's CUDA-initialised refusal keeps working). Every call is guarded: a machine without a driver, a
driver too old for one query, or a device that does not report power gives ``None`` for that figure, never an
exception. :class:`Nvml` takes the binding module as an argument so tests can hand it a fake one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["GpuReading", "Nvml", "PhysicalGpu"]


@dataclass(frozen=True)
class PhysicalGpu:
    """One GPU of the machine as NVML lists it (physical index, before ``CUDA_VISIBLE_DEVICES``)."""

    index: int
    name: str
    total_memory_bytes: int
    compute_capability: tuple[int, int] | None
    uuid: str


@dataclass(frozen=True)
class GpuReading:
    """One GPU now: utilisation %, memory used and total (bytes), temperature (°C) and power (W); ``None`` for
    a figure the device does not report."""

    utilization: float | None
    memory_used: int | None
    memory_total: int | None
    temperature: float | None
    power_watts: float | None


def _text(value: Any) -> str:
    """NVML strings arrive as ``bytes`` from older bindings and ``str`` from newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """An initialised NVML session; build it with :meth:`open` and end it with :meth:`close`.

    Example:
        >>> session = Nvml.open()          # None on a machine without an NVIDIA driver
        >>> session is None or (session.count() or 0) >= 0
        True
    """

    def __init__(self, binding: Any) -> None:
        self._nvml = binding
        self._handles: dict[str, Any] = {}

    @classmethod
    def open(cls, binding: Any = None) -> Nvml | None:
        """Initialise NVML; ``None`` when the binding is not installed or there is no driver."""
        if binding is None:
            try:
                import pynvml  # noqa: PLC0415 - at call time: an import error is an answer, not a failure

                binding = pynvml
            except ImportError:
                return None
        try:
            binding.nvmlInit()
        except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no GPUs here
            return None
        return cls(binding)

    def close(self) -> None:
        """End the NVML session (safe to call twice)."""
        if self._nvml is not None:
            self._guard(self._nvml.nvmlShutdown)
            self._nvml = None

    def _guard(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``, or ``None`` when NVML refuses it."""
        try:
            return call(*args)
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: the figure is unknown
            return None

    def count(self) -> int | None:
        """How many GPUs the machine has, ``None`` when NVML cannot say."""
        count = self._guard(self._nvml.nvmlDeviceGetCount)
        return None if count is None else int(count)

    def physical_gpus(self) -> list[PhysicalGpu] | None:
        """Every GPU of the machine with its name, memory, compute capability and UUID; ``None`` when NVML
        cannot list them (a driver too old for the query)."""
        count = self.count()
        if count is None:
            return None
        gpus = []
        for index in range(count):
            handle = self._guard(self._nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            memory = self._guard(self._nvml.nvmlDeviceGetMemoryInfo, handle)
            capability = self._guard(self._nvml.nvmlDeviceGetCudaComputeCapability, handle)
            uuid = _text(self._guard(self._nvml.nvmlDeviceGetUUID, handle) or "")
            self._handles[uuid] = handle
            gpus.append(PhysicalGpu(index, _text(self._guard(self._nvml.nvmlDeviceGetName, handle) or "GPU"),
                                    int(memory.total) if memory is not None else 0,
                                    tuple(capability) if capability is not None else None, uuid))
        return gpus

    def read(self, uuid: str) -> GpuReading | None:
        """The GPU with this UUID now, or ``None`` when NVML does not know it."""
        handle = self._handles.get(uuid) or self._guard(self._nvml.nvmlDeviceGetHandleByUUID, uuid)
        if handle is None:
            return None
        self._handles[uuid] = handle
        nvml = self._nvml
        rates = self._guard(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._guard(nvml.nvmlDeviceGetMemoryInfo, handle)
        temperature = self._guard(nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        milliwatts = self._guard(nvml.nvmlDeviceGetPowerUsage, handle)
        return GpuReading(
            utilization=float(rates.gpu) if rates is not None else None,
            memory_used=int(memory.used) if memory is not None else None,
            memory_total=int(memory.total) if memory is not None else None,
            temperature=float(temperature) if temperature is not None else None,
            power_watts=milliwatts / 1000.0 if milliwatts is not None else None,
        )
