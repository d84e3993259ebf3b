"""FSDP in the config file: accelerate's fsdp_config loads, is validated like every other field, and travels."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from notebook_accel.config import Config, ConfigError, load_config, save_config
from notebook_accel.environment import FSDP, EngineLaunch, LaunchEnvironment, launch_choices
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.plugins import ConfigurationError

ISSUE_YAML = """\
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch_policy: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_sharding_strategy: 1            # FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
"""

EVERY_FIELD = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_processes: 2
use_cpu: true
mixed_precision: 'no'
fsdp_config:
  fsdp_version: 2
  fsdp_activation_checkpointing: true
  fsdp_auto_wrap_policy: SIZE_BASED_WRAP
  fsdp_min_num_params: 1000
  fsdp_offload_params: true
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_cpu_ram_efficient_loading: false
  fsdp_use_orig_params: true
  fsdp_sync_module_states: true
  fsdp_forward_prefetch: true
  fsdp_backward_prefetch: BACKWARD_POST
"""


def test_the_issue_yaml_loads_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text(ISSUE_YAML)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # fsdp_config is used now, not "kept but ignored"
        config = load_config(path)
    assert config.distributed_type == "FSDP"
    assert config.fsdp_plugin_kwargs == {
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "backward_prefetch": "BACKWARD_PRE",
        "cpu_ram_efficient_loading": True, "sharding_strategy": "FULL_SHARD",
        "state_dict_type": "SHARDED_STATE_DICT", "transformer_cls_names_to_wrap": ["LlamaDecoderLayer"]}
    plugin = FullyShardedDataParallelPlugin.from_config(config)
    assert plugin is not None and plugin.sync_module_states and plugin.reshard_after_forward
    assert plugin == FullyShardedDataParallelPlugin(**config.fsdp_plugin_kwargs)
    assert FullyShardedDataParallelPlugin.from_config(Config(num_processes=2, use_cpu=True)) is None


def test_every_field_loads_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "every.yaml"
    path.write_text(EVERY_FIELD)
    config = load_config(path)
    plugin = FullyShardedDataParallelPlugin(**(config.fsdp_plugin_kwargs or {}))
    assert (plugin.fsdp_version, plugin.sharding_strategy, plugin.auto_wrap_policy, plugin.size_threshold) == (
        2, "HYBRID_SHARD", "SIZE_BASED_WRAP", 1000)
    assert plugin.cpu_offload and plugin.activation_checkpointing and plugin.forward_prefetch
    assert (plugin.state_dict_type, plugin.backward_prefetch) == ("FULL_STATE_DICT", "BACKWARD_POST")
    save_config(config, tmp_path / "again.yaml")
    again = load_config(tmp_path / "again.yaml")
    assert again == config and again.fsdp_plugin_kwargs == config.fsdp_plugin_kwargs


@pytest.mark.parametrize(("value", "name"), [(1, "FULL_SHARD"), (2, "SHARD_GRAD_OP"), (3, "NO_SHARD"),
                                             (4, "HYBRID_SHARD"), ("shard_grad_op", "SHARD_GRAD_OP"), ("3", "NO_SHARD")])
def test_sharding_strategy_numbers_and_names(value: object, name: str) -> None:
    config = Config(distributed_type="FSDP", extra={"fsdp_config": {"fsdp_sharding_strategy": value}})
    assert config.fsdp_plugin_kwargs == {"sharding_strategy": name}


def test_fsdp2_reshard_after_forward_key() -> None:
    config = Config(distributed_type="FSDP", extra={"fsdp_config": {"fsdp_version": 2,
                                                                      "fsdp_reshard_after_forward": False}})
    plugin = FullyShardedDataParallelPlugin(**(config.fsdp_plugin_kwargs or {}))
    assert (plugin.reshard_after_forward, plugin.sharding_strategy) == (False, "SHARD_GRAD_OP")


def test_every_problem_at_once_with_allowed_values_and_did_you_mean() -> None:
    section = {"fsdp_sharding_strategy": 9, "fsdp_ofload_params": True, "fsdp_auto_wrap_policy": "TRANSFORMER_WRAP",
               "fsdp_version": 3, "fsdp_min_num_params": -1, "fsdp_state_dict_type": "LOCAL_STATE_DICT",
               "fsdp_forward_prefetch": "maybe", "fsdp_transformer_layer_cls_to_wrap": "not a class"}
    with pytest.raises(ConfigError) as info:
        Config(distributed_type="FSDP", num_processes=0, extra={"fsdp_config": section})
    problems = info.value.problems
    assert len(problems) == 9, problems  # 8 in fsdp_config + num_processes
    text = "\n".join(problems)
    assert "fsdp_config.fsdp_ofload_params: unknown FSDP setting; did you mean 'fsdp_offload_params'?" in text
    assert "fsdp_config.fsdp_sharding_strategy: got 9 (int)" in text and "numbers 1-4" in text
    assert "did you mean 'TRANSFORMER_BASED_WRAP'?" in text and "'SIZE_BASED_WRAP', 'NO_WRAP'" in text
    assert "fsdp_config.fsdp_version: got 3" in text and "allowed: 1 or 2" in text
    assert "fsdp_config.fsdp_min_num_params: got -1" in text
    assert "'FULL_STATE_DICT', 'SHARDED_STATE_DICT'" in text
    assert "fsdp_config.fsdp_forward_prefetch: got 'maybe' (str); allowed: true or false" in text
    assert "fsdp_config.fsdp_transformer_layer_cls_to_wrap: got 'not a class'" in text


