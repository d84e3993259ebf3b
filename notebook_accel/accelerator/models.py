"""The user's module inside a prepared model, as ``Accelerator.unwrap_model`` returns it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from notebook_accel.model import unwrap_model

if TYPE_CHECKING:
    from notebook_accel.engines import Engine

__all__ = ["user_module"]


def user_module(engine: Engine, model: torch.nn.Module, keep_fp32_wrapper: bool,
                keep_torch_compile: bool) -> torch.nn.Module:
    """The user's module inside the engine's and DDP's wrappers.

    Args:
        engine: the engine that prepared ``model`` (it removes its own wrapper first).
        model: a prepared (or plain) module.
        keep_fp32_wrapper: keep the mixed-precision forward.
        keep_torch_compile: return a ``torch.compile``d module compiled; ``False`` unwraps it too.
    """
    model = engine.unwrap(model)
    inner = unwrap_model(model, keep_fp32_wrapper)
    if keep_torch_compile:
        compiled = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        if isinstance(compiled, torch.nn.Module) and hasattr(compiled, "_orig_mod"):
            return compiled
    return inner
