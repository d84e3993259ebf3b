"""notebook_launcher(config=...) with accelerate's FSDP YAML: the workers' Accelerator shards the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel import Accelerator
from notebook_accel.launcher import notebook_launcher
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)

YAML = """\
distributed_type: FSDP
num_processes: 2
use_cpu: true
fsdp_config:
  fsdp_auto_wrap_policy: SIZE_BASED_WRAP
  fsdp_min_num_params: 10
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
"""


def sharded() -> dict[str, Any]:
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)))
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    return {"type": accelerator.distributed_type.value, "local": local,
            "total": sum(p.numel() for p in model.parameters())}


def test_the_config_file_makes_the_workers_shard(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.yaml"
    config.write_text(YAML)
    result = notebook_launcher(sharded, config=str(config), dashboard=RecordingSink())
    assert result["type"] == "FSDP"
    assert result["local"] < result["total"]  # rank 0 holds only its shard
