"""``notebook-accel launch`` with accelerate's FSDP file: the workers' plain ``Accelerator()`` shards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from notebook_accel.cli.launch_cmd import child_environment
from notebook_accel.config import Config, load_config
from notebook_accel.environment import FSDP
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from tests.engines.fsdp.test_config import ISSUE_YAML

REPO = str(Path(__file__).resolve().parents[3])


def test_the_cli_sends_the_plugin_only_for_fsdp(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text(ISSUE_YAML.replace("LlamaDecoderLayer", "Block") + "num_processes: 2\nuse_cpu: true\n")
    variables = child_environment(load_config(path))
    plugin = FullyShardedDataParallelPlugin.from_json(variables[FSDP] or "")
    assert plugin.transformer_cls_names_to_wrap == ["Block"] and plugin.cpu_ram_efficient_loading
    assert FSDP not in child_environment(Config(num_processes=2, use_cpu=True))


@pytest.mark.timeout(180)
def test_launch_runs_fsdp_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "fsdp.yaml"
    path.write_text(ISSUE_YAML.replace("LlamaDecoderLayer", "Block").replace("fsdp_sharding_strategy: 1",
                                                                             "fsdp_sharding_strategy: 2")
                    + "num_processes: 2\nuse_cpu: true\nmain_process_port: 0\n")
    result = cli_launch(path, Path(__file__).with_name("launch_script.py"), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0: FSDP SHARD_GRAD_OP held=0.50", "rank 1: FSDP SHARD_GRAD_OP held=0.50"]


def cli_launch(config: Path, script: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``notebook-accel launch --config_file config script`` in a clean environment (no launch variables, a private
    config home); the repository is on the path so the script can import the tests' helpers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOTEBOOK_ACCEL_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), HF_HOME=str(tmp_path / "hf"),
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run([sys.executable, "-m", "notebook_accel.cli", "launch", "--config_file", str(config),
                           str(script)], capture_output=True, text=True, env=env, timeout=170)
