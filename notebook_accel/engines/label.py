"""The name of the engine a run trains with, as the dashboard header and the console show it.

``"DDP"``, ``"FSDP FULL_SHARD"``, ``"FSDP SHARD_GRAD_OP (offload: parameters)"``, ``"DeepSpeed ZeRO-3 (offload:
optimizer, parameters)"``, or ``"single process"``. Two places name it: the launcher, from the launch config,
before any worker runs (:func:`config_engine`, carried in :class:`~notebook_accel.events.RunInfo`), and the main
process's Accelerator once it has decided (:func:`report_engine`, an :class:`~notebook_accel.events.EngineReady`
event), which also knows an engine chosen in code (``Accelerator(fsdp_plugin=...)``) and wins over the first.

Each engine labels itself (:meth:`~notebook_accel.engines.registry.EngineSpec.label`) from its plugin fields, read
from a config's plugin arguments or from a plugin's attributes alike. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from notebook_accel.engines.registry import ENGINES, PLAIN_ENGINES, plain_label, spec

__all__ = ["PLAIN_ENGINES", "engine_label", "config_engine", "accelerator_engine", "report_engine"]


def engine_label(distributed_type: str | None, options: Mapping[str, Any] | None, num_processes: int) -> str:
    """The engine's name for people.

    Args:
        distributed_type: ``"FSDP"``, ``"DEEPSPEED"``, or anything else (plain data parallel).
        options: the engine's plugin fields (``sharding_strategy``, ``zero_stage``...); missing ones take the
            plugin defaults.
        num_processes: the processes taking part (one process shards nothing).

    Example:
        >>> engine_label("FSDP", {"sharding_strategy": "SHARD_GRAD_OP", "cpu_offload": True}, 2)
        'FSDP SHARD_GRAD_OP (offload: parameters)'
        >>> engine_label("DEEPSPEED", {"zero_stage": 3, "offload_optimizer_device": "cpu"}, 4)
        'DeepSpeed ZeRO-3 (offload: optimizer)'
        >>> engine_label(None, None, 2)
        'DDP'
    """
    engine = spec(distributed_type)
    return plain_label(num_processes) if engine is None else engine.label(options, num_processes)


def config_engine(config: Any, num_processes: int) -> str:
    """The engine a launch config asks for (``distributed_type`` and its section); ``""`` without a config."""
    if config is None:
        return ""
    engine = spec(getattr(config, "distributed_type", None))
    return plain_label(num_processes) if engine is None else engine.label(engine.config_options(config),
                                                                          num_processes)


def accelerator_engine(accelerator: Any) -> str:
    """The engine an Accelerator trains with: the sharded engine whose plugin it holds (the registry's last one
    when it holds several: DeepSpeed before FSDP, as before), else DDP."""
    world = int(accelerator.num_processes)
    for engine in reversed(ENGINES.values()):
        plugin = getattr(accelerator, engine.argument, None)
        if plugin is not None:
            return engine.plugin_label(plugin, world)
    return plain_label(world)


def report_engine(accelerator: Any) -> None:
    """Main process, inside a launched run: tell the launcher (dashboard, console) which engine runs."""
    from notebook_accel import channel
    from notebook_accel.events import EngineReady

    writer = channel.current()
    if writer is not None and accelerator.is_main_process:
        writer.send(EngineReady(accelerator.process_index, accelerator_engine(accelerator)))
