"""Shard one model with torch's ``fully_shard`` (FSDP2) as a :class:`FullyShardedDataParallelPlugin` says.

The sharding strategy becomes a device mesh plus ``reshard_after_forward``:

=================  ==============================================  =====================
strategy           mesh                                            reshard_after_forward
=================  ==============================================  =====================
FULL_SHARD         1-D, every process                              True
SHARD_GRAD_OP      1-D, every process                              False
NO_SHARD           2-D (replicate=every process, shard=1)          False
HYBRID_SHARD       2-D (replicate=machines, shard=processes/machine)  as the plugin says
=================  ==============================================  =====================

A 2-D mesh makes ``fully_shard`` shard along its second dimension and all-reduce along its first, so NO_SHARD
(a shard group of one) trains exactly like DDP. Wrapped layers are sharded children first, then the root;
activation checkpointing (torch's composable ``checkpoint``, which keeps parameter names) is put on each
wrapped layer before it is sharded.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch.distributed._composable import checkpoint
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from notebook_accel.engines.fsdp.collectives import time_fsdp_collectives
from notebook_accel.engines.fsdp.layers import layers_to_wrap
from notebook_accel.engines.fsdp.plugin import FullyShardedDataParallelPlugin
from notebook_accel.monitor import steps
from notebook_accel.plugins import ConfigurationError
from notebook_accel.state import ProcessState

__all__ = ["shard_model", "build_mesh", "precision_policy"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build_mesh(strategy: str, state: ProcessState) -> DeviceMesh:
    """The device mesh for ``strategy`` (see the module docstring).

    Raises:
        ConfigurationError: HYBRID_SHARD when the processes do not split evenly over machines.
    """
    world, device_type = state.num_processes, state.device.type
    if strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    if strategy == "NO_SHARD":
        return init_device_mesh(device_type, (world, 1), mesh_dim_names=("replicate", "shard"))
    per_machine = state.local_num_processes
    if per_machine < 1 or world % per_machine:
        raise ConfigurationError(
            f"FSDP sharding_strategy='HYBRID_SHARD' shards within a machine, but {world} processes do not split "
            f"into machines of {per_machine}; launch the same number of processes on every machine")
    return init_device_mesh(device_type, (world // per_machine, per_machine), mesh_dim_names=("replicate", "shard"))


def precision_policy(plugin: FullyShardedDataParallelPlugin, mixed_precision: str) -> MixedPrecisionPolicy:
    """FSDP2's mixed precision: the plugin's policy, else the Accelerator's ``mixed_precision`` for parameters
    and gradient reduction alike (fp32 for ``"no"``)."""
    policy = plugin.mixed_precision_policy if plugin.mixed_precision_policy is not None else mixed_precision
    if isinstance(policy, dict):
        dtypes = {key: _DTYPES[name] for key, name in policy.items()}
        return MixedPrecisionPolicy(param_dtype=dtypes.get("param_dtype"), reduce_dtype=dtypes.get("reduce_dtype"),
                                    output_dtype=dtypes.get("output_dtype"))
    dtype = _DTYPES.get(policy)
    if dtype is None or dtype is torch.float32:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=dtype)


def _offload(plugin: FullyShardedDataParallelPlugin, state: ProcessState) -> OffloadPolicy:
    """CPU offload when asked (pinned memory only where there is a GPU to copy to)."""
    if not plugin.cpu_offload:
        return OffloadPolicy()
    return CPUOffloadPolicy(pin_memory=state.device.type == "cuda")


def _source_weights(model: torch.nn.Module, state: ProcessState) -> dict[str, torch.Tensor]:
    """Rank 0's full weights, to broadcast after sharding (empty on the other ranks)."""
    if state.process_index != 0:
        return {}
    if any(t.is_meta for t in model.state_dict().values()):
        raise ConfigurationError(
            "FSDP sync_module_states / cpu_ram_efficient_loading: rank 0 built the model on the meta device, but "
            "rank 0's weights are the ones sent to every rank; build it with real weights on rank 0 (only the "
            "other ranks may use torch.device('meta'))")
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def shard_model(model: torch.nn.Module, plugin: FullyShardedDataParallelPlugin, state: ProcessState,
                mixed_precision: str = "no") -> torch.nn.Module:
    """Apply ``fully_shard`` to the wrapped layers, then to ``model`` itself; returns ``model`` (now sharded).

    Args:
        model: the user's module (on ``state.device``, or on ``meta`` on ranks other than 0 with
            ``sync_module_states``).
        plugin: the FSDP options.
        state: this process's state (device, world size, processes per machine).
        mixed_precision: the Accelerator's precision, used when the plugin names no policy.

    Raises:
        ConfigurationError: a layer class name not in the model, activation checkpointing with no layer to
            checkpoint, a meta model on rank 0 with ``sync_module_states``, or a meta model without it.
    """
    layers = layers_to_wrap(model, plugin)
    if plugin.activation_checkpointing and not layers:
        raise ConfigurationError(
            "FSDP activation_checkpointing needs layers to checkpoint, but the auto-wrap policy selects none; set "
            "transformer_cls_names_to_wrap (or auto_wrap_policy='SIZE_BASED_WRAP' with min_num_params)")
    if not plugin.sync_module_states and any(t.is_meta for t in model.state_dict().values()):
        raise ConfigurationError(
            f"FSDP: rank {state.process_index} built the model on the meta device (no weights), but nothing would "
            "fill it in; set cpu_ram_efficient_loading=True (fsdp_cpu_ram_efficient_loading: true) so rank 0's "
            "weights are broadcast, or build real weights on every rank")
    source = _source_weights(model, state) if plugin.sync_module_states else None
    mesh = build_mesh(plugin.sharding_strategy, state)
    reshard = bool(plugin.reshard_after_forward) and plugin.sharding_strategy != "NO_SHARD"
    mp_policy, offload = precision_policy(plugin, mixed_precision), _offload(plugin, state)
    for module in [*layers, model]:
        if plugin.activation_checkpointing and module is not model:
            checkpoint(module)
        fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp_policy, offload_policy=offload)
    step_clock = steps.clock()
    if step_clock is not None:  # a launched worker: FSDP's collectives are part of the step breakdown
        time_fsdp_collectives([*layers, model], step_clock.comm_timer)
    if plugin.forward_prefetch:
        for current, following in zip(layers, layers[1:]):
            current.set_modules_to_forward_prefetch([following])  # type: ignore[operator]
    if source is not None:
        if any(t.is_meta for t in model.state_dict().values()):
            model.to_empty(device=state.device)
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, cast("dict[str, Any]", source), options=options)
    return model
