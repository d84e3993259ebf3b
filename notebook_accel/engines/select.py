"""Choosing the engine once, from the Accelerator's plugins and the launch config.

An explicit plugin wins over the launch config (``NOTEBOOK_ACCEL_FSDP`` / ``NOTEBOOK_ACCEL_DEEPSPEED``, set by the
launcher from ``distributed_type``); asking for both FSDP and DeepSpeed is refused. The FSDP and DeepSpeed modules
are imported only here and only when asked for (``torch.distributed.fsdp`` and ``deepspeed`` are slow to import).
"""

from __future__ import annotations

from typing import Any

from notebook_accel.engines.ddp import DDPEngine
from notebook_accel.engines.protocol import Engine
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.kwargs_handlers import DistributedDataParallelKwargs
from notebook_accel.plugins import ConfigurationError
from notebook_accel.precision import MixedPrecision
from notebook_accel.state import DistributedType, GradientState, ProcessState

__all__ = ["select_engine"]


def select_engine(fsdp_plugin: Any, deepspeed_plugin: Any, env: LaunchEnvironment, state: ProcessState,
                  mixed_precision: MixedPrecision, ddp_handler: DistributedDataParallelKwargs | None,
                  gradient_state: GradientState) -> tuple[Engine, Any, Any]:
    """The engine for this Accelerator, and the FSDP and DeepSpeed plugins in use (``None`` when not).

    FSDP with one process trains plainly (nothing to shard) but keeps its plugin; DeepSpeed runs with any number
    of processes, as in accelerate. ``state.distributed_type`` is set to the engine's type.

    Raises:
        ConfigurationError: both engines asked for, or a plugin of the wrong type.
    """
    wants_fsdp = fsdp_plugin is not None or bool(env.fsdp)
    wants_deepspeed = deepspeed_plugin is not None or bool(env.deepspeed)
    if wants_fsdp and wants_deepspeed:
        raise ConfigurationError("Accelerator: both FSDP and DeepSpeed were asked for (fsdp_plugin / deepspeed_plugin "
                                 "or the launch config's distributed_type); pick one of them")
    if wants_deepspeed:
        from notebook_accel.engines.deepspeed.engine import DeepSpeedEngine, resolve_deepspeed_plugin

        ds_plugin = resolve_deepspeed_plugin(deepspeed_plugin, env)
        state.distributed_type = DistributedType.DEEPSPEED
        return DeepSpeedEngine(ds_plugin, state, mixed_precision, gradient_state), None, ds_plugin
    plain = DDPEngine(state, mixed_precision, ddp_handler)
    if not wants_fsdp:
        return plain, None, None
    from notebook_accel.engines.fsdp.engine import FSDPEngine, resolve_fsdp_plugin

    resolved = resolve_fsdp_plugin(fsdp_plugin, env)
    if resolved is None or state.num_processes == 1:
        return plain, resolved, None
    state.distributed_type = DistributedType.FSDP
    return FSDPEngine(resolved, state, mixed_precision), resolved, None
