"""Watching the machine while a run trains: each worker's CPU and memory (its whole process tree), the machine's
free memory, and each GPU's utilisation, memory, temperature and power (through NVML, never the CUDA runtime).

The launcher samples in the kernel (:class:`~notebook_accel.monitor.sampler.SystemSampler`) and hands a
:class:`~notebook_accel.events.SystemSample` to the sink about once a second; nothing runs in the workers.
"""

from __future__ import annotations

from notebook_accel.monitor.host import TreeMeter, machine_memory
from notebook_accel.monitor.sampler import SystemSampler, device_memory_note, memory_death_note
from notebook_accel.nvml import GpuReading, Nvml

__all__ = ["GpuReading", "Nvml", "SystemSampler", "TreeMeter", "device_memory_note", "machine_memory",
           "memory_death_note"]
