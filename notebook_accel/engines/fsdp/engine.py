"""What an :class:`~notebook_accel.Accelerator` does differently under FSDP, in one object it delegates to.

:class:`FSDPEngine` shards models in ``prepare`` (:mod:`.wrap`), re-binds optimizers to the sharded
parameters (:mod:`.params`), and gathers full weights for ``get_state_dict``/``save_model``. The Accelerator
builds one (:func:`notebook_accel.engines.select.select_engine`) when the plugin asks for FSDP and more than one
process runs (one process has nothing to shard). It is the plain engine with these parts replaced.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor

from notebook_accel.engines.ddp import DDPEngine
from notebook_accel.engines.fsdp.layout import FsdpLayout
from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin
from notebook_accel.engines.fsdp.wrap import shard_model
from notebook_accel.engines.protocol import EngineParts
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.model import is_sharded
from notebook_accel.optimizer import AcceleratedOptimizer
from notebook_accel.parameter_map import ParameterMap
from notebook_accel.plugins import ConfigurationError
from notebook_accel.precision import MixedPrecision, wrap_forward
from notebook_accel.state import GradientState, ProcessState

__all__ = ["FSDPEngine", "build", "resolve_fsdp_plugin", "full_state_dict", "plain_norm"]


def resolve_fsdp_plugin(plugin: Any, env: LaunchEnvironment) -> FullyShardedDataParallelPlugin | None:
    """``Accelerator(fsdp_plugin=)``, else the launch config's FSDP settings (``NOTEBOOK_ACCEL_FSDP``), else None.

    Raises:
        ConfigurationError: ``plugin`` is not a :class:`FullyShardedDataParallelPlugin`.
    """
    if plugin is not None:
        if not isinstance(plugin, FullyShardedDataParallelPlugin):
            raise ConfigurationError(f"fsdp_plugin: expected a FullyShardedDataParallelPlugin, got "
                                     f"{type(plugin).__name__}; build one with FullyShardedDataParallelPlugin(...)")
        return plugin
    options = env.engine_options(FSDPEngine.name)
    return FullyShardedDataParallelPlugin.from_json(options) if options else None


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights on CPU, on rank 0; an empty dict on the other ranks. Collective."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=options))


def plain_norm(total: torch.Tensor) -> torch.Tensor:
    """A gradient norm as a plain tensor (``clip_grad_norm_`` over sharded gradients returns a DTensor)."""
    return total.full_tensor() if isinstance(total, DTensor) else total


class FSDPEngine(DDPEngine):
    """Shards prepared models and keeps prepared optimizers on the sharded parameters.

    Args:
        plugin: the FSDP options.
        state: this process's state.
        mixed_precision: the Accelerator's precision.
    """

    name = "FSDP"

    def __init__(self, plugin: FullyShardedDataParallelPlugin, state: ProcessState,
                 mixed_precision: MixedPrecision) -> None:
        super().__init__(state, mixed_precision, layout=FsdpLayout(plugin))
        self.plugin = plugin
        self.params = ParameterMap("FSDP")
        self._optimizers: list[torch.optim.Optimizer] = []

    def prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        """Shard ``model`` (once) and re-bind the optimizers prepared so far to its new parameters."""
        if is_sharded(model):
            return model
        on_meta = any(t.is_meta for t in model.state_dict().values())
        if device_placement and not on_meta:
            model = model.to(self.state.device)
        wrap_forward(model, self.mixed_precision, self.state.device)
        before = dict(model.named_parameters())
        shard_model(model, self.plugin, self.state, self.mixed_precision)
        self.params.record(before, dict(model.named_parameters()))
        self.params.rebind_all(self._optimizers)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, gradient_state: GradientState,
                          scaler: Any) -> AcceleratedOptimizer:
        """Point ``optimizer`` at the sharded parameters of the models prepared so far, then wrap it."""
        self.params.rebind(optimizer)
        self._optimizers.append(optimizer)
        return super().prepare_optimizer(optimizer, gradient_state, scaler)

    def clip_grad_norm_(self, parameters: Iterable[torch.Tensor], max_norm: float,
                        norm_type: float) -> torch.Tensor | None:
        """Clip the sharded gradients; the total norm over every shard, as a plain tensor."""
        total = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        return plain_norm(total)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, Any]:
        """The full weights gathered on CPU to rank 0 (collective) for a sharded model."""
        return full_state_dict(model) if is_sharded(model) else super().full_state_dict(model)


def build(plugin: Any, env: LaunchEnvironment,
          parts: EngineParts) -> tuple[DDPEngine, FullyShardedDataParallelPlugin | None]:
    """The engine for ``Accelerator(fsdp_plugin=plugin)`` or the launch config's FSDP settings, and the plugin in
    use: one process trains plainly (nothing to shard) but keeps the plugin.

    Raises:
        ConfigurationError: ``plugin`` is not a :class:`FullyShardedDataParallelPlugin`.
    """
    resolved = resolve_fsdp_plugin(plugin, env)
    if resolved is None or parts.state.num_processes == 1:
        return DDPEngine(parts.state, parts.mixed_precision, parts.ddp_handler, FsdpLayout(resolved)), resolved
    return FSDPEngine(resolved, parts.state, parts.mixed_precision), resolved