def test_fsdp_config_is_ignored_with_a_warning_for_other_types(tmp_path: Path) -> None:
    path = tmp_path / "ddp.yaml"
    path.write_text("num_processes: 2\nuse_cpu: true\nfsdp_config:\n  fsdp_sharding_strategy: 99\n")
    with pytest.warns(UserWarning, match="fsdp_config"):
        config = load_config(path)
    assert config.distributed_type == "MULTI_CPU" and config.fsdp_plugin_kwargs is None


def test_deepspeed_config_is_used_with_distributed_type_deepspeed(tmp_path: Path) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n")
    config = load_config(path)
    assert config.deepspeed_plugin_kwargs == {"zero_stage": 3} and config.fsdp_plugin_kwargs is None


def test_override_keeps_fsdp_when_the_topology_changes() -> None:
    config = Config(distributed_type="FSDP", num_processes=2, use_cpu=True)
    assert config.override(num_processes=4).distributed_type == "FSDP"
    assert Config(num_processes=2, use_cpu=True).override(num_processes=1).distributed_type == "NO"


def test_the_plugin_travels_through_the_environment() -> None:
    plugin = FullyShardedDataParallelPlugin(sharding_strategy=2, transformer_cls_names_to_wrap="Block,Head",
                                            cpu_offload=True)
    launch = EngineLaunch("FSDP", plugin.to_json())
    variables = LaunchEnvironment(engine=launch).to_environ()
    assert variables[FSDP] == plugin.to_json() == launch_choices(engine=launch)[FSDP]
    back = LaunchEnvironment.from_environ(variables)
    assert back.engine == launch and FullyShardedDataParallelPlugin.from_json(back.engine.options) == plugin
    assert LaunchEnvironment.from_environ({}).engine is None
    target = {FSDP: "stale"}
    LaunchEnvironment().apply(target)
    assert FSDP not in target


def test_plugin_reports_every_bad_field() -> None:
    with pytest.raises(ConfigurationError) as info:
        FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHRAD", cpu_offload="yes",  # type: ignore[arg-type]
                                       mixed_precision_policy={"param_dtype": "int8"})
    text = str(info.value)
    assert "sharding_strategy: got 'FULL_SHRAD' (str) (did you mean 'FULL_SHARD'?)" in text
    assert "cpu_offload: got 'yes' (str); allowed: true or false" in text
    assert "mixed_precision_policy: got {'param_dtype': 'int8'}" in text and "reduce_dtype" in text


@pytest.mark.parametrize("text", ["not json", '{"sharding": 1}', "[1]"])
def test_bad_launcher_json_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match="FSDP settings from the launcher"):
        FullyShardedDataParallelPlugin.from_json(text)


def test_from_accelerate_config_reports_problems() -> None:
    assert FullyShardedDataParallelPlugin.from_accelerate_config({"fsdp_sharding_strategy": 4}).sharding_strategy == \
        "HYBRID_SHARD"
    with pytest.raises(ConfigurationError, match="fsdp_config.fsdp_sharding_strategy: got 5"):
        FullyShardedDataParallelPlugin.from_accelerate_config({"fsdp_sharding_strategy": 5})
    with pytest.raises(ConfigurationError, match="allowed: a mapping"):
        FullyShardedDataParallelPlugin.from_accelerate_config(["x"])


def test_torchs_state_dict_configs_are_accepted_kept_and_checked() -> None:
    # accelerate's fsdp_with_peak_mem_tracking example passes state_dict_config=FullStateDictConfig(...)
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, ShardedStateDictConfig

    config = FullStateDictConfig(offload_to_cpu=False, rank0_only=False)
    plugin = FullyShardedDataParallelPlugin(state_dict_type="FULL_STATE_DICT", state_dict_config=config,
                                            optim_state_dict_config=FullOptimStateDictConfig())
    assert plugin.state_dict_config is config and plugin.state_dict_type == "FULL_STATE_DICT"
    again = FullyShardedDataParallelPlugin.from_json(plugin.to_json())  # the workers get the JSON fields only
    assert again == plugin and again.state_dict_config is None
    with pytest.raises(ConfigurationError, match=r"state_dict_config=\.\.\.\): expected None or an instance of "
                                                 r"torch.distributed.fsdp.FullStateDictConfig / Sharded.*got dict"):
        FullyShardedDataParallelPlugin(state_dict_config={"offload_to_cpu": True})
    with pytest.raises(ConfigurationError, match="optim_state_dict_config=.*got ShardedStateDictConfig"):
        FullyShardedDataParallelPlugin(optim_state_dict_config=ShardedStateDictConfig())
