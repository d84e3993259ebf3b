"""accelerate 1.x names added in the second compatibility pass: hooks, uneven inputs, local-process decorators,
forced sync, the profiler, save_iteration, AcceleratorState, find_executable_batch_size, release_memory and
load_checkpoint_in_model. Collective behaviour runs in 2 real processes."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import (
    Accelerator,
    AcceleratorState,
    ProfileKwargs,
    ProjectConfiguration,
    find_executable_batch_size,
    load_checkpoint_in_model,
    notebook_launcher,
    release_memory,
)
from notebook_accel.checkpointing import CheckpointError
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


def test_state_hooks_run_before_save_and_load_and_can_be_removed(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    calls: list[tuple[str, Any]] = []
    save = accelerator.register_save_state_pre_hook(
        lambda models, weights, out: calls.append(("save", (len(models), sorted(weights[0]), out))))
    load = accelerator.register_load_state_pre_hook(lambda models, src: calls.append(("load", (models[0], src))))
    path = accelerator.save_state(str(tmp_path / "c"))
    accelerator.load_state(path)
    assert calls == [("save", (1, ["bias", "weight"], str(tmp_path / "c"))), ("load", (model, path))]
    save.remove()
    load.remove()
    accelerator.save_state(str(tmp_path / "c"))
    accelerator.load_state(path)
    assert len(calls) == 2


def test_on_local_process_and_save_iteration(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True))
    assert accelerator.on_local_process(lambda: 1, local_process_index=0)() == 1
    assert accelerator.on_local_process(local_process_index=1)(lambda: 1)() is None
    with pytest.raises(ValueError, match="local_process_index="):
        accelerator.on_local_process(lambda: 1)
    assert accelerator.save_iteration == 0
    accelerator.save_state()
    assert accelerator.save_iteration == 1


def _wait_for_the_kernel_warm_up() -> None:
    """Under pytest, nbval has imported ipykernel, so importing the launcher started the kernel's warm-up thread
    (``launcher/kernel/warmup.py``), which imports ``torch._dynamo``; torch's profiler imports ``torch._inductor``
    when it starts, and the two imports running at once deadlock on torch's module locks. Let it finish first."""
    for thread in threading.enumerate():
        if thread.name == "notebook-accel warm-up":
            thread.join(120)


def test_profile_writes_a_trace_and_counts_ops(tmp_path: Path) -> None:
    _wait_for_the_kernel_warm_up()
    handler = ProfileKwargs(activities=["cpu"], record_shapes=True, output_trace_dir=str(tmp_path))
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    with accelerator.profile() as profiler:
        torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    assert any("mm" in event.key for event in profiler.key_averages())
    trace = json.loads((tmp_path / "profile_0.json").read_text())
    assert trace["traceEvents"]
    with pytest.raises(ValueError, match="unknown \\['tpu'\\]"):
        with accelerator.profile(ProfileKwargs(activities=["tpu"])):
            pass


def test_accelerator_state_and_release_memory() -> None:
    state = AcceleratorState()
    assert state.num_processes == 1 and state.mixed_precision == "no"
    model, tensor = release_memory(torch.nn.Linear(2, 2), torch.ones(2))
    assert model is None and tensor is None


def test_find_executable_batch_size_halves_on_out_of_memory() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=32)
    def train(batch_size: int, scale: float) -> float:
        tried.append(batch_size)
        if batch_size > 8:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")
        return batch_size * scale

    assert train(2.0) == 16.0
    assert tried == [32, 16, 8]

    @find_executable_batch_size(starting_batch_size=4)
    def never(batch_size: int) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        never()

    @find_executable_batch_size(starting_batch_size=4)
    def other(batch_size: int) -> None:
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem"):
        other()


def test_the_memory_helpers_are_also_where_accelerate_users_import_them() -> None:
    # accelerate's memory.py and automatic_gradient_accumulation.py examples: from accelerate.utils import ...
    import notebook_accel.utils

    assert notebook_accel.utils.find_executable_batch_size is find_executable_batch_size
    assert notebook_accel.utils.release_memory is release_memory


def test_load_checkpoint_in_model_reads_every_save_model_layout(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    for name, kwargs in (("single", {}), ("shards", {"max_shard_size": 10_000}),
                         ("torch", {"safe_serialization": False, "max_shard_size": 10_000})):
        accelerator.save_model(source, str(tmp_path / name), **kwargs)
        target = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
        load_checkpoint_in_model(target, str(tmp_path / name))
        for a, b in zip(source.state_dict().values(), target.state_dict().values()):
            assert torch.equal(a, b), name
    assert any(p.name.endswith(".index.json") for p in (tmp_path / "shards").iterdir())
    with pytest.raises(CheckpointError, match="do not fit the model"):
        load_checkpoint_in_model(torch.nn.Sequential(torch.nn.Linear(64, 8)), str(tmp_path / "single"))
    with pytest.raises(CheckpointError, match="no weights at"):
        load_checkpoint_in_model(source, str(tmp_path / "nothing"))


# -- 2 processes ---------------------------------------------------------------------------------------------
def uneven_join() -> dict[str, Any]:
    """Rank 0 has 3 batches, rank 1 has 2: with Join, both finish; gradients stay averaged."""
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = accelerator.prepare(torch.nn.Linear(1, 1, bias=False))
    loader = accelerator.prepare(DataLoader(torch.arange(5.0).unsqueeze(1), batch_size=1))
    steps = 0
    with accelerator.join_uneven_inputs([model], even_batches=False):
        for x in loader:
            model(x).sum().backward()
            steps += 1
    local = accelerator.on_local_process(lambda: os.getpid(), local_process_index=1)()
    return {"steps": accelerator.gather_object([steps]), "local": accelerator.gather_object([local])}


def forced_sync() -> list[float]:
    """Under no_sync, trigger_sync_in_backward makes the backward all-reduce: both ranks see the mean."""
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(1, 1, bias=False))
    x = torch.tensor([[float(accelerator.process_index + 1)]])
    with accelerator.no_sync(model):
        with accelerator.trigger_sync_in_backward(model):
            model(x).sum().backward()
    return accelerator.gather_object([model.module.weight.grad.item()])


def test_join_uneven_inputs_and_local_process_in_two_processes() -> None:
    result = notebook_launcher(uneven_join, num_processes=2, dashboard=RecordingSink())
    assert result["steps"] == [3, 2]
    assert result["local"][0] is None and isinstance(result["local"][1], int)


def test_trigger_sync_in_backward_all_reduces_inside_no_sync() -> None:
    grads = notebook_launcher(forced_sync, num_processes=2, dashboard=RecordingSink())
    assert grads == [1.5, 1.5]
