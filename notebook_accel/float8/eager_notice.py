"""One warning when an fp8 model's forward runs on a GPU without ``torch.compile``.

torchao's float8 layers cast their inputs and weights in separate kernels unless ``torch.compile`` fuses them. On an
H100 (``benchmarks/gpu_step.py``, six 4096x4096 ``Linear`` layers, batch 8192) an eager fp8 step took 1.84x the
time of a bf16 step, and 0.97x compiled: fp8 without compile is a slowdown, which a user who asked for fp8 to go
faster would not guess. A forward pre-hook on the converted module looks at the first call: when it runs eagerly
(``torch.compiler.is_compiling()`` is false) on a CUDA device, it warns once and removes itself; under
``torch.compile`` the check is a constant the compiler folds away. torchao's emulation (any device, for testing) is
slow by design and gets no warning.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["EAGER_FP8_MESSAGE", "watch_eager_fp8"]

EAGER_FP8_MESSAGE = (
    "mixed_precision='fp8': the model's forward runs without torch.compile, where torchao's float8 casts are separate "
    "kernels: on an H100 an eager fp8 step took 1.84x the time of a bf16 step (0.97x compiled). Compile the "
    "prepared model (model = torch.compile(model)) to gain from fp8, or use mixed_precision='bf16'")


def watch_eager_fp8(model: torch.nn.Module) -> Any:
    """Warn once if ``model`` (converted to float8; an ``OptimizedModule``'s original module is watched) first runs
    forward eagerly on a GPU. Returns the hook's handle."""
    inner: torch.nn.Module = getattr(model, "_orig_mod", model)
    handle: Any = None

    def first_forward(module: torch.nn.Module, _args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        handle.remove()
        if _runs_on_cuda(module):
            warnings.warn(EAGER_FP8_MESSAGE, UserWarning, stacklevel=2)

    handle = inner.register_forward_pre_hook(first_forward)
    return handle


def _runs_on_cuda(module: torch.nn.Module) -> bool:
    """True when ``module``'s first parameter lives on a CUDA device."""
    first = next(module.parameters(), None)
    return first is not None and first.device.type == "cuda"
