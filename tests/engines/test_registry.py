"""The engine registry: each spec's label and launch value, the one engine field, and a torch-free import."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from notebook_accel.config import Config
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.engines.registry import DEEPSPEED, ENGINES, FSDP, launch_value, plain_label, spec
from notebook_accel.environment import DEEPSPEED as DEEPSPEED_VAR
from notebook_accel.environment import FSDP as FSDP_VAR
from notebook_accel.environment import EngineLaunch, LaunchEnvironment


def test_every_spec_is_registered_under_its_distributed_type() -> None:
    assert ENGINES == {"FSDP": FSDP, "DEEPSPEED": DEEPSPEED}
    assert spec("FSDP") is FSDP and spec("DEEPSPEED") is DEEPSPEED
    assert spec("MULTI_GPU") is None and spec(None) is None
    assert FSDP.plugin_class() is FullyShardedDataParallelPlugin and DEEPSPEED.plugin_class() is DeepSpeedPlugin
    assert (FSDP.argument, DEEPSPEED.argument) == ("fsdp_plugin", "deepspeed_plugin")


@pytest.mark.parametrize(("engine", "options", "world", "label"), [
    (FSDP, None, 2, "FSDP FULL_SHARD"),
    (FSDP, {"sharding_strategy": "SHARD_GRAD_OP", "cpu_offload": True}, 2, "FSDP SHARD_GRAD_OP (offload: parameters)"),
    (FSDP, {}, 1, "FSDP FULL_SHARD, one process: nothing sharded"),
    (DEEPSPEED, {}, 2, "DeepSpeed ZeRO-2"),
    (DEEPSPEED, {"zero_stage": 3, "offload_param_device": "cpu"}, 4, "DeepSpeed ZeRO-3 (offload: parameters)"),
    (DEEPSPEED, {"hf_ds_config": {"zero_optimization": {}}}, 2, "DeepSpeed (its JSON config)"),
])
def test_each_spec_labels_itself(engine: object, options: dict[str, object] | None, world: int, label: str) -> None:
    assert isinstance(engine, type(FSDP))
    assert engine.label(options, world) == label


def test_a_plugin_labels_by_its_fields() -> None:
    plugin = SimpleNamespace(zero_stage=1, offload_optimizer_device="cpu", offload_param_device="none",
                             hf_ds_config=None)
    assert DEEPSPEED.plugin_label(plugin, 2) == "DeepSpeed ZeRO-1 (offload: optimizer)"
    assert (plain_label(2), plain_label(1)) == ("DDP", "single process")


def test_launch_values_carry_the_plugin_as_json() -> None:
    fsdp = Config(num_processes=2, use_cpu=True, distributed_type="FSDP",
                  extra={"fsdp_config": {"fsdp_sharding_strategy": 2}})
    value = launch_value(fsdp)
    assert value is not None and value == FSDP.launch_value(fsdp) and value.name == "FSDP"
    assert FullyShardedDataParallelPlugin.from_json(value.options).sharding_strategy == "SHARD_GRAD_OP"
    ds = Config(num_processes=2, use_cpu=True, distributed_type="DEEPSPEED",
                extra={"deepspeed_config": {"zero_stage": 3}})
    value = launch_value(ds)
    assert value is not None and value.name == "DEEPSPEED"
    assert DeepSpeedPlugin.from_json(value.options).zero_stage == 3
    assert FSDP.launch_value(ds) is None and DEEPSPEED.launch_value(fsdp) is None
    assert launch_value(Config(num_processes=2, use_cpu=True)) is None and launch_value(None) is None


def test_one_engine_field_keeps_the_variables() -> None:
    for name, variable in (("FSDP", FSDP_VAR), ("DEEPSPEED", DEEPSPEED_VAR)):
        launch = EngineLaunch(name, '{"a": 1}')
        variables = LaunchEnvironment(engine=launch).to_environ()
        assert variables[variable] == '{"a": 1}'
        back = LaunchEnvironment.from_environ(variables)
        assert back.engine == launch and back.engine_options(name) == '{"a": 1}'
        assert back.engine_options("OTHER") is None
    with pytest.raises(ValueError, match="one engine"):
        LaunchEnvironment.from_environ({FSDP_VAR: "{}", DEEPSPEED_VAR: "{}"})
    stale = {FSDP_VAR: "x", DEEPSPEED_VAR: "y"}
    LaunchEnvironment().apply(stale)
    assert FSDP_VAR not in stale and DEEPSPEED_VAR not in stale


def test_importing_the_registry_loads_no_torch() -> None:
    code = ("import sys\nfrom notebook_accel.engines import registry, label\n"
            "from notebook_accel.config import Config\n"
            "registry.launch_value(Config(distributed_type='FSDP', num_processes=2, use_cpu=True))\n"
            "print([m for m in ('torch', 'deepspeed', 'torch.distributed.fsdp') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
