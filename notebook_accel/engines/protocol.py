"""What an engine does for the :class:`~notebook_accel.Accelerator` (one protocol for DDP, FSDP and DeepSpeed).

The Accelerator owns the user-facing verbs and the bookkeeping (which models, optimizers and loaders are prepared,
the accumulation counter); the engine owns what depends on how the model is distributed: wrapping models and
optimizers, the backward pass, skipping gradient sync while accumulating, clipping, unwrapping, gathering full
weights, and the checkpoint objects of what it wrapped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from notebook_accel.kwargs_handlers import DistributedDataParallelKwargs
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.precision import MixedPrecision
from notebook_accel.state import GradientState, ProcessState

if TYPE_CHECKING:
    from notebook_accel.checkpointing.saved import CheckpointContext, Saved
    from notebook_accel.data import PreparedDataLoader

__all__ = ["Engine", "EngineParts"]


@dataclass(frozen=True)
class EngineParts:
    """What every engine is built from besides its plugin (the Accelerator's own objects).

    Attributes:
        state: this process's state.
        mixed_precision: the Accelerator's precision.
        ddp_handler: ``DistributedDataParallelKwargs`` for the plain engine's DDP wrapper, or ``None``.
        gradient_state: the Accelerator's accumulation state.
    """

    state: ProcessState
    mixed_precision: MixedPrecision
    ddp_handler: DistributedDataParallelKwargs | None
    gradient_state: GradientState


class Engine(Protocol):
    """The strategy an Accelerator delegates to.

    Attributes:
        name: ``"DDP"`` (plain: one process, or DistributedDataParallel), ``"FSDP"`` or ``"DEEPSPEED"``.
        plugin: the engine's options object (``None`` for plain DDP).
    """

    name: str
    plugin: Any

    def grad_scaler(self, handler: Any) -> Any:
        """The ``GradScaler`` for fp16 (``handler``: the user's ``GradScalerKwargs``), or ``None`` when the engine
        needs none (no fp16, or an engine that scales losses itself)."""

    def prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        """The module to train with (placed, wrapped); an engine may finish it in :meth:`finish_prepare`."""

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, gradient_state: GradientState,
                          scaler: Any) -> AcceleratedOptimizer:
        """The optimizer wrapper whose ``step``/``zero_grad`` follow the accumulation state."""

    def finish_prepare(self, objects: list[Any], loaders: Sequence[PreparedDataLoader]) -> list[Any]:
        """The objects of one ``prepare`` call after the engine saw all of them (DeepSpeed wraps a model and its
        optimizer together here); ``loaders`` are every prepared loader so far."""

    def backward(self, loss: torch.Tensor, gradient_state: GradientState, scaler: Any, **kwargs: Any) -> None:
        """The backward pass of one batch (scaled for accumulation and fp16 as the engine needs)."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """A context in which backward passes do not synchronise gradients across processes."""

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float) -> torch.Tensor | None:
        """Clip gradients to ``max_norm``; the total norm before clipping (over every shard)."""

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module inside the engine's own wrapper (the model itself when the engine adds none)."""

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights of ``model`` (collective under sharding; the main process gets them)."""

    def checkpoint_model(self, index: int, context: CheckpointContext) -> Saved | None:
        """The checkpoint object of model ``index`` of ``context`` in the engine's own layout, or ``None`` for a
        plain ``state_dict`` file; generic checkpointing asks this for every model."""

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer, index: int,
                             context: CheckpointContext) -> Saved | None:
        """The checkpoint object of optimizer ``index`` (which trains models of ``context``), or ``None`` for a
        plain ``state_dict`` file."""
