"""Checks of the plain arguments of the public helper functions (devices, counts, loaders, callables), so a wrong
value fails at the call with the parameter, the value and what is allowed, not as a TypeError from deep inside
torch. They raise ``TypeError``/``ValueError`` as the accelerate functions of the same names do."""

from __future__ import annotations

import io
import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from notebook_accel.errors import shown

__all__ = ["checked_device", "checked_int", "checked_loader", "checked_number",
           "checked_clip_arguments", "checked_folder", "checked_file", "checked_log_kwargs",
           "checked_log_arguments", "checked_save_arguments", "check_writable"]


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


def checked_number(value: Any, where: str, allow_inf: bool = False) -> float:
    """``value`` (an int or float, not ``bool``, not NaN; infinite only with ``allow_inf``) as a float.

    Raises:
        TypeError: not a number. ValueError: NaN, infinite or beyond a float's range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: a number")
    number = float(value) if isinstance(value, float) or abs(value) < 2**1023 else None
    if number is None or number != number or (number in (float("inf"), float("-inf")) and not allow_inf):
        allowed = "a number (or inf)" if allow_inf else "a finite number"
        raise ValueError(f"{where}: got {shown(value)}; allowed: {allowed}")
    return number


def checked_clip_arguments(parameters: Any, max_norm: Any,
                           norm_type: Any) -> tuple[list[torch.Tensor], float, float]:
    """The arguments of ``clip_grad_norm_`` checked: ``(parameters as a list, max_norm, norm_type)``.

    Raises:
        TypeError / ValueError: ``parameters`` is not a tensor or an iterable of tensors, or a number is not one.
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    items = list(parameters) if isinstance(parameters, Iterable) and not isinstance(parameters, (str, bytes)) else None
    if items is None or not all(isinstance(item, torch.Tensor) for item in items):
        raise TypeError(f"clip_grad_norm_(parameters={shown(parameters)}): pass the model's parameters, e.g. "
                        "model.parameters()")
    return (items, checked_number(max_norm, "clip_grad_norm_(max_norm=...)"),
            checked_number(norm_type, "clip_grad_norm_(norm_type=...)", allow_inf=True))


def checked_folder(value: Any, where: str, optional: bool = False) -> Any:
    """``value``, which must be a folder's path (``str`` or ``os.PathLike``; ``None`` too when ``optional``), of
    a length a path can have.

    Raises:
        TypeError: not a path. ValueError: empty, with a NUL character, or longer than 4096 characters.
    """
    if value is None and optional:
        return value
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: a folder's path (str or "
                        f"os.PathLike){', or None' if optional else ''}")
    if not text.strip() or "\x00" in text or len(text) > 4096:
        raise ValueError(f"{where}: {shown(text)} cannot be a folder's path (empty, a NUL character, or more than "
                         "4096 characters)")
    return value


def checked_file(value: Any, where: str, file_object: bool = True) -> Any:
    """``value``, which must be a file's path (``str`` or ``os.PathLike``) of a length a path can have, or (with
    ``file_object``) an open binary file with a ``write`` method.

    Raises:
        TypeError: neither. ValueError: an empty path, a NUL character, or more than 4096 characters.
    """
    if file_object and callable(getattr(value, "write", None)):
        return value
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str):
        allowed = "a file's path (str or os.PathLike)" + (" or a binary file opened for writing" if file_object else "")
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); allowed: {allowed}")
    if not text.strip() or "\x00" in text or len(text) > 4096:
        raise ValueError(f"{where}: {shown(text)} cannot be a file's path (empty, a NUL character, or more than "
                         "4096 characters)")
    return value


