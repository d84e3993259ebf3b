"""Everything DeepSpeed's ``load_checkpoint`` would check, checked before it runs (it changes the model first).

DeepSpeed loads the module's weights, then the optimizer partitions, and only on the way refuses what does not
fit (another number of processes, an extra layer, another partition layout): by then the model has changed. So
before it is called, each rank reads its own DeepSpeed files (together, the ranks read every file DeepSpeed's
``load_checkpoint`` will read) with ``torch.load(weights_only=True)`` (DeepSpeed itself unpickles them in full, so
a file that could run code is refused here) and compares them with the live engine: the ZeRO stage, the number of
processes, the keys and full shapes of the weights (from ``param_shapes`` under ZeRO-3, whose saved module holds empty
partitions), and the ZeRO partition layout (partition counts, alignment paddings, the size of each flat fp32 partition).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from notebook_accel.checkpointing.errors import CheckpointError

__all__ = ["check_saved", "model_files", "OPTIM", "world_size_reason"]

OPTIM = "zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
_SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")


def model_files(stage: int) -> tuple[str, bool, tuple[str, ...]]:
    """``(file, per_rank, shared_files)`` of the model part of DeepSpeed's checkpoint at ZeRO ``stage``."""
    if stage == 3:
        return "zero_pp_rank_{rank}_mp_rank_00_model_states.pt", True, _SCRIPTS
    return "mp_rank_00_model_states.pt", False, _SCRIPTS if stage > 0 else ()


def world_size_reason(stage: int) -> str | None:
    """Why a checkpoint of ZeRO ``stage`` cannot be loaded by another number of processes (``None``: it can)."""
    if stage == 0:
        return None
    return (f"DeepSpeed cannot load ZeRO stage {stage} optimizer partitions into another number of processes (it "
            "refuses after loading the weights), so allow_world_size_change=True cannot help here. Resume with the "
            "saved number of processes; save_model there writes full weights that any number can load")


def _safe_load(path: str, label: str) -> Any:
    """``torch.load(weights_only=True)`` of a DeepSpeed file, with only DeepSpeed's plain record classes allowed.

    Raises:
        CheckpointError: the file holds anything else (it could run code when DeepSpeed unpickles it).
    """
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    try:
        with torch.serialization.safe_globals([LossScaler, ZeroStageEnum, fragment_address]):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:
        raise CheckpointError(f"{label}: {os.path.basename(path)} cannot be read as plain data ({type(e).__name__}: "
                              f"{str(e)[:200]}); it is not loaded, since DeepSpeed would unpickle it in full. Load "
                              "only checkpoints saved by this run's DeepSpeed version") from e


