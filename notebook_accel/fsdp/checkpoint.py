"""Sharded checkpoints of FSDP models and their optimizers with ``torch.distributed.checkpoint`` (DCP).

A sharded model is saved as accelerate names it, a folder ``pytorch_model_fsdp_<i>/`` holding one
``__<rank>_0.distcp`` file per rank (that rank's shards) and DCP's ``.metadata``; its optimizer as
``optimizer_<i>/`` the same way (state keyed by parameter name). Every rank writes only its own shards: nothing
is gathered. The files are listed in the checkpoint's manifest like any other, so the atomic commit, sizes and
SHA-256 checks apply to them unchanged.

Loading reads into fresh tensors shaped and sharded like the live ones (``empty_like``), so nothing in the model
or optimizer changes until every rank has read and checked its part; only then are the states applied.

An optimizer that has not stepped yet has no state to shape the read by; torch's state-dict helpers create it
with a zero-learning-rate step. Here that state is taken as the template and then dropped again, so a fresh
optimizer is left exactly as it was.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.utils._pytree import tree_map_only

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.objects import Saved
from notebook_accel.fsdp.engine import is_fsdp_model

__all__ = ["sharded_model", "sharded_optimizer", "owning_model", "DCP_FILE"]

#: the file each rank writes in a DCP folder (one file per rank, DCP's default writer).
DCP_FILE = "__{rank}_0.distcp"
_METADATA = ".metadata"


def owning_model(optimizer: torch.optim.Optimizer, models: list[torch.nn.Module]) -> torch.nn.Module | None:
    """The FSDP model whose parameters ``optimizer`` trains, or ``None`` (not an FSDP optimizer)."""
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in models:
        if is_fsdp_model(model) and any(id(p) in ids for p in model.parameters()):
            return model
    return None


def _entry(kind: Any, index: int, folder: str, type_name: str) -> Entry:
    """A per-rank manifest entry for a DCP folder (its metadata file shared)."""
    return Entry(kind=kind, index=index, file=f"{folder}/{DCP_FILE}", type_name=type_name, per_rank=True,
                 shared_files=(f"{folder}/{_METADATA}",))


def _reason(e: BaseException) -> str:
    """One line for a DCP failure: the first failing rank's own exception (DCP's text holds every traceback)."""
    if isinstance(e, CheckpointException) and e.failures:
        rank, (cause, _) = next(iter(sorted(e.failures.items())))
        return f"rank {rank}: {type(cause).__name__}: {str(cause)[:300]}"
    return f"{type(e).__name__}: {str(e)[:300]}"


def _save(folder: str, label: str) -> Any:
    """Write a state dict into ``<checkpoint>/<folder>`` with DCP (every rank; DCP agrees on failures itself)."""

    def write(directory: str, state: dict[str, Any]) -> None:
        try:
            dcp.save(state, checkpoint_id=os.path.join(directory, folder))
        except (Exception, CheckpointException) as e:  # DCP's own error is a BaseException
            raise CheckpointError(f"{label}: writing the sharded state into {folder!r} failed ({_reason(e)})") from e

    return write


def _load_into(template: dict[str, Any], directory: str, folder: str, label: str) -> dict[str, Any]:
    """Read ``<directory>/<folder>`` into ``template`` (fresh tensors); a failure names the object."""
    try:
        dcp.load(template, checkpoint_id=os.path.join(directory, folder))
    except (Exception, CheckpointException) as e:  # raised on every rank, e.g. for a missing key or another shape
        raise CheckpointError(f"{label}: the sharded state in {folder!r} does not fit this model "
                              f"({_reason(e)})") from e
    return template


def _fresh(state: dict[str, Any]) -> dict[str, Any]:
    """Empty tensors with the shapes, dtypes and sharding of ``state``'s (other values copied as they are)."""
    return tree_map_only(torch.Tensor, torch.empty_like, state)


def sharded_model(model: torch.nn.Module, index: int) -> Saved:
    """The checkpoint object for FSDP model ``index``: its shards, saved and loaded with DCP."""
    folder = f"pytorch_model_fsdp_{index}"
    entry = _entry("model", index, folder, type(model).__name__)

    def read(directory: str) -> dict[str, Any]:
        return _load_into(_fresh(get_model_state_dict(model)), directory, folder, entry.label())

    def apply(state: dict[str, Any]) -> None:
        set_model_state_dict(model, state)

    return Saved(entry, lambda: get_model_state_dict(model), lambda state: [], apply,
                 write=_save(folder, entry.label()), read=read)


def _optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's sharded state dict; a fresh optimizer is left without state afterwards."""
    fresh = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer)
    if fresh:
        optimizer.state.clear()
    return state


def sharded_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, index: int) -> Saved:
    """The checkpoint object for optimizer ``index``, which trains the FSDP ``model``."""
    folder = f"optimizer_{index}"
    entry = _entry("optimizer", index, folder, type(optimizer).__name__)

    def read(directory: str) -> dict[str, Any]:
        return _load_into(_fresh(_optimizer_state(model, optimizer)), directory, folder, entry.label())

    return Saved(entry, lambda: _optimizer_state(model, optimizer), lambda state: [],
                 lambda state: set_optimizer_state_dict(model, optimizer, state), write=_save(folder, entry.label()), read=read)
