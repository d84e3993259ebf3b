"""How ``save_model`` splits a state dict into files: the size limit, shared tensors, the shard plan and index.

The layout is accelerate's (and so what ``transformers`` and ``safetensors`` readers expect):

- one file ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``) when everything fits in
  ``max_shard_size``;
- else ``model-00001-of-00003.safetensors`` ... plus ``model.safetensors.index.json``:
  ``{"metadata": {"total_size": <bytes>}, "weight_map": {"<tensor name>": "<file>"}}``.

Tensors are placed in state-dict order; a new shard starts when the next tensor would not fit, and a tensor
larger than the limit gets a shard of its own. Tensors that share storage count once and stay in one shard.

safetensors refuses tensors that share memory. A tied weight (the same tensor under two names, e.g. an embedding
and the output layer) is written once, under its first name in sorted order, and the other names are dropped with
a warning, as accelerate does: loading it back with ``load_state_dict(..., strict=False)`` or into a model that
ties the weights again restores both. Other tensors that share memory without being the same (two slices of
one buffer) are copied, so each is saved whole.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from notebook_accel.checkpointing.errors import ShardSizeError
from notebook_accel.errors import shown

__all__ = ["ShardPlan", "parse_size", "for_safetensors", "plan_shards", "weights_name"]

_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kKmMgGtT][iI]?)?([bB])?\s*$")
_SIZE_HELP = (
    "pass an int (bytes) or a string like '500KB', '5MB', '10GB' (powers of 1000) or '500KiB', '5MiB', '10GiB' "
    "(powers of 1024); a lower-case 'b' after a decimal unit means bits, as in accelerate ('80Mb' is 10MB)"
)


def parse_size(size: int | str) -> int:
    """``max_shard_size`` in bytes: an int as is, or a string with a decimal or binary unit.

    Raises:
        ShardSizeError: not a positive int nor a string in one of the accepted forms.

    Example:
        >>> parse_size("5MB"), parse_size("1KiB"), parse_size(100)
        (5000000, 1024, 100)
    """
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise ShardSizeError(f"max_shard_size={shown(size)} ({type(size).__name__}) is not a size; {_SIZE_HELP}")
    if isinstance(size, int):
        value = size
    else:
        match = _SIZE.match(size)
        if match is None:
            raise ShardSizeError(f"max_shard_size={shown(size)} is not a size; {_SIZE_HELP}")
        number, unit, byte = match.groups()
        value = int(float(number) * _UNITS[(unit or "").upper()])
        if byte == "b" and not (unit or "").upper().endswith("I"):  # "Mb": megabits; "MiB"/"mib": mebibytes
            value //= 8
    if value <= 0:
        raise ShardSizeError(f"max_shard_size={shown(size)} is {shown(value)} bytes; it must be at least 1 byte. {_SIZE_HELP}")
    return value


def weights_name(safe_serialization: bool) -> str:
    """``model.safetensors`` or ``pytorch_model.bin``: the single-file name, and the stem of the shard names."""
    return "model.safetensors" if safe_serialization else "pytorch_model.bin"


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    """An identity for the memory under ``tensor``: tensors with the same key share storage."""
    return str(tensor.device), tensor.untyped_storage().data_ptr()


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` are the same bytes seen the same way (a tied weight under two names)."""
    return (a.data_ptr(), a.shape, a.stride(), a.dtype) == (b.data_ptr(), b.shape, b.stride(), b.dtype)


def for_safetensors(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` made savable by safetensors: tied duplicates dropped (with a warning), other sharing copied.

    Every returned tensor is contiguous and owns its memory or shares it with no other returned tensor.
    """
    groups: dict[tuple[str, int], list[str]] = {}
    for name, tensor in state_dict.items():
        if tensor.numel():
            groups.setdefault(_storage_key(tensor), []).append(name)
    dropped: dict[str, str] = {}  # dropped name -> the kept name it duplicates
    copied: set[str] = set()
    for names in groups.values():
        if len(names) < 2:
            continue
        names = sorted(names)
        kept: list[str] = []
        for name in names:
            twin = next((k for k in kept if _same_view(state_dict[k], state_dict[name])), None)
            if twin is None:
                kept.append(name)
            else:
                dropped[name] = twin
        if len(kept) > 1:
            copied.update(kept)
    if dropped:
        warnings.warn(
            "save_model: safetensors cannot store one tensor twice; not saved: "
            f"{', '.join(f'{name} (same tensor as {twin})' for name, twin in dropped.items())}. Load with "
            "load_state_dict(..., strict=False) into a model that ties these weights, or pass "
            "safe_serialization=False to keep every name.",
            UserWarning,
            stacklevel=4,
        )
    return {
        name: tensor.clone().contiguous() if name in copied else tensor.contiguous()
        for name, tensor in state_dict.items()
        if name not in dropped
    }


@dataclass(frozen=True)
class ShardPlan:
    """Which tensors go into which file, and the index that maps them (``None`` for a single file).

    Attributes:
        files: file name -> the tensor names it holds, in state-dict order.
        index: the ``*.index.json`` content when there is more than one file, else ``None``.
        index_name: the index's file name (``model.safetensors.index.json``), even when there is no index.
    """

    files: dict[str, list[str]]
    index: dict[str, object] | None
    index_name: str


def _nbytes(tensor: torch.Tensor) -> int:
    """Bytes the tensor's elements take on disk."""
    return tensor.numel() * tensor.element_size()


def plan_shards(state_dict: Mapping[str, torch.Tensor], max_shard_size: int, safe_serialization: bool) -> ShardPlan:
    """Split ``state_dict`` into shards of at most ``max_shard_size`` bytes (a larger tensor gets its own shard).

    Example:
        >>> sd = {"a": torch.zeros(4), "b": torch.zeros(4)}  # 16 bytes each
        >>> plan = plan_shards(sd, 20, safe_serialization=True)
        >>> list(plan.files), plan.index["weight_map"]["b"]
        (['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'], 'model-00002-of-00002.safetensors')
    """
    groups: dict[tuple[str, int], list[str]] = {}
    sizes: dict[tuple[str, int], int] = {}
    for name, tensor in state_dict.items():
        key = _storage_key(tensor) if tensor.numel() else ("empty", id(tensor))
        groups.setdefault(key, []).append(name)
        sizes[key] = max(sizes.get(key, 0), _nbytes(tensor))
    shards: list[list[str]] = [[]]
    used = 0
    for key, names in groups.items():
        if shards[-1] and used + sizes[key] > max_shard_size:
            shards.append([])
            used = 0
        shards[-1].extend(names)
        used += sizes[key]
    single = weights_name(safe_serialization)
    stem, ext = single.rsplit(".", 1)
    index_name = f"{single}.index.json"
    if len(shards) == 1:
        return ShardPlan({single: shards[0]}, None, index_name)
    count = len(shards)
    files = {f"{stem}-{i:05d}-of-{count:05d}.{ext}": names for i, names in enumerate(shards, start=1)}
    weight_map = {name: file for file, names in files.items() for name in names}
    index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
    return ShardPlan(files, index, index_name)
