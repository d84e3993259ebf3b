"""DeepSpeed's own checkpoint inside ours, and the full weights of a ZeRO model.

``save_state`` asks DeepSpeed's engine to ``save_checkpoint`` straight into our temporary checkpoint folder
(``tag="."``), so its files sit beside ours and the atomic commit, sizes and SHA-256 checks cover them:

* ZeRO 0-2: ``mp_rank_00_model_states.pt`` (rank 0, full weights), ZeRO-3: ``zero_pp_rank_<r>_mp_rank_00_model_states.pt``;
* ZeRO 1-3: ``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (each rank's optimizer partition) and DeepSpeed's
  recovery scripts ``zero_to_fp32.py``/``zero_to_torch.py`` (rank 0).

Before anything changes, ``load_state`` checks the manifest (files, sizes, checksums), reads each of this rank's
DeepSpeed files with ``torch.load(weights_only=True)`` (allowing only the three small DeepSpeed classes its files
hold), and checks that the saved ZeRO stage and weights fit this run; only then does DeepSpeed's own
``load_checkpoint`` (which unpickles without that restriction) restore model and optimizer states together. So, as
for the rest of a checkpoint, a file that would run code when loaded is refused before DeepSpeed sees it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.objects import Saved

__all__ = ["engine_checkpoint", "optimizer_checkpoint", "gathered_weights", "model_files"]

_TAG = "."  # DeepSpeed writes <save_dir>/<tag>/...: with "." straight into our folder
_SCRIPTS = ("zero_to_fp32.py", "zero_to_torch.py")
_OPTIM = "zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def _stage(engine: Any) -> int:
    return int(engine.zero_optimization_stage())


def model_files(stage: int) -> tuple[str, bool, tuple[str, ...]]:
    """``(file, per_rank, shared_files)`` of the model part of DeepSpeed's checkpoint at ZeRO ``stage``."""
    if stage == 3:
        return "zero_pp_rank_{rank}_mp_rank_00_model_states.pt", True, _SCRIPTS
    return "mp_rank_00_model_states.pt", False, _SCRIPTS if stage > 0 else ()


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
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CheckpointError(f"{label}: {os.path.basename(path)} cannot be read as plain data ({type(e).__name__}: "
                              f"{str(e)[:200]}); it is not loaded, since DeepSpeed would unpickle it in full. Load "
                              "only checkpoints saved by this run's DeepSpeed version") from e


def _rank_files(stage: int, rank: int) -> list[str]:
    """The DeepSpeed files this rank's ``load_checkpoint`` reads."""
    model, _, _ = model_files(stage)
    return [model.format(rank=rank)] + ([_OPTIM.format(rank=rank)] if stage > 0 else [])


def _check_saved(directory: str, engine: Any, label: str) -> None:
    """This rank's DeepSpeed files read as plain data, and the saved ZeRO stage and weights fit this engine."""
    stage = _stage(engine)
    files = _rank_files(stage, torch.distributed.get_rank())
    states = [_safe_load(os.path.join(directory, name), label) for name in files]
    state = states[0]
    saved = (state.get("ds_config") or {}).get("zero_optimization", {}).get("stage", 0)
    if int(saved) != stage:
        raise CheckpointError(f"{label}: the checkpoint was saved with ZeRO stage {saved}, this run uses stage {stage}; "
                              f"load it with DeepSpeedPlugin(zero_stage={saved})")
    if "module" in state and state["module"] is not None and stage < 3:
        live = {k: tuple(v.shape) for k, v in engine.module.state_dict().items()}
        keys = {k: tuple(v.shape) for k, v in state["module"].items()}
        if keys != live:
            differ = sorted(k for k in set(live) | set(keys) if live.get(k) != keys.get(k))[:5]
            raise CheckpointError(f"{label}: the saved weights do not fit this model (keys or shapes differ: {differ})")


def engine_checkpoint(engine: Any, index: int) -> Saved:
    """The checkpoint object of DeepSpeed's engine ``index``: written by ``save_checkpoint``, restored by
    ``load_checkpoint`` (which also restores the optimizer's partitions)."""
    file, per_rank, shared = model_files(_stage(engine))
    entry = Entry(kind="model", index=index, file=file, type_name=type(engine.module).__name__, per_rank=per_rank,
                  shared_files=shared)

    def write(directory: str, state: Any) -> None:
        engine.save_checkpoint(directory, tag=_TAG, save_latest=False)

    def read(directory: str) -> str:
        _check_saved(directory, engine, entry.label())
        return directory

    def apply(directory: str) -> None:
        path, _ = engine.load_checkpoint(directory, tag=_TAG, load_optimizer_states=True,
                                         load_lr_scheduler_states=False)
        if path is None:
            raise CheckpointError(f"{entry.label()}: DeepSpeed found no checkpoint in {directory!r}")

    return Saved(entry, lambda: None, lambda state: [], apply, write=write, read=read)


def optimizer_checkpoint(engine: Any, optimizer: Any, index: int) -> Saved:
    """The optimizer's partitions in DeepSpeed's checkpoint: written and restored with the engine's (ZeRO 1-3)."""
    stage = _stage(engine)
    file, per_rank = (_OPTIM, True) if stage > 0 else (model_files(0)[0], False)
    entry = Entry(kind="optimizer", index=index, file=file, type_name=type(optimizer).__name__, per_rank=per_rank)

    def nothing(directory: str, state: Any = None) -> None:
        return None

    return Saved(entry, lambda: None, lambda state: [], lambda state: None, write=nothing, read=nothing)


def gathered_weights(deepspeed: Any, module: torch.nn.Module, is_main: bool, partitioned: bool) -> dict[str, Any]:
    """The full weights on CPU; under ZeRO-3 (``partitioned``) gathered from every rank (collective), the main
    process gets them and the others an empty dict."""
    if not partitioned:
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    out: dict[str, Any] = {}
    with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
        if is_main:
            out = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    return out
