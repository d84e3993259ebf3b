"""The name of the engine a run trains with, as the dashboard header and the console show it.

``"DDP"``, ``"FSDP FULL_SHARD"``, ``"FSDP SHARD_GRAD_OP (offload: parameters)"``, ``"DeepSpeed ZeRO-3 (offload:
optimizer, parameters)"``, or ``"single process"``. Two places name it: the launcher, from the launch config,
before any worker runs (:func:`config_engine`, carried in :class:`~notebook_accel.events.RunInfo`), and the main
process's Accelerator once it has decided (:func:`report_engine`, an :class:`~notebook_accel.events.EngineReady`
event), which also knows an engine chosen in code (``Accelerator(fsdp_plugin=...)``) and wins over the first.

Options are read by the plugin field names of the settings tables (:mod:`notebook_accel.config.fsdp`,
:mod:`notebook_accel.config.deepspeed`), from a config's plugin kwargs or from a plugin's attributes alike.
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PLAIN_ENGINES", "engine_label", "config_engine", "accelerator_engine", "report_engine"]

#: the labels of runs that name no engine: every process holds the whole model.
PLAIN_ENGINES: tuple[str, ...] = ("DDP", "single process")

_FSDP_FIELDS = ("sharding_strategy", "cpu_offload")
_DS_FIELDS = ("zero_stage", "offload_optimizer_device", "offload_param_device", "hf_ds_config")


def _offload(parts: list[str]) -> str:
    return f" (offload: {', '.join(parts)})" if parts else ""


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
    options = options or {}
    if distributed_type == "FSDP":
        label = f"FSDP {options.get('sharding_strategy') or 'FULL_SHARD'}"
        label += _offload(["parameters"] if options.get("cpu_offload") else [])
    elif distributed_type == "DEEPSPEED":
        stage = options.get("zero_stage")
        label = "DeepSpeed " + ("(its JSON config)" if stage is None and options.get("hf_ds_config")
                                else f"ZeRO-{2 if stage is None else stage}")
        label += _offload([name for name, key in (("optimizer", "offload_optimizer_device"),
                                                  ("parameters", "offload_param_device"))
                           if options.get(key) not in (None, "none")])
    elif num_processes > 1:
        return "DDP"
    else:
        return "single process"
    return label if num_processes > 1 else f"{label}, one process: nothing sharded"


def config_engine(config: Any, num_processes: int) -> str:
    """The engine a launch config asks for (``distributed_type`` and its section); ``""`` without a config."""
    if config is None:
        return ""
    kind = getattr(config, "distributed_type", None)
    options = {"FSDP": getattr(config, "fsdp_plugin_kwargs", None),
               "DEEPSPEED": getattr(config, "deepspeed_plugin_kwargs", None)}.get(str(kind))
    return engine_label(kind, options, num_processes)


def _fields(plugin: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(plugin, name, None) for name in names}


def accelerator_engine(accelerator: Any) -> str:
    """The engine an Accelerator trains with: its DeepSpeed plugin, else its FSDP plugin, else DDP."""
    world = int(accelerator.num_processes)
    deepspeed = getattr(accelerator, "deepspeed_plugin", None)
    if deepspeed is not None:
        return engine_label("DEEPSPEED", _fields(deepspeed, _DS_FIELDS), world)
    fsdp = getattr(accelerator, "fsdp_plugin", None)
    if fsdp is not None:
        return engine_label("FSDP", _fields(fsdp, _FSDP_FIELDS), world)
    return engine_label(None, None, world)


def report_engine(accelerator: Any) -> None:
    """Main process, inside a launched run: tell the launcher (dashboard, console) which engine runs."""
    from notebook_accel import channel
    from notebook_accel.events import EngineReady

    writer = channel.current()
    if writer is not None and accelerator.is_main_process:
        writer.send(EngineReady(accelerator.process_index, accelerator_engine(accelerator)))
