"""CUDA paths for real: training on the GPU, fp16 and bf16, device choice, NVML, exact resume, CUDA results.

Each case runs in a fresh process (``tests/gpu/cases.py``) so that this process never initialises CUDA and a
case can set ``CUDA_VISIBLE_DEVICES`` before torch is imported. Skipped without a GPU (see conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import ON_CPU

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cpu" if ON_CPU else "cuda:0"


def run_case(name: str, env: dict[str, str] | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """Run ``tests.gpu.cases NAME`` in a new Python process and return what it printed after ``RESULT``."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.cases", name], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"case {name} exited with {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
                    f"--- stderr\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]))


def test_single_process_trains_on_the_gpu() -> None:
    result = run_case("single_process")
    assert result["device"] == DEVICE and result["batch_device"] == DEVICE
    assert result["pid"] == result["launcher_pid"]  # num_processes=1 runs in the launching process
    assert result["last"] < result["first"] * 0.5


def test_forked_single_worker_forms_an_nccl_group_and_leaves_the_kernel_clean() -> None:
    result = run_case("forked_one_process")
    assert result["pid"] != result["launcher_pid"]
    assert result["backend"] == ("gloo" if ON_CPU else "nccl")
    assert result["value"] == [3.0] * 4
    assert result["device"] == DEVICE
    assert result["kernel_cuda_initialized"] is False


def test_cuda_tensor_result_arrives_on_the_cpu() -> None:
    result = run_case("cuda_tensor_result")
    assert result["device"] == "cpu"
    assert result["value"] == [0, 2, 4, 6]
    assert result["kernel_cuda_initialized"] is False


def test_fp16_grad_scaler_skips_the_inf_step() -> None:
    result = run_case("fp16_scaler")
    assert result["skipped"] == [False, False, True, False, False, False]
    assert result["changed"] == [True, True, False, True, True, True]
    scales = result["scales"]
    assert scales[2] == scales[1] * 0.5  # backoff_factor 0.5 on the skipped step
    assert result["device"] == DEVICE


def test_bf16_autocast_computes_in_bf16_and_returns_fp32() -> None:
    result = run_case("bf16_autocast")
    assert result == {"inner": "torch.bfloat16", "output": "torch.float32", "explicit": "torch.bfloat16",
                      "grad": "torch.float32", "device": DEVICE}


@pytest.mark.cuda_only
def test_nvml_counts_gpus_without_initialising_cuda() -> None:
    result = run_case("physical_gpus")
    assert result["visible"] >= 1 and len(result["uuids"]) == result["visible"]
    assert all(uuid.startswith("GPU-") for uuid in result["uuids"])
    assert result["torch_initialized"] is False
    assert result["kernel_cuda_initialized"] is False


@pytest.mark.cuda_only
def test_cuda_visible_devices_set_before_import_is_honoured() -> None:
    physical = run_case("physical_gpus")
    last = len(physical["uuids"]) - 1
    result = run_case("visible_devices", env={"CUDA_VISIBLE_DEVICES": str(last)})
    assert result["count"] == 1
    assert result["device"] == "cuda:0"  # device 0 of the mask ...
    assert result["uuid"] == physical["uuids"][last]  # ... is the physical GPU the mask names


@pytest.mark.cuda_only
def test_gpu_ids_choose_the_device_and_refuse_a_missing_one() -> None:
    result = run_case("gpu_ids")
    assert result["device"] == f"cuda:{result['last']}"
    assert "do not exist" in result["refused"] and str(result["last"] + 1) in result["refused"]


def test_checkpoint_saved_on_the_gpu_resumes_exactly(tmp_path: Path) -> None:
    env = {"GPU_CASE_FOLDER": str(tmp_path)}
    straight = run_case("checkpoint_straight")
    saved = run_case("checkpoint_first_part", env=env)
    assert Path(saved["path"]).is_dir()
    resumed = run_case("checkpoint_resumed", env=env)
    assert resumed == straight  # bitwise weights, the device RNG's next draw, the scheduler's lr