def checked_log_kwargs(value: Any, where: str) -> Mapping[str, Mapping[str, Any]]:
    """``value`` (``None`` or a dict of tracker name to a dict of keyword arguments, e.g.
    ``{"tensorboard": {"walltime": 0.0}}``) as such a mapping (empty for ``None``).

    Raises:
        TypeError: not a dict, a key not a tracker name, or a value not a dict of keyword arguments.
    """
    if value is None:
        return {}
    allowed = ("allowed: None or a dict of tracker name to a dict of that tracker's keyword arguments, e.g. "
               "{'tensorboard': {'walltime': 0.0}}")
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: got {shown(value)} ({type(value).__name__}); {allowed}")
    for name, kwargs in value.items():
        if not isinstance(name, str) or not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise TypeError(f"{where}: the entry {shown(name, 40)}: {shown(kwargs, 60)} is not a tracker name with "
                            f"a dict of keyword arguments; {allowed}")
    return value


def checked_log_arguments(values: Any, step: Any) -> None:
    """Check ``log``'s ``values`` (a dict of name to value) and ``step`` (``None`` or a whole number that fits in
    64 bits, numpy's integers too).

    Raises:
        TypeError: ``values`` is not a dict or ``step`` not a whole number. ValueError: ``step`` out of range.
    """
    if not isinstance(values, Mapping):
        raise TypeError(f"log(values={shown(values)}): got a {type(values).__name__}; allowed: a dict of name to "
                        "value, e.g. {'loss': 0.5}")
    for name in values:
        if not isinstance(name, str):
            raise TypeError(f"log(values=...): the name {shown(name, 40)} is a {type(name).__name__}; allowed: "
                            "a dict whose names are strings, e.g. {'loss': 0.5}")
    if step is None:
        return
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"log(step={shown(step)}): got a {type(step).__name__}; allowed: None or a whole number, "
                        "e.g. the optimizer step count")
    if not -(2**63) <= int(step) < 2**63:
        raise ValueError(f"log(step={shown(step)}): allowed: None or a whole number within 64 bits")


def checked_save_arguments(obj: Any, f: Any, safe_serialization: Any) -> None:
    """Check ``Accelerator.save``'s arguments: ``f`` a file's path or (without safetensors) a binary file,
    ``safe_serialization`` a bool, and with it ``obj`` a dict of name to tensor.

    Raises:
        TypeError / ValueError: naming the parameter, the value and what is allowed.
    """
    checked_file(f, "save(f=...)", file_object=safe_serialization is False)
    if isinstance(f, io.TextIOBase):
        raise TypeError(f"save(f={shown(f)}): a text file cannot hold a checkpoint; open it in binary mode ('wb')")
    writable = getattr(f, "writable", None)
    if not isinstance(f, (str, os.PathLike)) and callable(writable) and not writable():
        raise ValueError(f"save(f={shown(f)}): the file is not open for writing; open it with mode 'wb'")
    if not isinstance(safe_serialization, bool):
        raise TypeError(f"save(safe_serialization={shown(safe_serialization)}): allowed: True or False")
    if safe_serialization and not (isinstance(obj, Mapping) and all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items())):
        raise TypeError(f"save(obj={shown(obj)}, safe_serialization=True): safetensors writes only a dict of "
                        "name to tensor; pass such a dict (e.g. model.state_dict()) or safe_serialization=False")


def check_writable(f: Any, where: str) -> None:
    """When ``f`` is a path: check that it names a file that can be written (created empty if new), so a bad
    path fails as an ``OSError`` naming it rather than as a ``RuntimeError`` from inside torch or safetensors.

    Raises:
        ValueError: the path is a folder or its folder does not exist. OSError: the file cannot be opened.
    """
    if not isinstance(f, (str, os.PathLike)):
        return
    parent = os.path.dirname(os.path.abspath(f))
    if os.path.isdir(f) or not os.path.isdir(parent):
        problem = "is a folder" if os.path.isdir(f) else f"is in {shown(parent)}, which is no folder"
        raise ValueError(f"{where}: the path {shown(os.fspath(f))} {problem}; pass the path of a file in an "
                         "existing folder, e.g. 'model.pt'")
    with open(f, "ab"):  # append: an existing file is left whole until the writer replaces it
        pass
