"""accelerate-written DeepSpeed config files run through notebook_launcher(config=...) on 2 CPU processes."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from notebook_accel import notebook_launcher
from notebook_accel.cli.launch_cmd import child_environment
from notebook_accel.config import Config, load_config
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.environment import DEEPSPEED
from tests.engines.deepspeed import needs_deepspeed, workers
from tests.engines.deepspeed.files import AUTO_JSON, HEADER, ZERO2, ZERO3_OFFLOAD
from tests.engines.fsdp.test_launch import cli_launch

pytestmark = needs_deepspeed

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


def test_the_cli_sends_the_plugin_only_for_deepspeed(tmp_path: Path) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(ZERO3_OFFLOAD)
    variables = child_environment(load_config(path))
    plugin = DeepSpeedPlugin.from_json(variables[DEEPSPEED] or "")
    assert (plugin.zero_stage, plugin.offload_param_device) == (3, "cpu")
    assert DEEPSPEED not in child_environment(Config(num_processes=2, use_cpu=True))


@pytest.mark.timeout(180)
def test_notebook_accel_launch_runs_deepspeed_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(ZERO2 + "main_process_port: 0\n")
    result = cli_launch(path, Path(__file__).with_name("launch_script.py"), tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0: DEEPSPEED DEEPSPEED stage=2", "rank 1: DEEPSPEED DEEPSPEED stage=2"]
