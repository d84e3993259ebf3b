"""Choosing the engine once, from the Accelerator's plugins and the launch config: the composition root.

An explicit plugin wins over the launch config (``LaunchEnvironment.engine``, set by the launcher from
``distributed_type``); asking for two sharded engines is refused. The engines are known only through
:mod:`.registry`, and a sharded engine's modules are imported only when asked for (``torch.distributed.fsdp`` and
``deepspeed`` are slow to import).
"""

from __future__ import annotations

from typing import Any

from notebook_accel.engines.ddp import DDPEngine
from notebook_accel.engines.protocol import Engine, EngineParts
from notebook_accel.engines.registry import DEEPSPEED, ENGINES, FSDP
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
    of processes, as in accelerate. ``state.distributed_type`` is set to the engine's type, and
    ``state.fsdp_plugin``/``state.deepspeed_plugin`` to the plugins in use (accelerate's ``AcceleratorState`` has
    both; each is ``None`` when its engine does not run).

    Raises:
        ConfigurationError: two engines asked for, or a plugin of the wrong type.
    """
    given = {FSDP.argument: fsdp_plugin, DEEPSPEED.argument: deepspeed_plugin}  # accelerate's argument names
    wanted = [spec for spec in ENGINES.values()
              if given.get(spec.argument) is not None or env.engine_options(spec.name)]
    if len(wanted) > 1:
        raise ConfigurationError(f"Accelerator: both {' and '.join(s.title for s in wanted)} were asked for "
                                 f"({' / '.join(s.argument for s in wanted)} or the launch config's "
                                 "distributed_type); pick one of them")
    if not wanted:
        return DDPEngine(state, mixed_precision, ddp_handler), None, None
    spec = wanted[0]
    plugins: dict[str, Any] = dict.fromkeys(given)
    parts = EngineParts(state, mixed_precision, ddp_handler, gradient_state)
    engine, plugins[spec.argument] = spec.builder()(given.get(spec.argument), env, parts)
    if engine.name != DDPEngine.name:
        state.distributed_type = DistributedType(engine.name)
    state.fsdp_plugin, state.deepspeed_plugin = plugins[FSDP.argument], plugins[DEEPSPEED.argument]
    return engine, plugins[FSDP.argument], plugins[DEEPSPEED.argument]