@pytest.mark.cuda_only  # its CPU form (torchao's emulation) is tests/float8's; 3 minutes on a busy CI CPU
def test_fp8_trains_a_linear_stack_close_to_bf16() -> None:
    pytest.importorskip("torchao", reason="torchao is not installed (pip install 'notebook-accel[fp8]')")
    result = run_case("fp8_linear_stack")
    if "skip" in result:
        pytest.skip(result["skip"])
    bf16, fp8 = result["bf16"], result["fp8"]
    assert fp8["float8"] == ["2", "4"] and bf16["float8"] == []  # the first and last Linear stay high precision
    assert fp8["weight"] == "torch.float32"  # master weights stay fp32
    assert fp8["losses"][-1] < fp8["losses"][0] * 0.5  # it learned
    tail_fp8, tail_bf16 = sum(fp8["losses"][-20:]) / 20, sum(bf16["losses"][-20:]) / 20
    print(f"fp8 {fp8['losses'][0]:.4f} -> {tail_fp8:.4f}, bf16 {bf16['losses'][0]:.4f} -> {tail_bf16:.4f}")
    # fp8 tracks bf16 along the way down; near the end both sit at fp8's noise floor, where a relative gap says
    # nothing (an H200: 0.4164 -> 0.0096 against 0.4164 -> 0.0068): the gap is judged against the start
    assert abs(tail_fp8 - tail_bf16) <= 0.01 * bf16["losses"][0], (tail_fp8, tail_bf16, bf16["losses"][0])
    middle = len(bf16["losses"]) // 4  # a quarter of the way, while the loss still falls fast
    assert abs(fp8["losses"][middle] - bf16["losses"][middle]) <= 0.1 * bf16["losses"][middle] + 0.01 * bf16[
        "losses"][0], (fp8["losses"][middle], bf16["losses"][middle])


@pytest.mark.cuda_only  # the CPU's figure is measured, not sampled: tests/monitor/test_verdict.py checks it
def test_ddp_communication_on_the_gpu_is_what_the_step_waits_for() -> None:
    result = run_case("ddp_exposed_wait")
    print(json.dumps(result, indent=1))
    plain, delayed = result["plain"], result["delayed"]
    assert plain["steps"] >= 50 and delayed["steps"] >= 50
    # a one-rank all-reduce costs the step next to nothing: a communication share would mislead
    assert plain["comm"] <= 0.1 * plain["step"] + 0.0005, plain
    # the delayed bucket: the step waits about as long as measured without the monitor (no_sync against sync)
    assert delayed["real_comm"] > 0.003, delayed  # the hook's sleep really held the step up
    assert abs(delayed["comm"] - delayed["real_comm"]) <= 0.3 * delayed["real_comm"] + 0.001, delayed


@pytest.mark.cuda_only
def test_fp8_run_eagerly_on_the_gpu_says_so_once_and_compiled_not_at_all() -> None:
    pytest.importorskip("torchao", reason="torchao is not installed (pip install 'notebook-accel[fp8]')")
    result = run_case("fp8_eager_notice")
    print(result)
    assert len(result["eager"]["warnings"]) == 1 and "without torch.compile" in result["eager"]["warnings"][0]
    assert result["compiled"]["warnings"] == []


def test_one_rank_on_a_one_node_ray_uses_the_gpu_ray_gives_it() -> None:
    """issue 49: the Ray placement's GPU path on hardware (nccl, Ray's CUDA_VISIBLE_DEVICES)."""
    if importlib.util.find_spec("ray") is None:  # not imported here: importing Ray changes this process's environment
        pytest.skip("Ray is not installed here: pip install 'notebook-accel[ray]' (or pass its wheels with --wheels)")
    result = run_case("ray_one_gpu")
    print(result)
    assert result["pid"] != result["launcher_pid"] and result["value"] == [3.0] * 4
    assert result["device"] == DEVICE and result["backend"] == ("gloo" if ON_CPU else "nccl")
    if not ON_CPU:
        assert result["visible"] not in (None, ""), result  # Ray chose the GPU
        assert result["kernel_cuda_initialized"] is False
