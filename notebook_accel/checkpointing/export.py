"""``save_model``: the unwrapped model's weights alone, in accelerate's layout, for plain torch or ``transformers``.

Only the main process writes; every rank waits for it and raises together on failure. The files are first written
into a temporary folder inside ``save_directory`` (so the renames stay on one file system), fsynced, then:

1. the weight files of an earlier save in the same format that the new save does not overwrite are removed (its
   index first, so no index ever names a missing shard);
2. the new shards are renamed into place, the index (or the single file) last;
3. the temporary folder is removed.

Each file is replaced atomically; a crash leaves either an earlier save or the new one's files plus a ``.tmp-``
folder. Other files in ``save_directory`` (a ``config.json``, a tokenizer) are left alone.
See :mod:`notebook_accel.checkpointing.shards` for the file names, sharding and shared tensors.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import torch

from notebook_accel.checkpointing.agreement import agree
from notebook_accel.checkpointing.atomic import fsync_dir, make_dir, remove_dir, temp_sibling, write_bytes, write_torch
from notebook_accel.checkpointing.save import error_text
from notebook_accel.checkpointing.shards import ShardPlan, for_safetensors, parse_size, plan_shards, weights_name
from notebook_accel.argument_checks import checked_folder
from notebook_accel.errors import shown
from notebook_accel.float8.convert import plain_tensor

__all__ = ["save_model"]


def _write_shards(plan: ShardPlan, state_dict: dict[str, torch.Tensor], temp: str, safe: bool) -> None:
    """Write every shard and the index (when there is one) into ``temp``."""
    for file, names in plan.files.items():
        tensors = {name: state_dict[name] for name in names}
        if safe:
            from safetensors.torch import save

            write_bytes(os.path.join(temp, file), save(tensors, metadata={"format": "pt"}))
        else:
            write_torch(os.path.join(temp, file), tensors, zip_crcs=True)  # read by other programs, no manifest
    if plan.index is not None:
        text = json.dumps(plan.index, indent=2, sort_keys=True) + "\n"
        write_bytes(os.path.join(temp, plan.index_name), text.encode("utf-8"))


def _stale(directory: str, plan: ShardPlan, safe: bool) -> list[str]:
    """Weight files of an earlier save in this format that the new one does not replace, the index first."""
    stem, ext = weights_name(safe).rsplit(".", 1)
    shard = re.compile(rf"^{re.escape(stem)}-\d{{5}}-of-\d{{5}}\.{ext}$")
    ours = set(plan.files) | ({plan.index_name} if plan.index is not None else set())
    names = [n for n in os.listdir(directory) if n == plan.index_name or n == weights_name(safe) or shard.match(n)]
    return sorted((n for n in names if n not in ours), key=lambda n: n != plan.index_name)


def _commit(directory: str, temp: str, plan: ShardPlan, safe: bool) -> None:
    """Remove the stale files, then move the new ones into ``directory``, the index or single file last."""
    for name in _stale(directory, plan, safe):
        os.remove(os.path.join(directory, name))
    names = list(plan.files) + ([plan.index_name] if plan.index is not None else [])
    for name in names:
        os.replace(os.path.join(temp, name), os.path.join(directory, name))
    fsync_dir(directory)


def _save(accelerator: Any, model: Any, directory: str, max_bytes: int, safe: bool,
          gathered: dict[str, torch.Tensor]) -> str:
    """Main process: write the weights into ``directory``; returns the path of the index or the single file."""
    make_dir(directory, exist_ok=True)
    state_dict = {k: plain_tensor(v.detach()).cpu() for k, v in gathered.items()}  # fp8: torchao's wrappers off
    if safe:
        state_dict = for_safetensors(state_dict)
    plan = plan_shards(state_dict, max_bytes, safe)
    temp = temp_sibling(os.path.join(directory, "save_model"))
    make_dir(temp)
    try:
        _write_shards(plan, state_dict, temp, safe)
        _commit(directory, temp, plan, safe)
    finally:
        remove_dir(temp)
    return os.path.join(directory, plan.index_name if plan.index is not None else next(iter(plan.files)))


def save_model(
    accelerator: Any,
    model: Any,
    save_directory: str | os.PathLike[str],
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
) -> str:
    """Save the model's weights (unwrapped, on CPU) into ``save_directory``, sharded by ``max_shard_size``.

    Args:
        accelerator: the Accelerator that prepared ``model``.
        model: the prepared (possibly DDP-wrapped) or plain model.
        save_directory: the directory, created when missing.
        max_shard_size: the largest shard, in bytes (an int) or a string: ``"5MB"``/``"10GB"`` (powers of 1000),
            ``"500KiB"``/``"5GiB"`` (powers of 1024). A single tensor larger than this gets a shard of its own.
        safe_serialization: ``True``: safetensors files (``model.safetensors``); ``False``: ``torch.save`` files
            (``pytorch_model.bin``). Shards are ``model-00001-of-0000N.safetensors`` (``pytorch_model-...bin``)
            with an index ``model.safetensors.index.json`` (``pytorch_model.bin.index.json``).

    Returns:
        The absolute path of the single weights file, or of the index when sharded.

    Raises:
        ShardSizeError: ``max_shard_size`` is not a size (raised on every rank before anything is written).
        CheckpointError: the directory cannot be created or a file written (on every rank).

    Example:
        >>> path = accelerator.save_model(model, "export")                   # doctest: +SKIP
        >>> from safetensors.torch import load_file                           # doctest: +SKIP
        >>> fresh.load_state_dict(load_file(path))                            # doctest: +SKIP
    """
    checked_folder(save_directory, "save_model(save_directory=...)")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"save_model(model={shown(model)}): pass the model (a torch.nn.Module)")
    if not isinstance(safe_serialization, bool):
        raise TypeError(f"save_model(safe_serialization={shown(safe_serialization)}): pass True or False")
    max_bytes = parse_size(max_shard_size)
    state = accelerator.state
    directory = os.path.abspath(os.fspath(save_directory))
    error: str | None = None
    path = ""
    gathered = accelerator.get_state_dict(model)  # collective under FSDP/ZeRO-3: every rank takes part
    if state.is_main_process:
        try:
            path = _save(accelerator, model, directory, max_bytes, bool(safe_serialization), gathered)
        except Exception as e:  # any failure must reach the other ranks, or they would wait forever
            error = error_text(e)
    agreed = agree(error, state.num_processes, f"save model weights to {directory!r}", payload=path)
    return str(agreed[0])
