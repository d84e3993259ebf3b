"""``FullyShardedDataParallelPlugin``: accelerate's FSDP options object, validated on construction.

Every field has accelerate's name. Both ``fsdp_version`` 1 and 2 run on torch's ``fully_shard`` (FSDP2): the
options below mean the same thing there, and the options FSDP2 does not need (``use_orig_params``: FSDP2 always
trains the original parameters; ``backward_prefetch``: FSDP2 always prefetches the next layer in backward) are
accepted so accelerate's files and code work unchanged.

Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from notebook_accel.config import Config
from notebook_accel.config.fsdp import CHECKS, check_fields, plugin_kwargs_from_file
from notebook_accel.plugins import ConfigurationError, fields_from_json

__all__ = ["FullyShardedDataParallelPlugin"]

_DEFAULT_MIN_PARAMS = 100_000_000
#: The torch.distributed.fsdp classes each config field takes (by name: nothing here imports torch).
_TORCH_CONFIGS: dict[str, tuple[str, ...]] = {
    "state_dict_config": ("FullStateDictConfig", "ShardedStateDictConfig"),
    "optim_state_dict_config": ("FullOptimStateDictConfig", "ShardedOptimStateDictConfig"),
}


def _check_torch_configs(state_dict_config: Any, optim_state_dict_config: Any) -> None:
    """Raise unless each config is ``None`` or an instance of one of torch's classes for it."""
    given = {"state_dict_config": state_dict_config, "optim_state_dict_config": optim_state_dict_config}
    for name, value in given.items():
        allowed = _TORCH_CONFIGS[name]
        if value is not None and not any(c.__name__ in allowed and c.__module__.startswith("torch.distributed.fsdp")
                                         for c in type(value).__mro__):
            raise ConfigurationError(f"FullyShardedDataParallelPlugin({name}=...): expected None or an instance of "
                                     f"torch.distributed.fsdp.{' / '.join(allowed)}, got {type(value).__name__}; "
                                     f"e.g. {name}={allowed[0]}(offload_to_cpu=True, rank0_only=True)")


