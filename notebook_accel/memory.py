"""Freeing memory and finding a batch size that fits: accelerate's ``release_memory`` and
``find_executable_batch_size``; and our own :func:`held_memory`, what one process holds for training."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from notebook_accel.errors import shown

__all__ = ["release_memory", "find_executable_batch_size", "is_out_of_memory", "held_memory", "HeldMemory"]

T = TypeVar("T")

_OOM_MARKERS = (
    "out of memory",  # CUDA, MPS and XPU caching allocators
    "can't allocate memory",  # torch's CPU allocator: "DefaultCPUAllocator: can't allocate memory"
    "CUDNN_STATUS_NOT_SUPPORTED",  # cuDNN's way of saying a workspace did not fit
    "CUBLAS_STATUS_ALLOC_FAILED",
)


def release_memory(*objects: Any) -> list[None]:
    """Drop references to ``objects``, collect garbage and empty the accelerator's cache.

    Use as accelerate does: ``model, optimizer = release_memory(model, optimizer)`` (each becomes ``None``).

    Returns:
        A list of ``None``, one per object.
    """
    objects = tuple(None for _ in objects)
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return list(objects)


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says memory ran out (``torch.OutOfMemoryError`` or an allocator's RuntimeError)."""
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return isinstance(error, (RuntimeError, MemoryError)) and (
        isinstance(error, MemoryError) or any(marker in str(error) for marker in _OOM_MARKERS)
    )


def find_executable_batch_size(
    function: Callable[..., T] | None = None, starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[int], int] | None = None,
) -> Any:
    """Decorator: call ``function(batch_size, *args)`` and halve ``batch_size`` after each out-of-memory error.

    The decorated function takes the batch size as its first parameter; callers leave it out. Memory is
    released (garbage collected, accelerator cache emptied) before each retry. ``reduce_batch_size_fn(size)``
    gives the next size to try instead of halving.

    Example:
        >>> @find_executable_batch_size(starting_batch_size=64)
        ... def train(batch_size, lr):
        ...     return batch_size
        >>> train(0.1)
        64

    Raises:
        RuntimeError: no batch size down to 1 worked ("No executable batch size found, reached zero.").
        TypeError: the batch size was passed explicitly.
    """
    if function is None:
        return functools.partial(find_executable_batch_size, starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    if not callable(function):
        raise TypeError(f"find_executable_batch_size(function={shown(function)}): pass the function to run (it "
                        "takes the batch size as its first parameter), or use it as a decorator")
    if isinstance(starting_batch_size, bool) or not isinstance(starting_batch_size, int) or starting_batch_size < 1:
        raise ValueError(f"starting_batch_size={shown(starting_batch_size)}: pass a whole number >= 1")
    batch_size = starting_batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> T:
        nonlocal batch_size
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            raise TypeError(
                f"{function.__name__} takes the batch size as its first parameter and "
                f"find_executable_batch_size passes it: call {function.__name__}({', '.join(params[1:])}) without it"
            )
        release_memory()
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - only out-of-memory errors are retried
                if not is_out_of_memory(e):
                    raise
                release_memory()
                batch_size = reduce_batch_size_fn(batch_size) if reduce_batch_size_fn else batch_size // 2

    return decorator


@dataclass(frozen=True)
class HeldMemory:
    """Bytes one process holds for training, by kind (see :func:`held_memory`)."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        """Parameters + gradients + optimizer bytes."""
        return self.parameters + self.gradients + self.optimizer


def held_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> HeldMemory:
    """The bytes this process holds for training ``model`` with ``optimizer``, at the moment of the call.

    Not an accelerate function: notebook-accel's own, to compare engines. Pass the *prepared* model and optimizer
    (plain ones work too). Each distinct storage is counted once, in the first kind that reaches it (views of one
    flat buffer count once), wherever it lives (device or host memory, so offloaded state counts too):

    - ``parameters``: the module's parameters; under FSDP a DTensor's local shard, under DeepSpeed ZeRO-3 this
      rank's partition (``ds_tensor``), not the short-lived gathered copy a layer has while it runs.
    - ``gradients``: the parameters' ``.grad``; under DeepSpeed also the fp32 master partitions' gradients and
      ZeRO-3's persistent gradient-partition buffer.
    - ``optimizer``: the torch optimizer's state tensors (Adam's two moments); under DeepSpeed also the fp32
      master partitions ZeRO keeps beside the module's weights (a second copy even in fp32 training).

    Activations, buffers and allocator caches are left out. Call it after ``optimizer.step()`` and before
    ``optimizer.zero_grad()``, where DDP and FSDP hold gradients, parameters and optimizer state at once. DeepSpeed
    steps inside ``accelerator.backward`` and frees gradients in its step, so there, after ``optimizer.step()``
    (a no-op under DeepSpeed), ZeRO-3 reports its gradient-partition buffer (kept between steps, this rank's
    partition) and ZeRO-1/2 report 0 gradient bytes (the reduced partitions are freed until the next backward).

    Raises:
        TypeError: ``model`` is not a ``torch.nn.Module`` or ``optimizer`` does not wrap a ``torch.optim.Optimizer``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"held_memory(model=...): got {type(model).__name__}; pass the torch.nn.Module that "
                        "accelerator.prepare returned")
    torch_optimizer = _torch_optimizer(optimizer)
    zero = getattr(getattr(optimizer, "engine", None), "optimizer", None)  # DeepSpeed's ZeRO optimizer, if any
    seen: set[int] = set()
    params = list(model.parameters())
    masters = [p for group in torch_optimizer.param_groups for p in group["params"]]
    zero_masters = [*getattr(zero, "single_partition_of_fp32_groups", []),  # ZeRO-1/2
                    *getattr(zero, "fp32_partitioned_groups_flat", [])]  # ZeRO-3
    held_params = _storage_bytes([getattr(p, "ds_tensor", p) for p in params], seen)
    grads = [p.grad for p in [*params, *masters, *zero_masters] if p.grad is not None]
    held_grads = _storage_bytes([*grads, getattr(zero, "grad_partitions_flat_buffer", None)], seen)
    state = [t for s in torch_optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    return HeldMemory(held_params, held_grads, _storage_bytes([*masters, *zero_masters, *state], seen))


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside our wrapper(s) (each keeps it as ``.optimizer``).

    Raises:
        TypeError: no ``torch.optim.Optimizer`` inside.
    """
    inner = optimizer
    while isinstance(getattr(inner, "optimizer", None), torch.optim.Optimizer):
        inner = inner.optimizer
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"held_memory(optimizer=...): got {type(optimizer).__name__}; pass the optimizer that "
                        "accelerator.prepare returned (or a torch.optim.Optimizer)")
    return inner


def _storage_bytes(tensors: Iterable[torch.Tensor | None], seen: set[int]) -> int:
    """Bytes of the distinct storages behind ``tensors`` not yet in ``seen`` (a DTensor's local shard)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        storage = local.untyped_storage()
        if storage.nbytes() and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total
