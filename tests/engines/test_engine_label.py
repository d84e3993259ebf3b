"""Engine names for the dashboard header and the console, from a config or from an Accelerator's plugins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from notebook_accel.config import Config
from notebook_accel.engines.label import accelerator_engine, config_engine, engine_label


@pytest.mark.parametrize(("kind", "options", "world", "label"), [
    (None, None, 2, "DDP"),
    ("MULTI_GPU", None, 1, "single process"),
    ("FSDP", {}, 2, "FSDP FULL_SHARD"),
    ("FSDP", {"sharding_strategy": "HYBRID_SHARD", "cpu_offload": True}, 4, "FSDP HYBRID_SHARD (offload: parameters)"),
    ("FSDP", {"sharding_strategy": "FULL_SHARD"}, 1, "FSDP FULL_SHARD, one process: nothing sharded"),
    ("DEEPSPEED", {"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "none"}, 2,
     "DeepSpeed ZeRO-3 (offload: optimizer)"),
    ("DEEPSPEED", {"zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu"}, 2,
     "DeepSpeed ZeRO-3 (offload: optimizer, parameters)"),
    ("DEEPSPEED", {"hf_ds_config": "ds.json"}, 2, "DeepSpeed (its JSON config)"),
])
def test_engine_label(kind: str | None, options: dict[str, object] | None, world: int, label: str) -> None:
    assert engine_label(kind, options, world) == label


def test_config_engine_reads_the_section() -> None:
    fsdp = Config(num_processes=2, use_cpu=True, distributed_type="FSDP",
                  extra={"fsdp_config": {"fsdp_sharding_strategy": 2, "fsdp_offload_params": True}})
    assert config_engine(fsdp, 2) == "FSDP SHARD_GRAD_OP (offload: parameters)"
    ds = Config(num_processes=2, use_cpu=True, distributed_type="DEEPSPEED",
                extra={"deepspeed_config": {"zero_stage": 1, "offload_optimizer_device": "cpu"}})
    assert config_engine(ds, 2) == "DeepSpeed ZeRO-1 (offload: optimizer)"
    assert config_engine(Config(num_processes=2, use_cpu=True), 2) == "DDP"
    assert config_engine(None, 2) == ""


def test_accelerator_engine_prefers_deepspeed_then_fsdp() -> None:
    fsdp = SimpleNamespace(sharding_strategy="NO_SHARD", cpu_offload=False)
    ds = SimpleNamespace(zero_stage=2, offload_optimizer_device="cpu", offload_param_device="none")
    assert accelerator_engine(SimpleNamespace(num_processes=2, fsdp_plugin=fsdp)) == "FSDP NO_SHARD"
    assert accelerator_engine(SimpleNamespace(num_processes=2, fsdp_plugin=fsdp, deepspeed_plugin=ds)) == \
        "DeepSpeed ZeRO-2 (offload: optimizer)"
    assert accelerator_engine(SimpleNamespace(num_processes=1, fsdp_plugin=None)) == "single process"