@dataclass
class FullyShardedDataParallelPlugin:
    """How :meth:`Accelerator.prepare` shards a model with torch's ``fully_shard``.

    Args:
        fsdp_version: 1 or 2 (accelerate's choice of engine); both run on ``fully_shard`` here.
        sharding_strategy: ``"FULL_SHARD"`` (params, grads and optimizer state sharded; params gathered again
            for backward), ``"SHARD_GRAD_OP"`` (params kept gathered between forward and backward),
            ``"NO_SHARD"`` (replicated, like DDP), ``"HYBRID_SHARD"`` (sharded within a machine, replicated across
            machines); or accelerate's numbers 1-4.
        reshard_after_forward: FSDP2's own switch; ``None`` follows ``sharding_strategy``. Giving it picks
            FULL_SHARD (True) or SHARD_GRAD_OP (False) when ``sharding_strategy`` is FULL_SHARD.
        backward_prefetch: accepted for compatibility (FSDP2 prefetches in backward on its own).
        mixed_precision_policy: ``None`` follows the Accelerator's ``mixed_precision``; else ``"bf16"``,
            ``"fp16"``, ``"fp32"``/``"no"``, or a dict of ``param_dtype``/``reduce_dtype``/``output_dtype`` names.
        auto_wrap_policy: which submodules get their own ``fully_shard`` before the root:
            ``"TRANSFORMER_BASED_WRAP"`` (any case; classes named in ``transformer_cls_names_to_wrap``, else the model's
            ``_no_split_modules``), ``"SIZE_BASED_WRAP"`` (every submodule with at least ``min_num_params``
            parameters of its own subtree), ``"NO_WRAP"`` (the root only). ``None``: transformer-based when class
            names are given or the model declares ``_no_split_modules``, else no wrap.
        cpu_offload: keep sharded parameters, gradients and optimizer state in CPU memory (``CPUOffloadPolicy``).
        state_dict_type: how ``save_state`` writes the model: ``"SHARDED_STATE_DICT"`` (each rank its shard,
            with ``torch.distributed.checkpoint``) or ``"FULL_STATE_DICT"`` (gathered, written by rank 0).
        use_orig_params: accepted for compatibility (always true under FSDP2).
        sync_module_states: broadcast rank 0's weights to every rank after sharding.
        forward_prefetch: gather the next wrapped layer's parameters while the current one runs forward.
        activation_checkpointing: recompute each wrapped layer's activations in backward instead of storing them.
        cpu_ram_efficient_loading: only rank 0 needs real weights; the others may build the model on the
            ``meta`` device, and rank 0's weights are broadcast into the shards (implies ``sync_module_states``).
        transformer_cls_names_to_wrap: class names of the layers to wrap (a list, or ``"A,B"``).
        min_num_params: size threshold for ``"SIZE_BASED_WRAP"``; ``None`` means 100,000,000 there.
        state_dict_config, optim_state_dict_config: torch's ``FullStateDictConfig``/``ShardedStateDictConfig``
            (and ``FullOptimStateDictConfig``/``ShardedOptimStateDictConfig``), as accelerate takes them; kept on
            the plugin for code that reads them back. The layout a save writes is ``state_dict_type``; a full
            state dict is gathered to CPU memory and written by rank 0 whatever their ``offload_to_cpu`` and
            ``rank0_only`` say (accelerate, too, sets both for a multi-process save). They stay in this
            process: a launch config cannot carry them to the workers (:meth:`to_json` leaves them out).

    Raises:
        ConfigurationError: every bad field at once, each with the allowed values.

    Example:
        >>> plugin = FullyShardedDataParallelPlugin(sharding_strategy=2, transformer_cls_names_to_wrap="Block")
        >>> (plugin.sharding_strategy, plugin.transformer_cls_names_to_wrap, plugin.reshard_after_forward)
        ('SHARD_GRAD_OP', ['Block'], False)
    """

    fsdp_version: int = 2
    sharding_strategy: Any = "FULL_SHARD"
    reshard_after_forward: bool | None = None
    backward_prefetch: str | None = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: str | None = None
    cpu_offload: bool = False
    state_dict_type: str = "SHARDED_STATE_DICT"
    use_orig_params: bool = True
    sync_module_states: bool = False
    forward_prefetch: bool = False
    activation_checkpointing: bool = False
    cpu_ram_efficient_loading: bool = False
    transformer_cls_names_to_wrap: Any = None
    min_num_params: int | None = None
    state_dict_config: Any = field(default=None, compare=False)
    optim_state_dict_config: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        _check_torch_configs(self.state_dict_config, self.optim_state_dict_config)
        values = {name: getattr(self, name) for name in CHECKS}
        if values["min_num_params"] is None:
            values.pop("min_num_params")
        canonical, problems = check_fields(values)
        if problems:
            lines = [f"  - {name}: {problem}" for name, problem in problems.items()]
            raise ConfigurationError("FullyShardedDataParallelPlugin: invalid options\n" + "\n".join(lines))
        for name, value in canonical.items():
            setattr(self, name, value)
        if self.reshard_after_forward is None:
            self.reshard_after_forward = self.sharding_strategy != "SHARD_GRAD_OP"
        elif self.sharding_strategy == "FULL_SHARD" and not self.reshard_after_forward:
            self.sharding_strategy = "SHARD_GRAD_OP"
        if self.cpu_ram_efficient_loading:
            self.sync_module_states = True

    @property
    def size_threshold(self) -> int:
        """``min_num_params``, or its default of 100,000,000 parameters."""
        return self.min_num_params if self.min_num_params is not None else _DEFAULT_MIN_PARAMS

    @classmethod
    def from_accelerate_config(cls, section: Any) -> FullyShardedDataParallelPlugin:
        """The plugin for accelerate's ``fsdp_config`` mapping (the file's keys: ``fsdp_sharding_strategy``, ...).

        Raises:
            ConfigurationError: every bad key or value at once.

        Example:
            >>> FullyShardedDataParallelPlugin.from_accelerate_config({"fsdp_sharding_strategy": 1}).sharding_strategy
            'FULL_SHARD'
        """
        kwargs, problems = plugin_kwargs_from_file(section)
        if problems:
            raise ConfigurationError("fsdp_config: invalid settings\n" + "\n".join(f"  - {p}" for p in problems))
        return cls(**kwargs)

    @classmethod
    def from_config(cls, config: Config) -> FullyShardedDataParallelPlugin | None:
        """The plugin a run :class:`~notebook_accel.config.Config` asks for: ``None`` unless its
        ``distributed_type`` is ``"FSDP"``. The launcher sends ``plugin.to_json()`` to its workers
        (``LaunchEnvironment.engine``), and each worker's Accelerator builds the plugin back from it.

        Example:
            >>> config = Config(distributed_type="FSDP", extra={"fsdp_config": {"fsdp_sharding_strategy": 2}})
            >>> FullyShardedDataParallelPlugin.from_config(config).sharding_strategy
            'SHARD_GRAD_OP'
        """
        kwargs = config.fsdp_plugin_kwargs
        return None if kwargs is None else cls(**kwargs)

    def to_json(self) -> str:
        """The fields as JSON (how the launcher carries the plugin to its workers)."""
        return json.dumps({name: getattr(self, name) for name in CHECKS}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FullyShardedDataParallelPlugin:
        """The plugin back from :meth:`to_json` (the worker side).

        Raises:
            ConfigurationError: the text is not a JSON object of plugin fields.
        """
        return cls(**fields_from_json(text, tuple(CHECKS), "FSDP", "fsdp_plugin"))
