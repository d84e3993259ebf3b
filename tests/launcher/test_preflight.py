"""Pre-flight checks: arguments, devices (hardware mocked), and the CUDA-initialised refusal (torch.cuda mocked)."""

from __future__ import annotations

import ctypes
from typing import Any

import pytest
import torch

from notebook_accel import hardware
from notebook_accel.errors import CudaInitializedError, LaunchError, NotebookAccelError
from notebook_accel.launcher import notebook_launcher, preflight
from tests.helpers import child_pids
from tests.launcher.recording import RecordingSink


def gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(hardware, "visible_gpu_count", lambda: count)


def test_non_callable_is_refused_with_the_fix() -> None:
    with pytest.raises(LaunchError, match="not its result"):
        preflight.check_callable(42)
    with pytest.raises(LaunchError, match="int"):
        notebook_launcher(42, num_processes=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2", None, 10**6 + 1, pytest.param(10**5000, id="10**5000")])
def test_positive_int_rejects(value: Any) -> None:
    with pytest.raises(LaunchError, match=r"num_processes=.* whole number from 1 to 1000000"):
        preflight.check_positive_int("num_processes", value)


def test_mixed_precision_values() -> None:
    assert preflight.check_mixed_precision("bf16") == "bf16"
    assert preflight.check_mixed_precision(None) is None
    assert preflight.check_mixed_precision("fp8") == "fp8"  # whether it can run: check_fp8 (test_fp8_launch.py)
    with pytest.raises(LaunchError, match=r"'fp32'.*\['no', 'fp16', 'bf16', 'fp8'\]"):
        preflight.check_mixed_precision("fp32")


@pytest.mark.parametrize("value", [0, -2, float("inf"), "1", True])
def test_timeout_rejects(value: Any) -> None:
    with pytest.raises(LaunchError, match="timeout="):
        preflight.check_timeout(value)


def test_timeout_accepts_numbers() -> None:
    assert preflight.check_timeout(2) == 2.0
    assert preflight.check_timeout(None) is None


def test_nodes_checks() -> None:
    assert preflight.check_nodes(1, 0, None, "127.0.0.1") == (1, 0)
    assert preflight.check_nodes(2, 1, 29500, "10.0.0.1") == (2, 1)
    with pytest.raises(LaunchError, match="node_rank=2.*0 to 1"):
        preflight.check_nodes(2, 2, 29500, "10.0.0.1")
    with pytest.raises(LaunchError, match="needs use_port"):
        preflight.check_nodes(2, 0, None, "10.0.0.1")
    with pytest.raises(LaunchError, match="loopback"):
        preflight.check_nodes(2, 0, 29500, "127.0.0.1")


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, None), ("all", None), ("ALL", None), ("0,1", [0, 1]), (" 1 , 0 ", [1, 0]), (1, [1]), ([2, 0], [2, 0])],
)
def test_parse_gpu_ids(given: Any, expected: list[int] | None) -> None:
    assert preflight.parse_gpu_ids(given) == expected


@pytest.mark.parametrize("given", ["a,b", [True], 1.5, {"x": 1}])
def test_parse_gpu_ids_rejects(given: Any) -> None:
    with pytest.raises(LaunchError, match="gpu_ids=.*'all'"):
        preflight.parse_gpu_ids(given)


def test_parse_gpu_ids_rejects_duplicates() -> None:
    with pytest.raises(LaunchError, match="twice"):
        preflight.parse_gpu_ids("0,0")


def test_cpu_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 0)
    assert preflight.resolve_devices(None, None) == (["cpu"], "gloo")
    assert preflight.resolve_devices(3, "all") == (["cpu"] * 3, "gloo")
    with pytest.raises(LaunchError, match="no GPU is visible"):
        preflight.resolve_devices(2, [0])


def test_one_worker_per_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 2)
    assert preflight.resolve_devices(None, None) == (["cuda:0", "cuda:1"], "nccl")
    assert preflight.resolve_devices(1, None) == (["cuda:0"], "nccl")
    assert preflight.resolve_devices(None, "1") == (["cuda:1"], "nccl")
    assert preflight.resolve_devices(2, [1, 0]) == (["cuda:1", "cuda:0"], "nccl")
    assert preflight.resolve_devices(4, [1], use_cpu=True) == (["cpu"] * 4, "gloo")


def test_too_many_processes_for_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 2)
    with pytest.raises(LaunchError, match=r"num_processes=3 but only 2 GPU\(s\).*use_cpu=True"):
        preflight.resolve_devices(3, None)
    with pytest.raises(LaunchError, match=r"num_processes=2 but only 1 GPU"):
        preflight.resolve_devices(2, [1])


def test_gpu_ids_that_do_not_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 2)
    with pytest.raises(LaunchError, match=r"device\(s\) \[2\] do not exist.*\[0, 1\].*CUDA_VISIBLE_DEVICES"):
        preflight.resolve_devices(None, [0, 2])


def test_cuda_initialised_in_torch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert preflight.cuda_initialized()
    with pytest.raises(CudaInitializedError, match="Restart the kernel"):
        preflight.refuse_if_cuda_initialized()


def test_bad_fork_state_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    assert preflight.cuda_initialized()


