"""Preparing a model: device placement, the mixed-precision forward, and DDP when more than one process runs.

On CPU, DDP is built without ``device_ids`` (gloo); on CUDA with this process's device. A model that is already
prepared (a DDP wrapper, or one we have marked) is returned unchanged, so preparing twice never wraps twice.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from notebook_accel.comm_hooks import register_comm_hook
from notebook_accel.kwargs_handlers import DistributedDataParallelKwargs
from notebook_accel.monitor import steps
from notebook_accel.precision import MixedPrecision, unwrap_forward, wrap_forward
from notebook_accel.state import ProcessState

__all__ = ["prepare_model", "unwrap_model", "no_sync", "is_prepared", "is_sharded"]

_MARK = "_notebook_accel_prepared"


def is_prepared(model: torch.nn.Module) -> bool:
    """True for a model returned by :func:`prepare_model` (or any DDP wrapper)."""
    return isinstance(model, DistributedDataParallel) or getattr(model, _MARK, False)


def prepare_model(
    model: torch.nn.Module,
    state: ProcessState,
    mixed_precision: MixedPrecision = "no",
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
    device_placement: bool = True,
) -> torch.nn.Module:
    """Move ``model`` to the device, wrap its forward for mixed precision, and wrap it in DDP when distributed.

    Args:
        model: the user's module.
        state: this process's state (device, number of processes).
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``.
        ddp_kwargs: options for DDP (only the changed ones are passed).
        device_placement: move the model to ``state.device``.

    Returns:
        The module to train with: the model itself in a single process, a DDP wrapper otherwise.

    Example:
        >>> m = prepare_model(torch.nn.Linear(2, 2), ProcessState(cpu=True))
        >>> prepare_model(m, ProcessState(cpu=True)) is m
        True
    """
    if is_prepared(model):
        return model
    if device_placement:
        model = model.to(state.device)
    wrap_forward(model, mixed_precision, state.device)
    if state.num_processes > 1:
        options = ddp_kwargs.to_kwargs() if ddp_kwargs is not None else {}
        device_ids = [state.device.index] if state.device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids, **options)
        register_comm_hook(model, ddp_kwargs)
        step_clock = steps.clock()
        if step_clock is not None:  # a launched worker: its gradient all-reduce is part of the step breakdown
            step_clock.watch(model)
    object.__setattr__(model, _MARK, True)
    return model


def unwrap_model(model: torch.nn.Module, keep_fp32_wrapper: bool = True) -> torch.nn.Module:
    """The user's module inside DDP (and ``torch.compile``) wrappers.

    Args:
        model: a prepared (or plain) module.
        keep_fp32_wrapper: keep the mixed-precision forward; False restores the original ``forward``.

    Example:
        >>> lin = torch.nn.Linear(2, 2)
        >>> unwrap_model(lin) is lin
        True
    """
    inner: Any = model
    while True:
        if isinstance(inner, DistributedDataParallel):
            inner = inner.module
        elif hasattr(inner, "_orig_mod"):  # torch.compile's OptimizedModule
            inner = inner._orig_mod
        else:
            break
    if not keep_fp32_wrapper:
        unwrap_forward(inner)
    return inner


def no_sync(model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    """DDP's ``no_sync()`` for a DDP model, FSDP2's ``set_requires_gradient_sync(False)`` for a sharded one, a
    no-op context otherwise."""
    if isinstance(model, DistributedDataParallel):
        return model.no_sync()
    if is_sharded(model):
        return _fsdp_no_sync(model)
    return contextlib.nullcontext()


def is_sharded(model: Any) -> bool:
    """True for a module sharded with ``fully_shard`` (FSDP2).

    Never imports FSDP itself (``torch.distributed.fsdp`` adds ~0.6 s to a worker's start): while nothing has
    imported it, no module can be sharded.
    """
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


@contextlib.contextmanager
def _fsdp_no_sync(model: Any) -> Iterator[None]:
    """Accumulate unsharded gradients locally in the body; the next synced backward reduce-scatters them."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)
