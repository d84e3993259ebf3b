"""Freeing memory and finding a batch size that fits: accelerate's ``release_memory`` and
``find_executable_batch_size``."""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["release_memory", "find_executable_batch_size", "is_out_of_memory"]

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
    if isinstance(starting_batch_size, bool) or not isinstance(starting_batch_size, int) or starting_batch_size < 1:
        raise ValueError(f"starting_batch_size={starting_batch_size!r}: pass a whole number >= 1")
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
