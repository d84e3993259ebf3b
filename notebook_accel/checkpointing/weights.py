"""``load_checkpoint_in_model``: read weights written by ``save_model`` (ours, accelerate's or transformers')
back into a model: one file, or a folder with a sharded index, safetensors or torch format."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from notebook_accel.checkpointing.atomic import read_torch
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.errors import shown

__all__ = ["load_checkpoint_in_model", "read_weights"]

_SINGLE = ("model.safetensors", "pytorch_model.bin")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _read_file(path: str) -> dict[str, torch.Tensor]:
    """One weights file: safetensors by its extension, else ``torch.load(weights_only=True)``."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        try:
            return dict(load_file(path))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise CheckpointError(f"could not read {path!r} as safetensors: {type(e).__name__}: {e}") from e
    state = read_torch(path)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path!r} holds a {type(state).__name__}, not a state dict of tensors")
    return state


def _index_files(directory: str, index: str) -> list[str]:
    """The shard files an index names, checked to stay inside ``directory``."""
    try:
        with open(os.path.join(directory, index), encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"the index {os.path.join(directory, index)!r} is not a weights index: {e}") from e
    bad = [n for n in names if not isinstance(n, str) or os.path.basename(n) != n or n in ("", ".", "..")]
    if bad:
        raise CheckpointError(f"the index in {directory!r} names files outside its folder: {bad[:3]}")
    return [os.path.join(directory, n) for n in names]


def read_weights(checkpoint: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Every tensor of a weights file, or of a folder written by ``save_model`` (single file or shards)."""
    path = os.fspath(checkpoint)
    if os.path.isfile(path):
        if path.endswith(".json"):
            return read_weights_from(os.path.dirname(path) or ".", _index_files(os.path.dirname(path) or ".",
                                                                               os.path.basename(path)))
        return _read_file(path)
    if not os.path.isdir(path):
        raise CheckpointError(f"no weights at {path!r}: pass a weights file or the folder save_model wrote")
    for index in _INDEXES:
        if os.path.isfile(os.path.join(path, index)):
            return read_weights_from(path, _index_files(path, index))
    for single in _SINGLE:
        if os.path.isfile(os.path.join(path, single)):
            return _read_file(os.path.join(path, single))
    raise CheckpointError(f"{path!r} holds none of {list(_SINGLE + _INDEXES)}; pass the folder save_model wrote")


def read_weights_from(directory: str, files: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of several shard files, merged (a name in two shards is an error)."""
    out: dict[str, torch.Tensor] = {}
    for file in files:
        part = _read_file(file)
        clash = sorted(set(part) & set(out))
        if clash:
            raise CheckpointError(f"{clash[:3]} appear in more than one shard of {directory!r}")
        out.update(part)
    return out


def load_checkpoint_in_model(model: torch.nn.Module, checkpoint: str | os.PathLike[str], strict: bool = False,
                             **_: Any) -> None:
    """Load the weights at ``checkpoint`` (a file, an index, or a ``save_model`` folder) into ``model``, on
    its devices and dtypes. Shapes are checked first: nothing is copied when one differs.

    Args:
        model: the (unwrapped) model.
        checkpoint: a ``.safetensors``/``.bin`` file, a ``*.index.json``, or a folder holding either.
        strict: refuse missing or unexpected names (accelerate's default is lenient, as here).

    Raises:
        CheckpointError: unreadable files, shapes that differ, or (``strict``) names that differ.
    """
    if not isinstance(checkpoint, (str, os.PathLike)) or not isinstance(model, torch.nn.Module):
        wrong_one, value = ("model", model) if not isinstance(model, torch.nn.Module) else ("checkpoint", checkpoint)
        raise TypeError(f"load_checkpoint_in_model: {wrong_one}={shown(value)} is not allowed; pass a "
                        "torch.nn.Module as model and a path (str or os.PathLike) as checkpoint")
    if len(os.fspath(checkpoint)) > 4096:
        raise ValueError(f"load_checkpoint_in_model: checkpoint={shown(checkpoint)} is longer than any path can be; "
                         "pass a weights file or the folder save_model wrote")
    weights = read_weights(checkpoint)
    current = model.state_dict()
    wrong = [f"{k}: {tuple(v.shape)} in the file, {tuple(current[k].shape)} in the model"
             for k, v in weights.items() if k in current and tuple(v.shape) != tuple(current[k].shape)]
    missing, unexpected = sorted(set(current) - set(weights)), sorted(set(weights) - set(current))
    if wrong or (strict and (missing or unexpected)):
        raise CheckpointError(f"the weights at {os.fspath(checkpoint)!r} do not fit the model: "
                              + "; ".join(wrong[:5] + [f"missing {missing[:5]}", f"unexpected {unexpected[:5]}"]))
    model.load_state_dict({k: v for k, v in weights.items() if k in current}, strict=False)
