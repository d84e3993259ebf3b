"""``notebook_launcher(mixed_precision="fp8")``: refused before any fork when fp8 cannot run, and run with torchao's
emulation when the config asks for it (its options reach every worker; the header names torchao)."""

from __future__ import annotations

from typing import Any

import pytest

from notebook_accel import Accelerator, LaunchError, notebook_launcher
from notebook_accel.config import Config
from notebook_accel.display.console import describe_launch
from notebook_accel.float8 import facts
from notebook_accel.float8.convert import float8_module_names
from notebook_accel.hardware import GpuInfo
from notebook_accel.launcher import preflight
from tests.float8.conftest import needs_torchao
from tests.float8.workers import TinyTransformer
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)
EMULATED = {"fp8_config": {"backend": "AO", "emulate": True}}


def never_called() -> None:
    raise AssertionError("the worker must not start")


def converted() -> dict[str, Any]:
    accelerator = Accelerator()
    model = accelerator.prepare(TinyTransformer())
    return {"precision": accelerator.mixed_precision, "float8": float8_module_names(accelerator.unwrap_model(model))}


def test_fp8_on_the_cpu_without_emulation_is_refused_before_the_fork() -> None:
    with pytest.raises(LaunchError, match=r"uses the CPU.*emulate: true.*nothing was started"):
        notebook_launcher(never_called, num_processes=2, use_cpu=True, mixed_precision="fp8", dashboard=False)


def test_missing_torchao_is_named_before_the_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "torchao_installed", lambda: False)
    config = Config(num_processes=2, use_cpu=True, mixed_precision="fp8", extra=EMULATED)
    with pytest.raises(LaunchError, match=r"needs torchao.*notebook-accel\[fp8\]"):
        notebook_launcher(never_called, config=config, dashboard=False)


def test_a_gpu_older_than_ada_is_refused_before_the_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "torchao_installed", lambda: True)
    monkeypatch.setattr(preflight.hardware, "detect_gpus", lambda: [GpuInfo(0, "A100", 80 << 30, (8, 0))])
    with pytest.raises(LaunchError, match=r"GPUs have 8\.0.*mixed_precision='bf16'"):
        notebook_launcher(never_called, mixed_precision="fp8", dashboard=False)


def test_deepspeed_is_refused_when_the_argument_asks_for_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts, "torchao_installed", lambda: True)
    config = Config(num_processes=2, use_cpu=True, distributed_type="DEEPSPEED", mixed_precision="bf16",
                    extra={"deepspeed_config": {"zero_stage": 2}, **EMULATED})
    with pytest.raises(LaunchError, match="the engine is DEEPSPEED"):
        notebook_launcher(never_called, config=config, mixed_precision="fp8", dashboard=False)


@needs_torchao
@pytest.mark.parametrize("processes", [2, 1], ids=["forked", "in-process"])
def test_the_configs_emulation_reaches_every_worker_and_the_header_says_torchao(processes: int) -> None:
    sink = RecordingSink()
    config = Config(num_processes=processes, use_cpu=True, mixed_precision="fp8", extra=EMULATED)
    result = notebook_launcher(converted, config=config, dashboard=sink)
    assert result["precision"] == "fp8" and "blocks.1.qkv" in result["float8"]
    assert sink.info is not None and sink.info.mixed_precision == "fp8"
    assert describe_launch(sink.info).endswith(", mixed precision fp8 (torchao)")
