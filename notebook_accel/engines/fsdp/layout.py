"""Which models a checkpoint keeps in FSDP's layout, and their checkpoint objects.

A model is saved in the FSDP layout when it is sharded or when the Accelerator has an FSDP plugin (also in one
process, which shards nothing), so a checkpoint's layout does not depend on the number of processes. On load the
checkpoint decides: a model saved in the FSDP layout is read in that layout (sharded or full), so one process
without a plugin can resume a sharded run; that is why the plain engine asks here too. The DCP code
(:mod:`.checkpoint`) is imported only when a model uses the layout.
"""

from __future__ import annotations

from typing import Any

import torch

from notebook_accel.checkpointing.manifest import Entry
from notebook_accel.checkpointing.saved import CheckpointContext, Saved
from notebook_accel.model import is_sharded

__all__ = ["FsdpLayout", "fsdp_layout", "apart", "owning_model"]


_JOINT = "fsdp_state_"  # the stem of a model's joint DCP state with its optimizers (format 4 on)
_APART = "pytorch_model_fsdp_"  # the stem of a model's own files (a sharded one's before format 4; full weights)


def fsdp_layout(entry: Entry | None) -> str | None:
    """The FSDP ``state_dict_type`` a saved model entry was written in, or ``None`` (a plain model file)."""
    if entry is None or entry.kind != "model" or not entry.file.startswith((_APART, _JOINT)):
        return None
    return "SHARDED_STATE_DICT" if entry.per_rank else "FULL_STATE_DICT"


def apart(entry: Entry | None) -> bool:
    """True when a saved sharded model entry holds the model alone (the layout before format 4): its
    optimizers have DCP files of their own."""
    return entry is not None and entry.per_rank and entry.file.startswith(_APART)


def owning_model(optimizer: torch.optim.Optimizer, models: list[torch.nn.Module]) -> torch.nn.Module | None:
    """The model among ``models`` (those checkpointed in the FSDP layout) whose parameters ``optimizer`` trains,
    or ``None``."""
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in models:
        if any(id(p) in ids for p in model.parameters()):
            return model
    return None


class FsdpLayout:
    """The checkpoint objects of models kept in the FSDP layout (and of their optimizers).

    Args:
        plugin: the FSDP plugin in use (its ``state_dict_type`` is the layout a model is saved in), or ``None``.
    """

    def __init__(self, plugin: Any = None) -> None:
        self.plugin = plugin

    def layouts(self, context: CheckpointContext) -> dict[int, str]:
        """The FSDP ``state_dict_type`` of each model that uses the layout, by index."""
        default = str(getattr(self.plugin, "state_dict_type", "SHARDED_STATE_DICT"))
        saved = context.saved
        entries = {e.index: e for e in saved.entries_of("model")} if saved is not None else {}
        out: dict[int, str] = {}
        for i, model in enumerate(context.models):
            layout = fsdp_layout(entries.get(i))
            if layout is None and (is_sharded(model) or self.plugin is not None):
                layout = default
            if layout is not None:
                out[i] = layout
        return out

    def model(self, index: int, context: CheckpointContext) -> Saved | None:
        """The checkpoint object of model ``index`` when it uses the FSDP layout, else ``None``."""
        layout = self.layouts(context).get(index)
        if layout is None:
            return None
        from notebook_accel.engines.fsdp import checkpoint  # imports FSDP: only when a model uses its layout

        return checkpoint.fsdp_objects(context.models[index], None, index, layout, self._group(index, context))

    def optimizer(self, optimizer: torch.optim.Optimizer, index: int, context: CheckpointContext) -> Saved | None:
        """The checkpoint object of optimizer ``index`` when it trains a model in the FSDP layout, else ``None``."""
        layouts = self.layouts(context)
        owner = owning_model(optimizer, [context.models[i] for i in sorted(layouts)]) if layouts else None
        if owner is None:
            return None
        from notebook_accel.engines.fsdp import checkpoint

        model = next(i for i in layouts if context.models[i] is owner)
        return checkpoint.fsdp_objects(owner, optimizer, index, layouts[model], self._group(model, context))

    @staticmethod
    def _group(index: int, context: CheckpointContext) -> Any:
        """Model ``index``'s joint DCP state with its optimizers (one per checkpoint), or ``None`` when the
        checkpoint being loaded holds them apart (format 3 and older)."""
        saved = context.saved
        if saved is not None and apart(next((e for e in saved.entries_of("model") if e.index == index), None)):
            return None
        from notebook_accel.engines.fsdp.joint import JointShards

        return context.shared.setdefault(("fsdp", index), JointShards(index))
