"""Checkpoints of FSDP models and their optimizers: sharded with ``torch.distributed.checkpoint`` (DCP), or full.

With ``state_dict_type="SHARDED_STATE_DICT"`` (the default) every rank writes only its own shards, nothing is
gathered: model ``i`` and its optimizers (state keyed by parameter name) together, with one DCP call, as
``fsdp_state_<i>_rank<r>_0.distcp`` plus ``fsdp_state_<i>.metadata`` (:mod:`.joint`). Checkpoints of format 3 and
older hold them apart (model ``i`` as ``pytorch_model_fsdp_<i>_rank<r>_0.distcp`` plus
``pytorch_model_fsdp_<i>.metadata``, optimizer ``j`` as ``optimizer_<j>_rank<r>_0.distcp`` plus
``optimizer_<j>.metadata``), and are read by :func:`sharded_model` and :func:`sharded_optimizer`. See
:mod:`.storage` for the file names.

With ``"FULL_STATE_DICT"`` the full weights (``pytorch_model_fsdp_<i>.bin``) and the full optimizer state
(``optimizer_<i>.bin``, keyed by parameter name) are gathered to rank 0, which writes them; on load rank 0 reads
them and broadcasts each tensor into the other ranks' shards. Both kinds sit in the checkpoint's manifest like any
other file, so the atomic commit, sizes and checksums apply to them unchanged.

Loading reads into fresh tensors shaped and sharded like the live ones (``empty_like``), so nothing in the model
or optimizer changes until every rank has read and checked its part; only then are the states applied. A record
that fills a tensor whole (the same number of processes) becomes that tensor itself, in the memory ``torch.load``
read it into, and the empty one is never written (:meth:`~.dcp_safety.CheckedLoadPlanner.adopt`).

An optimizer that has not stepped yet has no state to shape the read by; torch's state-dict helpers create it
with a zero-learning-rate step. Here that state is taken as the template and then dropped again, so a fresh
optimizer is left exactly as it was.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from notebook_accel.checkpointing.atomic import read_torch, write_torch
from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.saved import Saved
from notebook_accel.engines.fsdp.joint import JointShards, fresh_tensors
from notebook_accel.engines.fsdp.storage import load_sharded, metadata_file, save_sharded, shard_files

__all__ = ["fsdp_objects"]

_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _distributed() -> bool:
    """True when a process group is up (one process resuming an FSDP checkpoint has none)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _scatter() -> StateDictOptions:
    """Full tensors in: broadcast from rank 0 into every rank's shards, or taken as they are in one process."""
    return StateDictOptions(full_state_dict=True, broadcast_from_rank0=_distributed())


def _entry(kind: Any, index: int, name: str, type_name: str) -> Entry:
    """A per-rank manifest entry for object ``name``'s DCP files (its metadata file written once)."""
    return Entry(kind=kind, index=index, file=shard_files(name), type_name=type_name, per_rank=True,
                 shared_files=(metadata_file(name),))


def _save(name: str, label: str) -> Any:
    """The collective writer of object ``name``'s shards."""

    def write(directory: str, state: dict[str, Any]) -> None:
        save_sharded(state, directory, name, label)

    return write


def sharded_model(model: torch.nn.Module, index: int) -> Saved:
    """The checkpoint object for FSDP model ``index``: its shards, saved and loaded with DCP."""
    name = f"pytorch_model_fsdp_{index}"
    entry = _entry("model", index, name, type(model).__name__)

    def read(directory: str) -> dict[str, Any]:
        return load_sharded(fresh_tensors(get_model_state_dict(model)), directory, name, entry.label())

    def apply(state: dict[str, Any]) -> None:
        set_model_state_dict(model, state)

    return Saved(entry, lambda: get_model_state_dict(model), lambda state: [], apply,
                 write=_save(name, entry.label()), read=read, checks_while_reading=True)


def _optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                     options: StateDictOptions | None = None) -> dict[str, Any]:
    """The optimizer's state dict (sharded, or gathered with ``options``); a fresh optimizer is left without state
    afterwards."""
    fresh = not optimizer.state
    state = get_optimizer_state_dict(model, optimizer, options=options)
    if fresh:
        optimizer.state.clear()
    return state


def sharded_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, index: int) -> Saved:
    """The checkpoint object for optimizer ``index``, which trains the FSDP ``model``."""
    name = f"optimizer_{index}"
    entry = _entry("optimizer", index, name, type(optimizer).__name__)

    def read(directory: str) -> dict[str, Any]:
        return load_sharded(fresh_tensors(_optimizer_state(model, optimizer)), directory, name, entry.label())

    return Saved(entry, lambda: _optimizer_state(model, optimizer), lambda state: [],
                 lambda state: set_optimizer_state_dict(model, optimizer, state), write=_save(name, entry.label()),
                 read=read, checks_while_reading=True)


def _rank() -> int:
    return torch.distributed.get_rank() if _distributed() else 0


def _rank0_file(file: str) -> tuple[Any, Any]:
    """``(write, read)`` for a file only rank 0 writes and reads (the other ranks' share of the state is empty)."""

    def write(directory: str, state: dict[str, Any]) -> None:
        if _rank() == 0:
            write_torch(os.path.join(directory, file), state)

    def read(directory: str) -> dict[str, Any]:
        return read_torch(os.path.join(directory, file)) if _rank() == 0 else {}

    return write, read