class FakeLibcuda:
    def __init__(self, status: int) -> None:
        self.status = status

    def cuDeviceGetCount(self, count: Any) -> int:  # noqa: N802 - the driver's name
        return self.status


def test_driver_probe_catches_what_torch_misses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(preflight.ctypes, "CDLL", lambda name, mode=0: FakeLibcuda(0))
    assert preflight.cuda_initialized()
    monkeypatch.setattr(preflight.ctypes, "CDLL", lambda name, mode=0: FakeLibcuda(3))  # CUDA_ERROR_NOT_INITIALIZED
    assert not preflight.cuda_initialized()


def test_driver_probe_without_a_loaded_driver() -> None:
    with pytest.raises(OSError):
        ctypes.CDLL("libcuda.so.1", mode=preflight.os.RTLD_NOLOAD | preflight.os.RTLD_LAZY)
    assert not preflight._driver_initialized()


def return_device() -> str | None:
    import os

    return os.environ.get("NOTEBOOK_ACCEL_DEVICE")


def test_launch_refuses_before_forking_when_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    sink = RecordingSink()
    with pytest.raises(CudaInitializedError):
        notebook_launcher(return_device, num_processes=2, dashboard=sink)
    assert sink.info is None and child_pids() == []
    # on CPU the kernel's CUDA state does not matter, and one process runs in place
    assert notebook_launcher(return_device, num_processes=2, use_cpu=True, dashboard=RecordingSink()) == "cpu"
    assert notebook_launcher(return_device, num_processes=1, dashboard=RecordingSink()) == "cuda:0"


def test_launch_gives_worker_i_gpu_i(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    sink = RecordingSink()
    assert notebook_launcher(return_device, dashboard=sink, gpu_ids=[1, 0]) == "cuda:1"
    assert sink.info is not None and sink.info.devices == ("cuda:1", "cuda:0") and sink.info.backend == "nccl"
    with pytest.raises(LaunchError, match="num_processes=3"):
        notebook_launcher(return_device, num_processes=3, dashboard=sink)


# -- argument gaps a fuzzer found (issue 11, item 8) ----------------------------------------------------------
def quick() -> int:
    return 1


@pytest.mark.parametrize("value", [None, 5, "", " ", "127.0.0.1 ", b"127.0.0.1"])
def test_master_addr_must_be_an_address_string(value: Any) -> None:
    with pytest.raises(LaunchError, match="master_addr="):
        notebook_launcher(quick, num_processes=2, master_addr=value, dashboard=RecordingSink())
    assert child_pids() == []


def test_absurd_cpu_process_counts_are_refused_before_forking(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus(monkeypatch, 0)
    limit = preflight.max_cpu_processes()
    assert limit >= 64
    for count in (limit + 1, 10**12, 10**4000):
        with pytest.raises(LaunchError, match=f"the {limit} allowed"):
            notebook_launcher(quick, num_processes=count, dashboard=RecordingSink())
    assert preflight.resolve_devices(limit, None) == (["cpu"] * limit, "gloo")


@pytest.mark.parametrize("value", [10**400, float("nan"), float("inf"), -1, 0, "5"])
def test_timeout_out_of_range_is_refused(value: Any) -> None:
    with pytest.raises(LaunchError, match="timeout="):
        preflight.check_timeout(value)


def test_a_timeout_of_months_runs_normally() -> None:
    # poll() takes milliseconds as a C int (about 24.8 days): the supervisor must wait in bounded steps
    assert notebook_launcher(quick, num_processes=2, timeout=3e7, dashboard=RecordingSink()) == 1


@pytest.mark.parametrize("value, expected", [(None, None), (0, None), ("0", None), (29500, 29500), ("29611", 29611),
                                             (" 29611 ", 29611)])
def test_port_accepts_ints_and_digit_strings(value: Any, expected: int | None) -> None:
    assert preflight.check_port(value) == expected


@pytest.mark.parametrize("value", [True, -1, 65536, "29x", "", 1.5, "123456", 10**30])
def test_port_rejects(value: Any) -> None:
    with pytest.raises(LaunchError, match="use_port="):
        preflight.check_port(value)


_HUGE = 10**5000  # Python 3.11+ has no decimal repr for it: an error message built with repr() raises ValueError


@pytest.mark.parametrize("argument", ["args", "num_processes", "mixed_precision", "use_port", "master_addr", "gpu_ids",
                                      "timeout", "gradient_accumulation_steps", "num_nodes", "node_rank", "dashboard",
                                      "show_all_ranks", "use_cpu", "max_restarts", "rdzv_backend", "rdzv_endpoint",
                                      "rdzv_id", "log_line_prefix_template"])
def test_a_huge_integer_anywhere_is_a_launch_error_showing_its_size(argument: str) -> None:
    """Each of these raised ValueError ("Exceeds the limit (4300 digits)") from its own error message."""
    with pytest.raises(NotebookAccelError, match="an integer of 16610 bits"):
        notebook_launcher(quick, **{"dashboard": RecordingSink(), argument: _HUGE})


def test_a_huge_join_timeout_is_a_launch_error() -> None:
    with pytest.raises(LaunchError, match="join_timeout="):  # was an OverflowError from float()
        notebook_launcher(quick, num_processes=2, rdzv_conf={"join_timeout": _HUGE}, dashboard=RecordingSink())
