"""Build a model without allocating its weights: accelerate's ``init_empty_weights`` and ``init_on_device``.

Inside the block, every parameter a module registers is moved to the given device right after
registration (the ``meta`` device for ``init_empty_weights``: shapes and dtypes only, no memory). The module's
``torch.empty`` storage for that one parameter is reserved and dropped at once (never written, so the system
commits no memory for it), and its initialisation then runs on ``meta`` at no cost: a model too large for this
machine's RAM can still be built, one parameter at a time, then sharded by FSDP (``cpu_ram_efficient_loading``) or
filled with ``load_checkpoint_in_model``. Buffers stay where the module made them unless ``include_buffers``.

The patch is on ``torch.nn.Module`` itself for the length of the block, so it also applies to modules built
by other threads meanwhile; build nothing else concurrently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from notebook_accel.argument_checks import checked_device

__all__ = ["init_empty_weights", "init_on_device"]


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Put the parameters (and with ``include_buffers``, the buffers) of modules built in the block on ``device``.

    Args:
        device: where parameters go, e.g. ``"meta"`` or ``"cuda:0"``.
        include_buffers: also create buffers there (``None``: no, as accelerate's default).

    Raises:
        RuntimeError: ``device`` is not a device torch knows (raised before the block runs).

    Example:
        >>> with init_on_device("meta"):
        ...     layer = torch.nn.Linear(4, 4)
        >>> layer.weight.device.type
        'meta'
    """
    target = checked_device(device, "init_on_device(device=...)")
    if include_buffers:
        with torch.device(target):
            yield
        return
    original = torch.nn.Module.register_parameter

    def register_parameter(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None:
            placed: Any = param.to(target)
            if type(param) is torch.nn.Parameter:
                placed = torch.nn.Parameter(placed, requires_grad=param.requires_grad)
            else:  # a Parameter subclass keeps its class and attributes
                placed = type(param)(placed, **param.__dict__)
            module._parameters[name] = placed

    torch.nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Build modules with their parameters on the ``meta`` device: no memory is allocated for them.

    Args:
        include_buffers: also make buffers on ``meta`` (``None``: no, as accelerate's default).

    Example:
        >>> with init_empty_weights():
        ...     model = torch.nn.Sequential(*[torch.nn.Linear(20_000, 20_000) for _ in range(8)])  # 12.8 GB
        >>> model.weight.is_meta
        True
    """
    with init_on_device("meta", include_buffers=include_buffers):
        yield
