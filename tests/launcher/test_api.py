"""notebook_launcher's argument handling: precedence explicit > config > default, and argument errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from notebook_accel.config import Config
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import api, notebook_launcher
from notebook_accel.launcher.plan import environments
from tests.launcher.recording import RecordingSink


def env() -> dict[str, str]:
    return LaunchEnvironment.from_environ().to_environ()


def test_config_supplies_what_the_arguments_leave_out() -> None:
    config = Config(num_processes=2, use_cpu=True, mixed_precision="bf16", gradient_accumulation_steps=3)
    sink = RecordingSink()
    result = notebook_launcher(env, config=config, dashboard=sink)
    assert sink.info is not None and sink.info.num_processes == 2
    assert result["NOTEBOOK_ACCEL_MIXED_PRECISION"] == "bf16"
    assert result["NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "3"


def test_explicit_arguments_win_over_the_config() -> None:
    config = Config(num_processes=2, use_cpu=True, mixed_precision="bf16", gradient_accumulation_steps=3)
    result = notebook_launcher(
        env, num_processes=1, mixed_precision="no", gradient_accumulation_steps=1, config=config,
        dashboard=RecordingSink(),
    )
    assert result["WORLD_SIZE"] == "1" and result["NOTEBOOK_ACCEL_MIXED_PRECISION"] == "no"
    assert result["NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS"] == "1"


def test_default_config_file_is_read(tmp_path: Path) -> None:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "notebook_accel" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump({"num_processes": 2, "use_cpu": True, "mixed_precision": "bf16"}))
    sink = RecordingSink()
    assert notebook_launcher(env, dashboard=sink)["NOTEBOOK_ACCEL_MIXED_PRECISION"] == "bf16"
    assert sink.info is not None and sink.info.num_processes == 2


def test_settings_precedence_for_machines_and_port() -> None:
    config = Config(num_processes=4, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1",
                    main_process_port=29500)
    s = api._settings(config, None, None, None, None, None, None, "127.0.0.1", 1, 0)
    assert (s.num_processes, s.num_nodes, s.node_rank, s.master_addr, s.port) == (2, 2, 1, "10.0.0.1", 29500)
    s = api._settings(config, 1, None, None, None, None, 1234, "10.0.0.9", 3, 2)
    assert (s.num_processes, s.num_nodes, s.node_rank, s.master_addr, s.port) == (1, 3, 2, "10.0.0.9", 1234)
    s = api._settings(None, None, None, None, None, None, None, "127.0.0.1", 1, 0)
    assert (s.num_processes, s.use_cpu, s.mixed_precision, s.port) == (None, False, None, None)


@pytest.mark.parametrize("args", [5, "abc", None])
def test_args_must_be_a_sequence(args: object) -> None:
    with pytest.raises(LaunchError, match="args=.*tuple"):
        notebook_launcher(env, args=args, num_processes=2)  # type: ignore[arg-type]


def test_environments_per_rank_on_the_second_node() -> None:
    envs = environments(["cuda:0", "cuda:1"], 1, 2, "10.0.0.1", 29500, "bf16", 2, {})
    assert [(e.rank, e.local_rank, e.world_size, e.local_world_size, e.device) for e in envs] == [
        (2, 0, 4, 2, "cuda:0"),
        (3, 1, 4, 2, "cuda:1"),
    ]
    assert all(e.master_addr == "10.0.0.1" and e.master_port == 29500 and e.launched for e in envs)
    assert all(e.mixed_precision == "bf16" and e.gradient_accumulation_steps == 2 for e in envs)
