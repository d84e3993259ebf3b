"""Helpers for nested batches: apply a function to every tensor in dicts, lists, tuples and namedtuples."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

__all__ = ["recursively_apply", "tensors_of", "send_to_device", "is_tensor_tree", "on_device"]


def recursively_apply(fn: Callable[[torch.Tensor], Any], data: Any) -> Any:
    """Return ``data`` with ``fn`` applied to every tensor; containers are rebuilt with the same type.

    Example:
        >>> recursively_apply(lambda t: t * 2, {"a": [torch.tensor(1)]})
        {'a': [tensor(2)]}
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(recursively_apply(fn, v) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(recursively_apply(fn, v) for v in data)
    if isinstance(data, Mapping):
        try:
            return type(data)({k: recursively_apply(fn, v) for k, v in data.items()})  # type: ignore[call-arg]
        except TypeError:  # a Mapping type that cannot be built from a dict
            return {k: recursively_apply(fn, v) for k, v in data.items()}
    return data


def tensors_of(data: Any) -> list[torch.Tensor]:
    """Every tensor in ``data``, in a deterministic (depth-first, insertion) order."""
    out: list[torch.Tensor] = []
    recursively_apply(out.append, data)
    return out


def is_tensor_tree(data: Any) -> bool:
    """True when ``data`` is a tensor or a container whose leaves are all tensors."""
    if isinstance(data, torch.Tensor):
        return True
    if isinstance(data, (list, tuple)):
        return len(data) > 0 and all(is_tensor_tree(v) for v in data)
    if isinstance(data, Mapping):
        return len(data) > 0 and all(is_tensor_tree(v) for v in data.values())
    return False


def on_device(data: Any, device: torch.device, cpu: bool | None = None) -> bool:
    """True when :func:`send_to_device` would move nothing in ``data``: every tensor in its (nested) lists,
    tuples and mappings is on ``device``; an object with ``.to`` at the top counts as not there.

    A batch loop calls it before moving a batch: the check is a fraction of the cost of rebuilding the batch.
    ``cpu``: whether ``device`` is a CPU, when the caller worked it out once for many calls (reading
    ``device.type`` costs more than checking a small batch); a tensor is then asked ``is_cpu``, which builds no
    device object.

    Example:
        >>> on_device({"x": [torch.ones(1)], "n": 3}, torch.device("cpu"))
        True
    """
    if cpu is None:
        cpu = device.type == "cpu"
    kind = type(data)
    if kind is list or kind is tuple or (kind is not torch.Tensor and isinstance(data, (list, tuple))):
        for value in data:
            if type(value) is torch.Tensor:
                if not (value.is_cpu if cpu else value.device == device):
                    return False
            elif not _leaf_on_device(value, device, cpu):
                return False
        return True
    if isinstance(data, torch.Tensor):
        return data.is_cpu if cpu else data.device == device
    if isinstance(data, Mapping):
        return all(_leaf_on_device(value, device, cpu) for value in data.values())
    return not hasattr(data, "to")  # send_to_device calls an object's own .to


def _leaf_on_device(data: Any, device: torch.device, cpu: bool) -> bool:
    """:func:`on_device` for a value inside a container, where objects with ``.to`` are left alone."""
    if isinstance(data, torch.Tensor):
        return data.is_cpu if cpu else data.device == device
    if isinstance(data, (list, tuple, Mapping)):
        return on_device(data, device, cpu)
    return True


def send_to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor in ``data`` to ``device`` (other leaves unchanged); objects with ``.to`` are moved too.

    Example:
        >>> send_to_device({"x": torch.ones(1)}, "cpu")["x"].device.type
        'cpu'
    """
    device = torch.device(device)

    def move(t: torch.Tensor) -> torch.Tensor:
        return t if t.device == device else t.to(device, non_blocking=non_blocking)

    if not isinstance(data, (torch.Tensor, list, tuple, Mapping)) and hasattr(data, "to"):
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:
            return data.to(device)
    return recursively_apply(move, data)