def _full_model_check(model: torch.nn.Module, label: str, state: dict[str, Any]) -> None:
    """Rank 0: the full weights have this model's keys and full shapes."""
    if _rank() != 0:
        return
    live: dict[str, Any] = dict(get_model_state_dict(model))
    shapes = {k: tuple(v.shape) for k, v in live.items()}  # a DTensor's shape is the full one
    saved = {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    if shapes != saved:
        differ = sorted(k for k in set(shapes) | set(saved) if shapes.get(k) != saved.get(k))
        raise CheckpointError(f"{label}: the full weights do not fit this model (keys or shapes differ: "
                              f"{[(k, saved.get(k), shapes.get(k)) for k in differ[:5]]})")


def full_model(model: torch.nn.Module, index: int) -> Saved:
    """The checkpoint object for FSDP model ``index`` as full weights, gathered to and written by rank 0."""
    file = f"pytorch_model_fsdp_{index}.bin"
    entry = Entry(kind="model", index=index, file=file, type_name=type(model).__name__)
    write, read_file = _rank0_file(file)

    def read(directory: str) -> dict[str, Any]:
        state = read_file(directory)
        _full_model_check(model, entry.label(), state)
        return state

    def apply(state: dict[str, Any]) -> None:
        set_model_state_dict(model, state, options=_scatter())

    return Saved(entry, lambda: get_model_state_dict(model, options=_GATHER), lambda state: [], apply,
                 write=write, read=read)


def _buffer_problem(name: str, key: str, value: Any, shape: tuple[int, ...]) -> str | None:
    """Why the saved buffer ``key`` of parameter ``name`` cannot be loaded into it (``None``: it can)."""
    if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) != shape:
        return f"{key} of {name!r} has shape {tuple(value.shape)} in the checkpoint, the parameter is {shape}"
    if not isinstance(value, (torch.Tensor, int, float, bool)) and value is not None:
        return f"{key} of {name!r} is a {type(value).__name__}"
    return None


def _full_optimizer_problems(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Any) -> list[str]:
    """The full optimizer state (keyed by parameter name) against this optimizer's groups and the full shapes."""
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict) \
            or not isinstance(state.get("param_groups"), list):
        return ["it is not a state dict with 'state' and 'param_groups'"]
    names = {id(p): name for name, p in model.named_parameters()}
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}  # a DTensor's shape is the full one
    live = [[names.get(id(p), "?") for p in group["params"]] for group in optimizer.param_groups]
    saved = [group.get("params") if isinstance(group, dict) else None for group in state["param_groups"]]
    problems = [] if saved == live else [f"the parameter groups hold {saved} in the checkpoint, {live} here"]
    for name, buffers in state["state"].items():
        if name not in shapes or not isinstance(buffers, dict):
            problems.append(f"it holds state for {name!r:.80}, which is not a parameter of this model")
            continue
        problems += [p for key, value in buffers.items() if (p := _buffer_problem(name, key, value, shapes[name]))]
    return problems[:10]


def full_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, index: int) -> Saved:
    """The checkpoint object for optimizer ``index`` as its full state, gathered to and written by rank 0."""
    file = f"optimizer_{index}.bin"
    entry = Entry(kind="optimizer", index=index, file=file, type_name=type(optimizer).__name__)
    write, read_file = _rank0_file(file)

    def read(directory: str) -> dict[str, Any]:
        state = read_file(directory)
        problems = _full_optimizer_problems(model, optimizer, state) if _rank() == 0 else []
        if problems:
            raise CheckpointError(f"{entry.label()}: the full optimizer state does not fit this model and optimizer: "
                                  + "; ".join(problems))
        return state

    def apply(state: dict[str, Any]) -> None:
        set_optimizer_state_dict(model, optimizer, state, options=_scatter())

    return Saved(entry, lambda: _optimizer_state(model, optimizer, _GATHER), lambda state: [], apply,
                 write=write, read=read)


def joint_model(group: JointShards, model: torch.nn.Module, index: int) -> Saved:
    """The checkpoint object for FSDP model ``index`` as the ``"model"`` part of its joint DCP state."""

    def apply(state: dict[str, Any]) -> None:
        set_model_state_dict(model, state)

    return group.part("model", "model", index, type(model).__name__, lambda: get_model_state_dict(model), apply)


def joint_optimizer(group: JointShards, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    index: int) -> Saved:
    """The checkpoint object for optimizer ``index`` as the ``"optimizer_<index>"`` part of ``model``'s joint DCP
    state."""
    return group.part(f"optimizer_{index}", "optimizer", index, type(optimizer).__name__,
                      lambda: _optimizer_state(model, optimizer),
                      lambda state: set_optimizer_state_dict(model, optimizer, state))


def fsdp_objects(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, index: int,
                 state_dict_type: str, group: JointShards | None = None) -> Saved:
    """The checkpoint object for FSDP ``model`` (``optimizer=None``) or for its ``optimizer``, in the plugin's
    ``state_dict_type``; a sharded one as a part of ``group`` (the model's joint DCP state), or, with
    ``group=None``, in its own DCP files (the layout before format 4, read for old checkpoints)."""
    if state_dict_type == "FULL_STATE_DICT":
        return full_model(model, index) if optimizer is None else full_optimizer(model, optimizer, index)
    if group is not None:
        return joint_model(group, model, index) if optimizer is None else joint_optimizer(group, model, optimizer,
                                                                                           index)
    return sharded_model(model, index) if optimizer is None else sharded_optimizer(model, optimizer, index)
