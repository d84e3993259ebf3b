"""The engines by name: one torch-free spec each, the only place that lists them.

A spec says what the rest of the package needs to know about an engine without importing it: its
``distributed_type`` value, the Accelerator argument that carries its plugin, the plugin class (imported on first
use), the name people see (:meth:`EngineSpec.label`), what a launcher sends its workers for a config
(:meth:`EngineSpec.launch_value`), and the function that builds the engine (imported only when an Accelerator
trains with it). The plain engine (one process, or DDP) is what runs when no spec is asked for.

Importing this module imports neither torch nor deepspeed: the launcher, the CLI and the console ask it before
any worker runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from notebook_accel.environment import EngineLaunch

if TYPE_CHECKING:
    from notebook_accel.config import Config

__all__ = ["EngineSpec", "ENGINES", "PLAIN_ENGINES", "DEEPSPEED", "FSDP", "launch_value", "plain_label", "spec"]

#: the labels of runs that name no engine: every process holds the whole model.
PLAIN_ENGINES: tuple[str, ...] = ("DDP", "single process")


def _load(path: str) -> Any:
    """The object at ``"package.module:name"``, imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _offload(parts: list[str]) -> str:
    """`` (offload: optimizer, parameters)``, or nothing when nothing is offloaded."""
    return f" (offload: {', '.join(parts)})" if parts else ""


def _fsdp_label(options: Mapping[str, Any]) -> str:
    """``FSDP SHARD_GRAD_OP (offload: parameters)``."""
    label = f"FSDP {options.get('sharding_strategy') or 'FULL_SHARD'}"
    return label + _offload(["parameters"] if options.get("cpu_offload") else [])


def _deepspeed_label(options: Mapping[str, Any]) -> str:
    """``DeepSpeed ZeRO-3 (offload: optimizer)``, or ``DeepSpeed (its JSON config)`` when the JSON names no stage."""
    stage = options.get("zero_stage")
    label = "DeepSpeed " + ("(its JSON config)" if stage is None and options.get("hf_ds_config")
                            else f"ZeRO-{2 if stage is None else stage}")
    return label + _offload([name for name, key in (("optimizer", "offload_optimizer_device"),
                                                    ("parameters", "offload_param_device"))
                             if options.get(key) not in (None, "none")])


def _fsdp_options(config: Config) -> dict[str, Any] | None:
    return config.fsdp_plugin_kwargs


def _deepspeed_options(config: Config) -> dict[str, Any] | None:
    return config.deepspeed_plugin_kwargs


@dataclass(frozen=True)
class EngineSpec:
    """One sharded engine, described without importing it.

    Attributes:
        name: its ``distributed_type`` value (``"FSDP"``), also ``Engine.name`` and the launch field's name.
        title: how messages name it (``"DeepSpeed"``).
        argument: the Accelerator argument and attribute that carry its plugin (``"fsdp_plugin"``).
        plugin_path: ``"module:Class"`` of its plugin (options object; torch-free).
        build_path: ``"module:function"`` of its builder, ``build(plugin, options_json, parts) -> (engine,
            plugin)`` (see :func:`notebook_accel.engines.select.select_engine`); imports torch and the engine.
        fields: the plugin fields its label reads.
        describe: its label from those fields (missing ones take the plugin defaults).
        config_options: the plugin arguments a run config asks for, ``None`` when the config names another engine.
    """

    name: str
    title: str
    argument: str
    plugin_path: str
    build_path: str
    fields: tuple[str, ...]
    describe: Callable[[Mapping[str, Any]], str]
    config_options: Callable[[Config], dict[str, Any] | None]

    def plugin_class(self) -> Any:
        """The plugin class (imports its module: no torch)."""
        return _load(self.plugin_path)

    def builder(self) -> Callable[..., tuple[Any, Any]]:
        """The function that builds the engine (imports torch and the engine's modules)."""
        builder: Callable[..., tuple[Any, Any]] = _load(self.build_path)
        return builder

    def label(self, options: Mapping[str, Any] | None, num_processes: int) -> str:
        """The engine's name for people, from its plugin fields; one process shards nothing and says so.

        Example:
            >>> FSDP.label({"sharding_strategy": "SHARD_GRAD_OP", "cpu_offload": True}, 2)
            'FSDP SHARD_GRAD_OP (offload: parameters)'
        """
        label = self.describe(options or {})
        return label if num_processes > 1 else f"{label}, one process: nothing sharded"

    def plugin_label(self, plugin: Any, num_processes: int) -> str:
        """:meth:`label` read from a plugin's attributes."""
        return self.label({name: getattr(plugin, name, None) for name in self.fields}, num_processes)

    def launch_value(self, config: Config) -> EngineLaunch | None:
        """What a launcher sends its workers for ``config``: this engine with its plugin as JSON when the config
        names it (``distributed_type``), else ``None``.

        Raises:
            ConfigurationError: the config's section has a value the plugin refuses.
        """
        if self.config_options(config) is None:
            return None
        plugin = self.plugin_class().from_config(config)
        return None if plugin is None else EngineLaunch(self.name, plugin.to_json())


FSDP = EngineSpec(
    name="FSDP", title="FSDP", argument="fsdp_plugin",
    plugin_path="notebook_accel.engines.fsdp.plugin:FullyShardedDataParallelPlugin",
    build_path="notebook_accel.engines.fsdp.engine:build",
    fields=("sharding_strategy", "cpu_offload"), describe=_fsdp_label, config_options=_fsdp_options,
)
DEEPSPEED = EngineSpec(
    name="DEEPSPEED", title="DeepSpeed", argument="deepspeed_plugin",
    plugin_path="notebook_accel.engines.deepspeed.plugin:DeepSpeedPlugin",
    build_path="notebook_accel.engines.deepspeed.engine:build",
    fields=("zero_stage", "offload_optimizer_device", "offload_param_device", "hf_ds_config"),
    describe=_deepspeed_label, config_options=_deepspeed_options,
)

#: every sharded engine, by name.
ENGINES: dict[str, EngineSpec] = {engine.name: engine for engine in (FSDP, DEEPSPEED)}


def spec(name: str | None) -> EngineSpec | None:
    """The spec named ``name`` (a ``distributed_type`` value), or ``None`` for the plain engine's types."""
    return ENGINES.get(str(name)) if name is not None else None


def plain_label(num_processes: int) -> str:
    """The plain engine's name: ``"DDP"``, or ``"single process"``."""
    return PLAIN_ENGINES[0] if num_processes > 1 else PLAIN_ENGINES[1]


def launch_value(config: Config | None) -> EngineLaunch | None:
    """What a launcher sends its workers for ``config`` (:meth:`EngineSpec.launch_value` of the engine it names),
    ``None`` for a plain run or no config.

    Example:
        >>> from notebook_accel.config import Config
        >>> launch_value(Config(num_processes=2, use_cpu=True)) is None
        True
    """
    if config is None:
        return None
    engine = spec(config.distributed_type)
    return None if engine is None else engine.launch_value(config)
