"""The engine that runs reaches the sinks: named by the launch config at start, then by the main Accelerator."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from notebook_accel import Accelerator
from notebook_accel.events import EngineReady, RunInfo
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.launcher import notebook_launcher
from notebook_accel.display.console import ConsoleSink
from tests.engines.deepspeed import needs_deepspeed
from tests.launcher.recording import RecordingSink
from tests.launcher.test_fsdp_config import YAML

pytestmark = pytest.mark.timeout(120)


def plain() -> None:
    Accelerator()


def shard_grad_op_in_code() -> None:
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(sharding_strategy=2, cpu_offload=True))
    accelerator.prepare(torch.nn.Linear(4, 4))


def test_the_config_names_the_engine_and_the_main_accelerator_confirms(tmp_path: Path) -> None:
    config = tmp_path / "fsdp.yaml"
    config.write_text(YAML)
    sink = RecordingSink()
    notebook_launcher(plain, config=str(config), dashboard=sink)
    assert sink.info is not None and sink.info.engine == "FSDP FULL_SHARD"
    assert sink.of_type(EngineReady) == [EngineReady(0, "FSDP FULL_SHARD")]  # rank 0 only


def test_an_engine_chosen_in_code_reaches_the_sink() -> None:
    sink = RecordingSink()
    notebook_launcher(shard_grad_op_in_code, num_processes=2, use_cpu=True, dashboard=sink)
    assert sink.info is not None and sink.info.engine == ""  # no config: the launcher cannot know yet
    assert sink.of_type(EngineReady) == [EngineReady(0, "FSDP SHARD_GRAD_OP (offload: parameters)")]


def test_plain_ddp_is_named_ddp() -> None:
    sink = RecordingSink()
    notebook_launcher(plain, num_processes=2, use_cpu=True, dashboard=sink)
    assert sink.of_type(EngineReady) == [EngineReady(0, "DDP")]


def _console(engine: str, ready: str) -> str:
    out = io.StringIO()
    sink = ConsoleSink()
    import sys

    real, sys.stdout = sys.stdout, out
    try:
        sink.start(RunInfo(2, ("cpu", "cpu"), "gloo", "train", engine=engine))
        sink.handle(EngineReady(1, "not the main rank"))
        sink.handle(EngineReady(0, ready))
    finally:
        sys.stdout = real
    return out.getvalue()


def test_console_names_the_engine_once() -> None:
    assert _console("FSDP FULL_SHARD", "FSDP FULL_SHARD") == "Launching 2 processes on CPU (gloo), FSDP FULL_SHARD\n"
    assert _console("", "DDP") == "Launching 2 processes on CPU (gloo)\n"  # plain DDP goes without saying
    assert _console("", "FSDP NO_SHARD").endswith("Launching 2 processes on CPU (gloo)\nEngine: FSDP NO_SHARD\n")


def deepspeed_in_code() -> None:
    from notebook_accel.engines.deepspeed import DeepSpeedPlugin

    Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3, offload_optimizer_device="cpu"))


@needs_deepspeed
def test_deepspeed_is_named_with_its_stage_and_offload() -> None:
    sink = RecordingSink()
    notebook_launcher(deepspeed_in_code, num_processes=2, use_cpu=True, dashboard=sink)
    assert sink.of_type(EngineReady) == [EngineReady(0, "DeepSpeed ZeRO-3 (offload: optimizer)")]
