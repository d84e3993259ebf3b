"""DeepSpeed's own checkpoint inside ours, and the full weights of a ZeRO model.

``save_state`` asks DeepSpeed's engine to ``save_checkpoint`` straight into our temporary checkpoint folder
(``tag="."``), so its files sit beside ours and the atomic commit, sizes and checksums cover them:

* ZeRO 0-2: ``mp_rank_00_model_states.pt`` (rank 0, full weights), ZeRO-3:
  ``zero_pp_rank_<r>_mp_rank_00_model_states.pt``;
* ZeRO 1-3: ``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (each rank's optimizer partition) and DeepSpeed's
  recovery scripts ``zero_to_fp32.py``/``zero_to_torch.py`` (rank 0).

Before anything changes, ``load_state`` checks the manifest (files, sizes, checksums), refuses a ZeRO checkpoint of
another number of processes (DeepSpeed cannot repartition it), and :mod:`.load_checks` reads every DeepSpeed file
this rank's ``load_checkpoint`` reads with ``torch.load(weights_only=True)`` (allowing only the three small
DeepSpeed classes its files hold) and checks the saved ZeRO stage, weights and partition layout against this run;
only then does DeepSpeed's own ``load_checkpoint`` (which unpickles without that restriction) restore model and
optimizer states together. So, as for the rest of a checkpoint, a file that would run code when loaded is refused
before DeepSpeed sees it.
"""

from __future__ import annotations

from typing import Any

import torch

from notebook_accel.checkpointing.errors import CheckpointError
from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.saved import Saved
from notebook_accel.engines.deepspeed.load_checks import OPTIM, check_saved, model_files, world_size_reason

__all__ = ["engine_checkpoint", "optimizer_checkpoint", "gathered_weights", "model_files"]

_TAG = "."  # DeepSpeed writes <save_dir>/<tag>/...: with "." straight into our folder


def _stage(engine: Any) -> int:
    return int(engine.zero_optimization_stage())


_NO_BACKGROUND = (
    "DeepSpeed writes its checkpoint with engine.save_checkpoint(), which reads the live engine (its ZeRO "
    "partitions, on the device) and runs its own collectives on the training process group; it offers no "
    "snapshot to hand to a background writer, so a background save could write a state the training loop is "
    "changing"
)


def engine_checkpoint(engine: Any, index: int) -> Saved:
    """The checkpoint object of DeepSpeed's engine ``index``: written by ``save_checkpoint``, restored by
    ``load_checkpoint`` (which also restores the optimizer's partitions)."""
    file, per_rank, shared = model_files(_stage(engine))
    entry = Entry(kind="model", index=index, file=file, type_name=type(engine.module).__name__, per_rank=per_rank,
                  shared_files=shared)

    def write(directory: str, state: Any) -> None:
        engine.save_checkpoint(directory, tag=_TAG, save_latest=False)

    def read(directory: str) -> str:
        check_saved(directory, engine, entry.label())
        return directory

    def apply(directory: str) -> None:
        path, _ = engine.load_checkpoint(directory, tag=_TAG, load_optimizer_states=True,
                                         load_lr_scheduler_states=False)
        if path is None:
            raise CheckpointError(f"{entry.label()}: DeepSpeed found no checkpoint in {directory!r}")

    return Saved(entry, lambda: None, lambda state: [], apply, write=write, read=read,
                 fixed_world=world_size_reason(_stage(engine)), background=_NO_BACKGROUND)


def optimizer_checkpoint(engine: Any, optimizer: Any, index: int) -> Saved:
    """The optimizer's partitions in DeepSpeed's checkpoint: written and restored with the engine's (ZeRO 1-3)."""
    stage = _stage(engine)
    file, per_rank = (OPTIM, True) if stage > 0 else (model_files(0)[0], False)
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
