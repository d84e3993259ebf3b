"""How launch maps a config to torch.distributed.run's flags and the workers' variables (in process, no run)."""

from __future__ import annotations

import argparse
import sys

import pytest

from notebook_accel.cli.common import UsageError
from notebook_accel.cli.launch_cmd import child_environment, torchrun_command
from notebook_accel.cli.process import run_child
from notebook_accel.cli.selftest_cmd import sanity_check
from notebook_accel.config import Config

HEAD = [sys.executable, "-m", "torch.distributed.run"]
BOUND = [sys.executable, "-m", "notebook_accel.cli.torchrun_bound"]  # machine 0: the store on master_addr only


def test_single_machine_uses_loopback_and_the_given_free_port() -> None:
    cmd = torchrun_command(Config(num_processes=2, use_cpu=True), "s.py", ["--x"], port=31234)
    assert cmd == [*BOUND, "--nproc_per_node", "2", "--nnodes", "1", "--node_rank", "0", "--master_addr",
                   "127.0.0.1", "--master_port", "31234", "s.py", "--x"]


def test_single_machine_leaves_port_0_to_the_bound_runner_and_keeps_a_fixed_one() -> None:
    free = torchrun_command(Config(main_process_port=0), "s.py", [])
    assert free[free.index("--master_port") + 1] == "0"  # torchrun_bound binds a free port and holds it
    fixed = torchrun_command(Config(main_process_port=29555, main_process_ip="10.0.0.2"), "s.py", [])
    assert fixed[fixed.index("--master_addr") + 1:fixed.index("--master_port") + 2] == ["10.0.0.2", "--master_port",
                                                                                        "29555"]


def test_static_multi_machine_flags() -> None:
    config = Config(num_processes=8, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1")
    cmd = torchrun_command(config, "s.py", [])
    assert cmd[:3] == HEAD  # a client of machine 0's store: plain torchrun
    assert cmd[3:] == ["--nproc_per_node", "4", "--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1",
                       "--master_port", "29500", "s.py"]
    served = torchrun_command(Config(num_processes=8, num_machines=2, main_process_ip="10.0.0.1"), "s.py", [])
    assert served[:3] == BOUND and served[served.index("--node_rank") + 1] == "0"


def test_c10d_multi_machine_flags() -> None:
    config = Config(num_processes=4, num_machines=2, main_process_ip="h", main_process_port=1234, rdzv_backend="c10d")
    cmd = torchrun_command(config, "s.py", [])
    assert cmd[:3] == HEAD  # c10d: torch's dynamic rendezvous serves its own store (README: what a run exposes)
    assert cmd[3:] == ["--nproc_per_node", "2", "--nnodes", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                       "h:1234", "--rdzv_id", "notebook-accel", "--rdzv_conf", "is_host=true", "--local_addr", "h",
                       "s.py"]
    other = torchrun_command(Config(num_processes=4, num_machines=2, machine_rank=1, main_process_ip="h",
                                    main_process_port=1234, rdzv_backend="c10d"), "s.py", [])
    assert other[-3:] == ["--rdzv_conf", "is_host=false", "s.py"]  # only machine 0 serves the rendezvous


def test_free_port_on_several_machines_is_refused() -> None:
    config = Config(num_processes=2, num_machines=2, main_process_ip="h", main_process_port=0)
    with pytest.raises(UsageError, match="only works on one machine"):
        torchrun_command(config, "s.py", [])


def test_variables_carry_only_non_default_choices() -> None:
    assert child_environment(Config()) == {}
    assert child_environment(Config(use_cpu=True, mixed_precision="bf16", gradient_accumulation_steps=2)) == {
        "NOTEBOOK_ACCEL_DEVICE": "cpu", "NOTEBOOK_ACCEL_MIXED_PRECISION": "bf16", "ACCELERATE_MIXED_PRECISION": "bf16",
        "NOTEBOOK_ACCEL_GRADIENT_ACCUMULATION_STEPS": "2"}


def test_gpu_ids_become_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert child_environment(Config(gpu_ids="1,3", num_processes=2)) == {"CUDA_VISIBLE_DEVICES": "1,3"}
    assert child_environment(Config(gpu_ids="all", num_processes=2)) == {}
    assert child_environment(Config(gpu_ids="1", use_cpu=True)) == {"NOTEBOOK_ACCEL_DEVICE": "cpu"}


def test_gpu_ids_are_relative_to_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert child_environment(Config(gpu_ids="0,2", num_processes=2)) == {"CUDA_VISIBLE_DEVICES": "4,6"}
    with pytest.raises(UsageError, match=r"names GPU\(s\) \[3\] but CUDA_VISIBLE_DEVICES='4,5,6' leaves only 3"):
        child_environment(Config(gpu_ids="3"))


@pytest.mark.timeout(60)
def test_run_child_timeout_stops_the_process_group() -> None:
    code, output = run_child([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                             {}, timeout=2.0, capture=True)
    assert code == 124 and "started" in output


def test_run_child_returns_the_exit_code() -> None:
    assert run_child([sys.executable, "-c", "raise SystemExit(7)"], {}, capture=True) == (7, "")


@pytest.mark.timeout(60)
def test_sanity_check_reports_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert sanity_check(argparse.Namespace(num_processes=2, timeout=0.01)) == 1
    out = capsys.readouterr().out
    assert "notebook-accel test: FAILED - the 2-process check timed out" in out


def test_fp8_options_reach_the_script_and_what_cannot_run_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from notebook_accel.cli import launch_cmd
    from notebook_accel.float8 import facts
    from notebook_accel.hardware import GpuInfo

    emulated = Config(num_processes=2, use_cpu=True, mixed_precision="fp8",
                      extra={"fp8_config": {"backend": "AO", "emulate": True}})
    assert child_environment(emulated)["NOTEBOOK_ACCEL_FP8"] == '{"emulate": true}'
    monkeypatch.setattr(facts, "torchao_installed", lambda: False)
    with pytest.raises(UsageError, match="needs torchao"):
        launch_cmd.refuse_fp8_here(emulated)
    monkeypatch.setattr(facts, "torchao_installed", lambda: True)
    launch_cmd.refuse_fp8_here(emulated)
    monkeypatch.setattr(launch_cmd.hardware, "detect_gpus", lambda: [GpuInfo(0, "V100", 16 << 30, (7, 0)),
                                                                      GpuInfo(1, "H100", 80 << 30, (9, 0))])
    launch_cmd.refuse_fp8_here(Config(num_processes=1, gpu_ids="1", mixed_precision="fp8"))
    with pytest.raises(UsageError, match=r"GPUs have 7\.0"):
        launch_cmd.refuse_fp8_here(Config(num_processes=2, mixed_precision="fp8"))
