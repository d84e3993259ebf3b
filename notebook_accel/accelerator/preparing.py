"""The Accelerator's records of what it prepared: each model, optimizer and loader once, in the order prepared,
so that checkpoints, ``free_memory`` and the dashboard see every one of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from notebook_accel.accelerator.training_probe import ModelsOwner, TrainingProbe
from notebook_accel.data import DataPrepareError, PreparedDataLoader
from notebook_accel.optimizer import AcceleratedOptimizer

__all__ = ["models_training", "record_loader", "record_prepared", "refuse_dispatch_slicing", "scheduler_optimizers"]


def record_prepared(done: Iterable[Any], models: list[torch.nn.Module],
                    optimizers: list[AcceleratedOptimizer]) -> None:
    """Append the models and wrapped optimizers among ``done`` that are not recorded yet."""
    for obj in done:
        if isinstance(obj, torch.nn.Module) and not any(obj is m for m in models):
            models.append(obj)
        elif isinstance(obj, AcceleratedOptimizer) and not any(obj is o for o in optimizers):
            optimizers.append(obj)


def record_loader(prepared: PreparedDataLoader, loaders: list[PreparedDataLoader], owner: ModelsOwner) -> None:
    """Append ``prepared`` unless recorded, with its index and a weak probe of ``owner``'s models' mode."""
    if not any(prepared is d for d in loaders):
        prepared.loader_index = len(loaders)
        prepared.training_probe = TrainingProbe(owner)  # a strong one made a cycle (see TrainingProbe)
        loaders.append(prepared)


def scheduler_optimizers(scheduler: Any, optimizers: list[AcceleratedOptimizer]) -> list[AcceleratedOptimizer]:
    """The prepared optimizers ``scheduler`` drives (it may have been built on the wrapped or the plain one)."""
    return [o for o in optimizers if o.optimizer is scheduler.optimizer or o is scheduler.optimizer]


def refuse_dispatch_slicing(slice_fn_for_dispatch: Any) -> None:
    """Raise unless ``slice_fn_for_dispatch`` is ``None``.

    Raises:
        DataPrepareError: a function was given (each process reads its own share here; nothing is sliced).
    """
    if slice_fn_for_dispatch is not None:
        raise DataPrepareError(f"prepare_data_loader: slice_fn_for_dispatch={slice_fn_for_dispatch!r} is not "
                               "supported (each process reads its own share; nothing is sliced); pass None")


def models_training(models: list[torch.nn.Module]) -> bool | None:
    """Whether any of ``models`` is in training mode (``None`` without a model), asked of the module a wrapper
    wraps: DeepSpeed's engine passes ``eval()`` on to its module and keeps its own ``training`` at ``True`` (its
    eval loop read as training); DDP and FSDP keep both flags in step.

    Example:
        >>> net = torch.nn.Linear(2, 2); net.eval(); models_training([net])
        Linear(in_features=2, out_features=2, bias=True)
        False
    """
    if not models:
        return None
    return any(_inner(model).training for model in models)


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The module a wrapper (DDP, DeepSpeed's engine) holds as ``.module``, else ``model`` itself."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model
