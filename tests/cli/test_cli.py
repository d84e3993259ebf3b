"""The command line through a real subprocess: help, exit codes, config, env, launch and test."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import notebook_accel
from notebook_accel.cli import env_cmd
from notebook_accel.config import Config, load_config

SCRIPT = Path(__file__).with_name("allreduce_script.py")
REPO = str(Path(notebook_accel.__file__).resolve().parent.parent)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A child environment whose default config locations are empty temporary folders."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("NOTEBOOK_ACCEL_")}
    out.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), HF_HOME=str(tmp_path / "hf"))
    # the launched script runs with its own folder as sys.path[0]; make the package importable from the checkout
    # whatever state the editable install is in
    out["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    return out


def cli(env: dict[str, str], *args: str, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m notebook_accel.cli ARGS`` and capture its output."""
    return subprocess.run([sys.executable, "-m", "notebook_accel.cli", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.mark.parametrize("command", [[], ["config"], ["env"], ["launch"], ["test"]])
def test_help_on_every_command(env: dict[str, str], command: list[str]) -> None:
    result = cli(env, *command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: notebook-accel" in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["launch", "--num_processes", "x", "s.py"], "invalid int value: 'x'"),
        (["launch", "--num_processes", "0", "s.py"], "num_processes: got 0"),
        (["launch", "--cpu", "--num_processes", "2", "missing.py"], "no script at 'missing.py'"),
        (["launch", "--config_file", "nope.yaml", "s.py"], "no config file at"),
        (["launch", "--num_machines", "2", "--num_processes", "2", "--main_process_ip", "h",
          "--main_process_port", "0", "--dry_run", "s.py"], "only works on one machine"),
        (["config", "--default", "--mixed_precision", "fp16"], "'fp16' is not supported on CPU"),
    ],
)
def test_usage_and_config_errors_exit_2_without_traceback(env: dict[str, str], args: list[str], words: str) -> None:
    result = cli(env, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_config_default_writes_a_config_for_this_machine(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "out" / "c.yaml"
    result = cli(env, "config", "--default", "--mixed_precision", "bf16", "--config_file", str(target))
    assert result.returncode == 0, result.stderr
    assert f"Saved the config to {target}" in result.stdout
    assert load_config(target) == Config(num_processes=1, use_cpu=True, mixed_precision="bf16")  # no GPU here
    again = cli(env, "config", "--default", "--config_file", str(target))
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr
    assert cli(env, "config", "--default", "--force", "--config_file", str(target)).returncode == 0
    assert load_config(target).mixed_precision == "no"


def test_config_default_goes_to_the_default_location(env: dict[str, str], tmp_path: Path) -> None:
    assert cli(env, "config", "--default").returncode == 0
    assert (tmp_path / "xdg" / "notebook_accel" / "config.yaml").is_file()


def test_config_questions_with_answers_and_a_wrong_one(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "c.yaml"
    # machines, port, processes (a wrong answer first), precision, accumulation, engine
    answers = "\n0\nmany\n2\nbf16\n4\n\n"  # ... and the engine: DDP
    result = cli(env, "config", "--config_file", str(target), stdin=answers)
    assert result.returncode == 0, result.stderr
    assert "'many' is not a whole number" in result.stdout
    assert load_config(target) == Config(num_processes=2, use_cpu=True, mixed_precision="bf16",
                                         gradient_accumulation_steps=4, main_process_port=0)


def test_config_questions_stop_cleanly_at_end_of_input(env: dict[str, str], tmp_path: Path) -> None:
    result = cli(env, "config", "--config_file", str(tmp_path / "c.yaml"), stdin="1\n")
    assert result.returncode == 2
    assert "input ended before the question" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_env_reports_versions_devices_and_config(env: dict[str, str], tmp_path: Path) -> None:
    config_file = tmp_path / "xdg" / "notebook_accel" / "config.yaml"
    assert cli(env, "config", "--default").returncode == 0
    result = cli(env, "env")
    assert result.returncode == 0, result.stderr
    for words in ("notebook-accel version: 0.1.0", "torch version:", "Python version:", "CPU cores available:",
                  "GPUs: none detected", f"Config file: {config_file}", "use_cpu: true"):
        assert words in result.stdout, result.stdout


def test_env_shows_an_invalid_config_instead_of_failing(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("num_processes: -1\n")
    result = cli(env, "env", "--config_file", str(bad))
    assert result.returncode == 0
    assert "cannot be used" in result.stdout and "num_processes: got -1" in result.stdout


def test_launch_dry_run_maps_a_multi_machine_config(env: dict[str, str], tmp_path: Path) -> None:
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump({"num_processes": 16, "num_machines": 2, "machine_rank": 1,
                                           "main_process_ip": "10.1.2.3", "main_process_port": 29501,
                                           "mixed_precision": "fp16", "gpu_ids": "all"}))
    result = cli(env, "launch", "--config_file", str(config_file), "--gradient_accumulation_steps", "2",
                 "--dry_run", "train.py", "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    command, *variables = result.stdout.splitlines()
    assert command.endswith("-m torch.distributed.run --nproc_per_node 8 --nnodes 2 --node_rank 1 "
                            "--master_addr 10.1.2.3 --master_port 29501 train.py --lr 0.1")
    assert variables == ["export ACCELERATE_MIXED_PRECISION=fp16",
                         "export NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS=2",
                         "export NOTEBOOK_ACCEL_MIXED_PRECISION=fp16"]


def test_launch_dry_run_quotes_what_a_shell_would_split(env: dict[str, str], tmp_path: Path) -> None:
    result = cli(env, "launch", "--num_processes", "1", "--cpu", "--dry_run", "my train.py", "--name", "a b; rm -rf x")
    assert result.returncode == 0, result.stderr
    command = result.stdout.splitlines()[0]
    assert command.endswith("'my train.py' --name 'a b; rm -rf x'")
    assert shlex.split(command)[-3:] == ["my train.py", "--name", "a b; rm -rf x"]


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "soon", "1e7", "604801"])
def test_sanity_check_refuses_a_bad_timeout(env: dict[str, str], value: str) -> None:
    # 1e7 s: the OS wait takes at most ~24.8 days; it used to end in an OverflowError traceback
    result = cli(env, "test", "--timeout", value)
    assert result.returncode == 2 and "is not a number of seconds from more than 0 to 604800" in result.stderr, \
        result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["0", "-2", "100000", "x"])
def test_sanity_check_refuses_a_bad_process_count(env: dict[str, str], value: str) -> None:
    result = cli(env, "test", "--num_processes", value)
    assert result.returncode == 2 and "is not a number of processes" in result.stderr, result.stderr


@pytest.mark.timeout(180)
def test_launch_runs_a_two_process_cpu_script(env: dict[str, str]) -> None:
    result = cli(env, "launch", "--num_processes", "2", "--cpu", "--mixed_precision", "bf16",
                 "--gradient_accumulation_steps", "3", "--main_process_port", "0", str(SCRIPT), "--tag", "hello",
                 timeout=150)
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    assert lines == [
        "rank 0/2 sum=3 device=cpu precision=bf16 accumulation=3 args=['--tag', 'hello']",
        "rank 1/2 sum=3 device=cpu precision=bf16 accumulation=3 args=['--tag', 'hello']",
    ]


@pytest.mark.timeout(180)
def test_launch_of_a_failing_script_exits_1(env: dict[str, str]) -> None:
    result = cli(env, "launch", "--num_processes", "2", "--cpu", str(SCRIPT), "--fail", timeout=150)
    assert result.returncode == 1
    assert "the run failed: torch.distributed.run exited with code" in result.stderr


@pytest.mark.timeout(180)
def test_sanity_check_succeeds(env: dict[str, str]) -> None:
    result = cli(env, "test", timeout=150)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().startswith("notebook-accel test: OK - 2 processes all-reduced")


def test_launch_on_one_machine_listens_on_loopback_only(env: dict[str, str], tmp_path: Path) -> None:
    # torchrun alone serves its store on every interface ('::'); launch serves it on main_process_ip only
    report = tmp_path / "listeners.json"
    script = Path(__file__).with_name("listeners_script.py")
    result = cli(env, "launch", "--num_processes", "2", "--cpu", str(script), str(report))
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(report.read_text())
    sockets = [tuple(s) for s in found["sockets"]]
    assert sockets, "no listening socket was found (the test cannot see the run's sockets)"
    assert {address for _, address, _ in sockets} == {"127.0.0.1"}, sockets
    assert (found["agent"], "127.0.0.1", found["port"]) in sockets, "torchrun's agent does not serve the store"


def test_launch_refuses_a_busy_port_with_the_fix(env: dict[str, str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(env, "launch", "--num_processes", "2", "--cpu", "--main_process_port", str(port), str(SCRIPT))
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is already in use; pass another --main_process_port" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_env_report_names_the_interpreter_inside_its_environment_not_where_it_was_created(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", "/home/someone/checkout/.venv")
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(sys, "executable", "/home/someone/checkout/.venv/bin/python")
    assert env_cmd._interpreter() == ".venv/bin/python"
    monkeypatch.setattr(sys, "prefix", "/usr")
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    assert env_cmd._interpreter() == "/usr/bin/python3"  # no environment: the system's own path
