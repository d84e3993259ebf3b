"""accelerate.utils-compatible names: the option classes and the free functions users import from there.

Loaded lazily (PEP 562) so that importing one helper does not import every module, and so that
:mod:`notebook_accel.ops` can use :mod:`notebook_accel.utils.nested` without an import cycle.

Example:
    >>> from notebook_accel.utils import set_seed, DataLoaderConfiguration
"""

from __future__ import annotations

from notebook_accel._lazy import lazy_exports

# accelerate's is_*_available predicates (notebook_accel.utils.availability); listed here so that importing
# notebook_accel.utils does not import that module
_AVAILABILITY = (
    "is_4bit_bnb_available", "is_8bit_bnb_available", "is_aim_available", "is_amdsmi_available",
    "is_bf16_available", "is_bitsandbytes_multi_backend_available", "is_bnb_available", "is_boto3_available",
    "is_clearml_available", "is_comet_ml_available", "is_cuda_available", "is_datasets_available",
    "is_deepspeed_available", "is_dvclive_available", "is_fp16_available", "is_fp8_available", "is_hpu_available",
    "is_import_timer_available", "is_lomo_available", "is_matplotlib_available", "is_megatron_lm_available",
    "is_mlflow_available", "is_mlu_available", "is_mps_available", "is_msamp_available", "is_musa_available",
    "is_neuron_available", "is_npu_available", "is_pandas_available", "is_peft_available", "is_pippy_available",
    "is_pynvml_available", "is_pytest_available", "is_rich_available", "is_rocm_available",
    "is_sagemaker_available", "is_schedulefree_available", "is_sdaa_available", "is_swanlab_available",
    "is_tensorboard_available", "is_timm_available", "is_torch_xla_available", "is_torchao_available",
    "is_torchdata_available", "is_torchdata_stateful_dataloader_available", "is_torchvision_available",
    "is_trackio_available", "is_transformer_engine_available", "is_transformer_engine_mxfp8_available",
    "is_transformers_available", "is_triton_available", "is_wandb_available", "is_weights_only_available",
    "is_xccl_available", "is_xpu_available",
)

_EXPORTS: dict[str, str] = {
    "DataLoaderConfiguration": "notebook_accel.plugins",
    "ProjectConfiguration": "notebook_accel.plugins",
    "GradientAccumulationPlugin": "notebook_accel.plugins",
    "DistributedDataParallelKwargs": "notebook_accel.kwargs_handlers",
    "DDPCommunicationHookType": "notebook_accel.kwargs_handlers",
    "GradScalerKwargs": "notebook_accel.kwargs_handlers",
    "AORecipeKwargs": "notebook_accel.kwargs_handlers",
    "InitProcessGroupKwargs": "notebook_accel.kwargs_handlers",
    "KwargsHandler": "notebook_accel.kwargs_handlers",
    "AutocastKwargs": "notebook_accel.kwargs_handlers",
    "ProfileKwargs": "notebook_accel.kwargs_handlers",
    "DistributedType": "notebook_accel.state",
    "set_seed": "notebook_accel.utils.random",
    "synchronize_rng_states": "notebook_accel.utils.random",
    "send_to_device": "notebook_accel.utils.nested",
    "recursively_apply": "notebook_accel.utils.nested",
    "gather": "notebook_accel.ops",
    "gather_object": "notebook_accel.ops",
    "broadcast": "notebook_accel.ops",
    "broadcast_object_list": "notebook_accel.ops",
    "reduce": "notebook_accel.ops",
    "pad_across_processes": "notebook_accel.ops",
    "skip_first_batches": "notebook_accel.data",
    "copy_tensor_to_devices": "notebook_accel.ops",
    "DistributedOperationException": "notebook_accel.ops",
    "DummyOptim": "notebook_accel.engines.deepspeed.dummy",
    "DummyScheduler": "notebook_accel.engines.deepspeed.dummy",
    "find_executable_batch_size": "notebook_accel.memory",
    "release_memory": "notebook_accel.memory",
    # accelerate.utils has the engines' plugins and the weights loader too (``from accelerate.utils import
    # DeepSpeedPlugin`` is the usual spelling); the same objects as notebook_accel's
    "DeepSpeedPlugin": "notebook_accel.engines.deepspeed.plugin",
    "FullyShardedDataParallelPlugin": "notebook_accel.engines.fsdp.plugin",
    "load_checkpoint_in_model": "notebook_accel.checkpointing.weights",
    # accelerate 1.16's device-neutral helpers
    "get_torch_accelerator_backend": "notebook_accel.utils.devices",
    "get_distributed_backend": "notebook_accel.utils.devices",
    "normalize_device": "notebook_accel.utils.devices",
    "get_accelerator_free_memory": "notebook_accel.utils.devices",
    # accelerate.utils.environment and .versions
    "str_to_bool": "notebook_accel.utils.env_flags",
    "parse_flag_from_env": "notebook_accel.utils.env_flags",
    "parse_choice_from_env": "notebook_accel.utils.env_flags",
    "get_int_from_env": "notebook_accel.utils.env_flags",
    "patch_environment": "notebook_accel.utils.env_flags",
    "clear_environment": "notebook_accel.utils.env_flags",
    "compare_versions": "notebook_accel.utils.versions",
    "is_torch_version": "notebook_accel.utils.versions",
}
_EXPORTS.update(dict.fromkeys(_AVAILABILITY, "notebook_accel.utils.availability"))

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
