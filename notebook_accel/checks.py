"""Checks of the plain arguments of the public helper functions (devices, counts, loaders, callables), so a wrong
value fails at the call with the parameter, the value and what is allowed, not as a TypeError from deep inside
torch. They raise ``TypeError``/``ValueError`` as the accelerate functions of the same names do."""

from __future__ import annotations

from typing import Any

import torch

from notebook_accel.errors import shown

__all__ = ["checked_device", "checked_int", "checked_loader"]


def checked_device(value: Any, where: str) -> torch.device:
    """``value`` (a ``torch.device``, ``"cpu"``, ``"cuda:0"``, ``"meta"``...) as a device.

    Raises:
        TypeError / ValueError: ``where`` (e.g. ``"init_on_device(device=...)"``) names a value that is no device.
    """
    if not isinstance(value, (str, torch.device)) and not (type(value) is int and 0 <= value < 1 << 16):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: a torch.device or a "
                        "device name such as 'cpu', 'cuda', 'cuda:0' or 'meta'")
    try:
        return torch.device(value)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"{where}: {shown(value)} is not a device torch knows; allowed: a torch.device or a "
                         "device name such as 'cpu', 'cuda', 'cuda:0' or 'meta'") from e


def checked_int(value: Any, where: str, low: int, high: int | None = None) -> int:
    """``value`` as an int from ``low`` to ``high`` (no bound when ``None``); ``bool`` is refused.

    Raises:
        TypeError: not an int. ValueError: out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: a whole number >= {low}")
    if value < low or (high is not None and value > high):
        upper = f" and <= {high}" if high is not None else ""
        raise ValueError(f"{where}: got {shown(value)}; allowed: a whole number >= {low}{upper}")
    return value


def checked_loader(value: Any, where: str) -> Any:
    """``value``, which must be a ``torch.utils.data.DataLoader``.

    Raises:
        TypeError: it is not one.
    """
    if not isinstance(value, torch.utils.data.DataLoader):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: a "
                        "torch.utils.data.DataLoader")
    return value
