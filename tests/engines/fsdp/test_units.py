"""Single-process checks of the FSDP pieces: layer selection, optimizer re-binding, and their errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from notebook_accel import Accelerator
from notebook_accel.environment import EngineLaunch, LaunchEnvironment
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.engines.fsdp.engine import resolve_fsdp_plugin
from notebook_accel.engines.fsdp.layers import layers_to_wrap
from notebook_accel.parameter_map import ParameterMap
from notebook_accel.engines.fsdp.wrap import precision_policy, shard_model
from notebook_accel.plugins import ConfigurationError
from notebook_accel.state import ProcessState
from tests.engines.fsdp.workers import Block, TinyNet


def test_transformer_wrap_by_class_name_children_first() -> None:
    model = TinyNet(depth=3)
    layers = layers_to_wrap(model, FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap="Block,Linear"))
    assert all(isinstance(m, (Block, torch.nn.Linear)) for m in layers) and len(layers) == 3 + 3 * 2 + 2
    positions = {id(m): i for i, m in enumerate(layers)}
    for block in model.blocks:  # a block's own Linears are sharded before the block itself
        assert positions[id(block.ff[0])] < positions[id(block)] and positions[id(block.ff[2])] < positions[id(block)]


def test_no_split_modules_and_no_wrap_defaults() -> None:
    model = TinyNet()
    assert layers_to_wrap(model, FullyShardedDataParallelPlugin()) == []
    model._no_split_modules = ["Block"]  # type: ignore[assignment]  # what Hugging Face models declare
    assert layers_to_wrap(model, FullyShardedDataParallelPlugin()) == list(model.blocks)
    assert layers_to_wrap(model, FullyShardedDataParallelPlugin(auto_wrap_policy="no_wrap")) == []


def test_size_based_wrap_counts_what_is_not_wrapped_yet() -> None:
    model = TinyNet()  # each block: 2,160 parameters; ff 2,128 (ff.0 1,088, ff.2 1,040)
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=1000)
    assert layers_to_wrap(model, plugin) == [m for b in model.blocks for m in (b.ff[0], b.ff[2])]
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=2150)
    assert layers_to_wrap(model, plugin) == list(model.blocks)
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=2100)
    assert layers_to_wrap(model, plugin) == [b.ff for b in model.blocks]
    assert FullyShardedDataParallelPlugin().size_threshold == 100_000_000


def test_unknown_layer_class_names_the_classes_and_a_guess() -> None:
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Blok"])
    with pytest.raises(ConfigurationError) as info:
        layers_to_wrap(TinyNet(), plugin)
    text = str(info.value)
    assert "'Blok' (did you mean 'Block'?) is not a class in this model" in text and "Block, GELU, LayerNorm" in text
    with pytest.raises(ConfigurationError, match="needs layer class names"):
        layers_to_wrap(TinyNet(), FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP"))


def test_shard_model_refusals_before_anything_is_sharded() -> None:
    state = ProcessState(cpu=True)
    with pytest.raises(ConfigurationError, match="activation_checkpointing needs layers"):
        shard_model(TinyNet(), FullyShardedDataParallelPlugin(activation_checkpointing=True), state)
    with torch.device("meta"):
        meta = TinyNet()
    with pytest.raises(ConfigurationError, match="rank 0 built the model on the meta device"):
        shard_model(meta, FullyShardedDataParallelPlugin(cpu_ram_efficient_loading=True), state)
    with pytest.raises(ConfigurationError, match="set cpu_ram_efficient_loading=True"):
        shard_model(meta, FullyShardedDataParallelPlugin(), state)


def test_precision_policy_follows_the_accelerator_or_the_plugin() -> None:
    assert precision_policy(FullyShardedDataParallelPlugin(), "bf16").param_dtype is torch.bfloat16
    assert precision_policy(FullyShardedDataParallelPlugin(), "bf16").reduce_dtype is torch.bfloat16
    assert precision_policy(FullyShardedDataParallelPlugin(), "no").param_dtype is None
    custom = FullyShardedDataParallelPlugin(mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "fp32"})
    policy = precision_policy(custom, "no")
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert precision_policy(FullyShardedDataParallelPlugin(mixed_precision_policy="fp32"), "bf16").param_dtype is None


def test_parameter_map_rebinds_and_refuses_a_stepped_optimizer() -> None:
    old = torch.nn.Parameter(torch.ones(4))
    keep = torch.nn.Parameter(torch.ones(1))
    new = torch.nn.Parameter(torch.ones(2))
    params = ParameterMap("FSDP")
    params.record({"w": old, "k": keep}, {"w": new, "k": keep})
    fresh = torch.optim.Adam([old, keep])
    params.rebind(fresh)
    assert fresh.param_groups[0]["params"][0] is new and fresh.param_groups[0]["params"][1] is keep
    stepped = torch.optim.Adam([old])
    old.grad = torch.ones(4)
    stepped.step()
    with pytest.raises(ConfigurationError, match="before the first optimizer.step"):
        params.rebind(stepped)


def test_plugin_resolution_and_single_process() -> None:
    with pytest.raises(ConfigurationError, match="expected a FullyShardedDataParallelPlugin, got dict"):
        resolve_fsdp_plugin({"sharding_strategy": 1}, LaunchEnvironment())
    assert resolve_fsdp_plugin(None, LaunchEnvironment()) is None
    env = LaunchEnvironment(engine=EngineLaunch("FSDP", FullyShardedDataParallelPlugin(sharding_strategy=3).to_json()))
    resolved = resolve_fsdp_plugin(None, env)
    assert resolved is not None and resolved.sharding_strategy == "NO_SHARD"
    plugin = FullyShardedDataParallelPlugin()
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)  # one process: nothing to shard, plain training
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    assert accelerator.fsdp_plugin is plugin and accelerator.distributed_type.value == "NO"
    assert isinstance(model.weight, torch.nn.Parameter) and type(model) is torch.nn.Linear


def test_plain_runs_never_import_fsdp() -> None:
    code = ("import sys, torch\nfrom notebook_accel import Accelerator\nimport notebook_accel.checkpointing\n"
            "from notebook_accel.config import Config\n"
            "a = Accelerator(cpu=True)\nm = a.prepare(torch.nn.Linear(2, 1))\nwith a.accumulate(m): pass\n"
            "Config(distributed_type='FSDP')\n"
            "print('torch.distributed.fsdp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"  # torch.distributed.fsdp costs ~0.6 s of every worker's start
