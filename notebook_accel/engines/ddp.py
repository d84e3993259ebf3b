"""The plain engine: one process, or torch's DistributedDataParallel (what runs without an FSDP/DeepSpeed plugin).

The sharded engines subclass it and replace only what differs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from notebook_accel.engines.fsdp.layout import FsdpLayout
from notebook_accel.kwargs_handlers import DistributedDataParallelKwargs
from notebook_accel.model import no_sync, prepare_model, unwrap_model
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.precision import MixedPrecision, make_scaler
from notebook_accel.state import GradientState, ProcessState

if TYPE_CHECKING:
    from notebook_accel.checkpointing.saved import CheckpointContext, Saved
    from notebook_accel.data import PreparedDataLoader

__all__ = ["DDPEngine"]


class DDPEngine:
    """Places models, wraps them in DDP when more than one process runs, and steps torch optimizers.

    Args:
        state: this process's state.
        mixed_precision: the Accelerator's precision.
        ddp_handler: ``DistributedDataParallelKwargs`` for the DDP wrapper, or ``None``.
        layout: which models a checkpoint keeps in FSDP's layout (default: sharded models, and those a checkpoint
            being loaded saved in it).
    """

    name = "DDP"
    plugin: Any = None

    def __init__(self, state: ProcessState, mixed_precision: MixedPrecision,
                 ddp_handler: DistributedDataParallelKwargs | None = None, layout: FsdpLayout | None = None) -> None:
        self.state = state
        self.mixed_precision = mixed_precision
        self.ddp_handler = ddp_handler
        self.layout = layout if layout is not None else FsdpLayout()

    def grad_scaler(self, handler: Any) -> Any:
        """torch's ``GradScaler`` under fp16, else ``None``."""
        return make_scaler(self.mixed_precision, self.state.device, handler)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        """Device, mixed-precision forward and DDP (see :func:`notebook_accel.model.prepare_model`)."""
        return prepare_model(model, self.state, self.mixed_precision, self.ddp_handler, device_placement)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, gradient_state: GradientState,
                          scaler: Any) -> AcceleratedOptimizer:
        """The optimizer wrapped for accumulation and fp16."""
        return AcceleratedOptimizer(optimizer, gradient_state, scaler)

    def finish_prepare(self, objects: list[Any], loaders: Sequence[PreparedDataLoader]) -> list[Any]:
        """Nothing more to do: every object was prepared on its own."""
        return objects

    def backward(self, loss: torch.Tensor, gradient_state: GradientState, scaler: Any, **kwargs: Any) -> None:
        """``loss.backward()``, divided by the accumulation steps and scaled under fp16."""
        if gradient_state.num_steps > 1:
            loss = loss / gradient_state.num_steps
        if scaler is not None:
            loss = scaler.scale(loss)
        loss.backward(**kwargs)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """DDP's (or FSDP2's) ``no_sync``; a no-op for a model that is not distributed."""
        return no_sync(model)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float) -> torch.Tensor | None:
        """``torch.nn.utils.clip_grad_norm_`` (gradients are already unscaled)."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model itself (DDP and ``torch.compile`` wrappers are removed by the Accelerator)."""
        return model

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The unwrapped model's ``state_dict()`` (every process holds the full weights)."""
        return unwrap_model(model).state_dict()

    def checkpoint_model(self, index: int, context: CheckpointContext) -> Saved | None:
        """FSDP's checkpoint object for a model in its layout (a sharded model, or one a checkpoint saved so, which
        a plain run can resume); ``None`` otherwise: the model's ``state_dict`` is saved as a plain file."""
        return self.layout.model(index, context)

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer, index: int,
                             context: CheckpointContext) -> Saved | None:
        """FSDP's checkpoint object for an optimizer of a model in its layout; ``None`` otherwise (a plain file)."""
        return self.layout.optimizer(optimizer, index, context)
