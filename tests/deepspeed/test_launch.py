"""accelerate-written DeepSpeed config files run through notebook_launcher(config=...) on 2 CPU processes."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from notebook_accel import notebook_launcher
from tests.deepspeed import workers

pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install notebook-accel[deepspeed])")

HEADER = """compute_environment: LOCAL_MACHINE
debug: false
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""

ZERO2 = HEADER + """deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 0.5
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
"""

ZERO3_OFFLOAD = HEADER + """deepspeed_config:
  deepspeed_multinode_launcher: standard
  gradient_accumulation_steps: 1
  gradient_clipping: 0.5
  offload_optimizer_device: cpu
  offload_param_device: cpu
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
"""

AUTO_JSON = {
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
}


def run(config: Path) -> dict[str, Any]:
    return notebook_launcher(functools.partial(workers.train, None), (), config=str(config), dashboard=False)


@pytest.fixture(scope="module")
def ddp() -> dict[str, Any]:
    return notebook_launcher(functools.partial(workers.train, None), (), num_processes=2, use_cpu=True,
                             dashboard=False)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("text, stage", [(ZERO2, 2), (ZERO3_OFFLOAD, 3)])
def test_accelerate_yaml_files_run(text: str, stage: int, tmp_path: Path, ddp: dict[str, Any]) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(text)
    result = run(path)
    assert (result["engine"], result["stage"], result["config"]["gradient_clipping"]) == ("DEEPSPEED", stage, 0.5)
    assert result["losses"] == pytest.approx(ddp["losses"], abs=1e-5)


@pytest.mark.timeout(180)
def test_a_deepspeed_json_with_auto_values_runs(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(json.dumps(AUTO_JSON))
    path = tmp_path / "ds.yaml"
    path.write_text(HEADER + f"deepspeed_config:\n  deepspeed_config_file: {tmp_path / 'ds.json'}\n"
                             "  zero3_init_flag: true\n")
    result = run(path)
    config = result["config"]
    assert result["stage"] == 3 and config["train_micro_batch_size_per_gpu"] == 4
    assert config["train_batch_size"] == 8 and config["gradient_accumulation_steps"] == 1
    assert "gradient_clipping" not in config or config["gradient_clipping"] == 0  # 'auto' with no plugin value
    assert config["bf16"]["enabled"] is False and "reduce_bucket_size" not in config["zero_optimization"]
    assert len(result["losses"]) == 10