def _read_files(directory: str, stage: int, label: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """This rank's model file and optimizer file (``None`` at stage 0: the optimizer is in the model file).

    With ``elastic_checkpoint`` DeepSpeed reads every rank's optimizer file on every rank; each of them is read
    here by its own rank (the number of processes is the saved one, checked below), and no rank goes on unless
    all succeeded.
    """
    rank = torch.distributed.get_rank()
    model = _safe_load(os.path.join(directory, model_files(stage)[0].format(rank=rank)), label)
    if not isinstance(model, dict):
        raise CheckpointError(f"{label}: the model file holds a {type(model).__name__}, not DeepSpeed's dict")
    if stage == 0:
        return model, None
    own = _safe_load(os.path.join(directory, OPTIM.format(rank=rank)), label)
    return model, own if isinstance(own, dict) else {}


def _live_shapes(engine: Any) -> dict[str, tuple[int, ...]]:
    """Every parameter's full shape (``ds_shape`` under ZeRO-3, where the local tensor is an empty partition)."""
    return {name: tuple(getattr(p, "ds_shape", p.shape)) for name, p in engine.module.named_parameters()}


def _shape_problems(state: dict[str, Any], engine: Any, stage: int) -> list[str]:
    """The saved weights' keys and full shapes against the live module's."""
    module = state.get("module")
    if not isinstance(module, dict):
        return ["the model file holds no module state"]
    live_keys = set(engine.module.state_dict())
    problems = []
    if set(module) != live_keys:
        problems.append(f"keys differ (missing in the checkpoint: {sorted(live_keys - set(module))[:5]}, unexpected: "
                        f"{sorted(set(module) - live_keys)[:5]})")
    if stage < 3:
        saved = {k: tuple(v.shape) for k, v in module.items() if isinstance(v, torch.Tensor)}
        live = {k: tuple(v.shape) for k, v in engine.module.state_dict().items()}
    else:
        groups = [*(state.get("param_shapes") or []), state.get("frozen_param_shapes") or {}]
        saved = {k: tuple(v) for group in groups if isinstance(group, dict) for k, v in group.items()}
        live = _live_shapes(engine)
    differ = sorted(k for k in set(live) & set(saved) if live[k] != saved[k])
    problems += [f"{k} has shape {saved[k]} in the checkpoint, {live[k]} here" for k in differ[:5]]
    return problems


def _numels(tensors: Any) -> list[int] | None:
    if not isinstance(tensors, list) or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    return [t.numel() for t in tensors]


def _partition_problems(optim: dict[str, Any], engine: Any, stage: int) -> list[str]:
    """The saved ZeRO partition layout of this rank against the live optimizer's (ZeRO 1-2 save each flat fp32
    partition without its padding and the padding beside it; ZeRO-3 saves it whole)."""
    saved = optim.get("optimizer_state_dict")
    live = engine.optimizer
    if not isinstance(saved, dict):
        return ["the optimizer file holds no ZeRO optimizer state"]
    if stage == 3:
        sizes, live_sizes = _numels(saved.get("fp32_flat_groups")), _numels(live.fp32_partitioned_groups_flat)
        paddings: tuple[Any, Any] = (None, None)
    else:
        sizes, live_sizes = _numels(saved.get("single_partition_of_fp32_groups")), _numels(
            list(live.single_partition_of_fp32_groups))
        paddings = (saved.get("group_paddings"), getattr(live, "groups_padding", None))
        if sizes is not None and isinstance(paddings[0], list) and len(paddings[0]) == len(sizes) \
                and all(isinstance(p, int) for p in paddings[0]):
            sizes = [n + p for n, p in zip(sizes, paddings[0])]
    pairs = [("partition count", saved.get("partition_count"), getattr(live, "partition_count", None)),
             ("flat fp32 partition sizes", sizes, live_sizes), ("group paddings", *paddings),
             ("parameter alignment paddings", saved.get("param_alignment_paddings"),
              getattr(live, "round_robin_bit16_padding", None))]
    return [f"the ZeRO {what} {'are' if what.endswith('s') else 'is'} {theirs!r:.80} in the checkpoint, "
            f"{ours!r:.80} here" for what, theirs, ours in pairs if theirs is not None and ours is not None
            and theirs != ours]


def check_saved(directory: str, engine: Any, label: str) -> None:
    """Read every DeepSpeed file this rank's ``load_checkpoint`` reads as plain data and check that the checkpoint
    fits ``engine`` (stage, number of processes, weights, partition layout).

    Raises:
        CheckpointError: what does not fit, before DeepSpeed changes anything.
    """
    stage = int(engine.zero_optimization_stage())
    state, optim = _read_files(directory, stage, label)
    saved = (state.get("ds_config") or {}).get("zero_optimization", {}).get("stage", 0)
    if int(saved) != stage:
        raise CheckpointError(f"{label}: the checkpoint was saved with ZeRO stage {saved}, this run uses stage {stage}; "
                              f"load it with DeepSpeedPlugin(zero_stage={saved})")
    world = int(getattr(engine, "seq_dp_world_size", torch.distributed.get_world_size()))
    if stage > 0 and state.get("dp_world_size") != world:
        raise CheckpointError(f"{label}: the checkpoint was saved by {state.get('dp_world_size')} process(es), this "
                              f"run has {world}. {world_size_reason(stage)}")
    problems = _shape_problems(state, engine, stage)
    if optim is not None and not problems:
        problems = _partition_problems(optim, engine, stage)
    if problems:
        raise CheckpointError(f"{label}: the checkpoint does not fit this model and optimizer: " + "; ".join(problems)
                              + ". Build the same model and DeepSpeed settings as the saving run before load_state")
