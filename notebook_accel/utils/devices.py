"""accelerate 1.16's device-neutral helpers: which accelerator this process trains on, its collective backend, device
names, and free device memory.

accelerate 1.16 asks ``get_torch_accelerator_backend()`` wherever 1.15 branched on ``torch.cuda``/``is_xpu_available``
(its ``test_script.py`` and ``test_cli.py`` included). This library trains on CPU and CUDA only, so the answer is
the accelerator it can train on here: ``("cuda", torch.cuda)`` when a CUDA GPU is usable, else ``(None, None)``. The question is answered through NVML (:func:`~notebook_accel.utils.is_cuda_available`), so
it is safe in a notebook kernel before the launcher forks: CUDA is not initialised.

Example:
    >>> from notebook_accel.utils import get_distributed_backend, get_torch_accelerator_backend
    >>> device_type, module = get_torch_accelerator_backend()   # on a machine without a GPU
    >>> device_type, module, get_distributed_backend(device_type)
    (None, None, None)
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from notebook_accel.utils.availability import is_cuda_available, is_xccl_available

__all__ = ["get_torch_accelerator_backend", "get_distributed_backend", "normalize_device",
           "get_accelerator_free_memory", "DISTRIBUTED_BACKENDS"]

#: Each accelerator type's collective backend, as accelerate 1.16 maps them (``TORCH_DISTRIBUTED_BACKENDS``); only
#: ``cuda`` trains here, the others are listed so that the answer for them is accelerate's.
DISTRIBUTED_BACKENDS: dict[str, str] = {
    "cuda": "nccl", "mlu": "cncl", "sdaa": "tccl", "musa": "mccl", "npu": "hccl", "hpu": "hccl", "xpu": "xccl",
    "neuron": "neuron",
}


def get_torch_accelerator_backend(check_available: bool = True) -> tuple[str, ModuleType] | tuple[None, None]:
    """The accelerator this process trains on and its torch module: ``("cuda", torch.cuda)`` or ``(None, None)``.

    Args:
        check_available: ``True`` (accelerate's default): CUDA must be usable by this process (a GPU visible
            through ``CUDA_VISIBLE_DEVICES``, asked through NVML). ``False``: only that this torch is a CUDA or ROCm
            build, as accelerate answers when choosing a launcher before forking.

    Other device types (MPS, XPU, NPU, ...) are answered ``(None, None)``: this library trains on the CPU there. As in
    accelerate, the answer is the machine's, not a run's: an ``Accelerator(cpu=True)`` on a GPU machine still gets
    ``"cuda"`` here, so compare with ``accelerator.device.type`` before using the module (accelerate's scripts do).
    """
    if not isinstance(check_available, bool):
        raise TypeError(f"get_torch_accelerator_backend(check_available={check_available!r}): pass True or False")
    built = torch.backends.cuda.is_built() or torch.version.hip is not None
    if built and (not check_available or is_cuda_available()):
        return "cuda", torch.cuda
    return None, None


def get_distributed_backend(device_type: str | None) -> str | None:
    """The collective backend for ``device_type`` (``"cuda"`` -> ``"nccl"``), ``None`` for the CPU (``None``) or a
    type without one (accelerate's table; ``"xpu"`` only where this torch has XCCL).

    Example:
        >>> get_distributed_backend("cuda"), get_distributed_backend(None)
        ('nccl', None)
    """
    if device_type is not None and not isinstance(device_type, str):
        raise TypeError(f"get_distributed_backend(device_type={device_type!r}): pass a device type such as 'cuda', "
                        "or None")
    if device_type == "xpu" and not is_xccl_available():
        return None
    return DISTRIBUTED_BACKENDS.get(device_type) if device_type is not None else None


def normalize_device(device: Any) -> Any:
    """``device`` as torch takes it for ``.to()``. On CPU and CUDA, the devices here, every form already is one, so
    it comes back unchanged, as accelerate returns it there: an int stays a CUDA index (accelerate rewrites names
    only for NPU, HPU and other accelerators this library does not train on)."""
    return device


def get_accelerator_free_memory(device_module: ModuleType, device_index: int) -> int:
    """Free memory in bytes of device ``device_index``, asked through ``device_module`` (the module
    :func:`get_torch_accelerator_backend` returned: ``torch.cuda``).

    Raises:
        TypeError: ``device_index`` is not an int.
        ValueError: ``device_module`` has no way to tell free memory (``None``, on a machine without an accelerator).
    """
    if isinstance(device_index, bool) or not isinstance(device_index, int):
        raise TypeError(f"get_accelerator_free_memory(device_index={device_index!r}): pass the device's index, an int")
    mem_get_info = getattr(device_module, "mem_get_info", None)
    if mem_get_info is not None:
        return int(mem_get_info(device_index)[0])
    memory_info = getattr(device_module, "get_memory_info", None)  # torch.accelerator (torch 2.10 and newer)
    if memory_info is not None:
        return int(memory_info(device_index)[0])
    raise ValueError(f"get_accelerator_free_memory: {device_module!r} cannot tell free memory; pass the module that "
                     "get_torch_accelerator_backend() returned (torch.cuda), on a machine with a GPU")
