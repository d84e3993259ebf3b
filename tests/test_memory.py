"""held_memory: the bytes one process holds for training, counted by distinct storage, under every engine."""

from __future__ import annotations

import dataclasses
import importlib.util
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from notebook_accel import Accelerator, HeldMemory, held_memory, notebook_launcher

WIDTH = 64


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, 4))


def _param_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _stepped(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(8, WIDTH)).pow(2).mean().backward()
    optimizer.step()


def test_a_plain_model_holds_its_parameters_gradients_and_adam_moments() -> None:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())
    assert held_memory(model, optimizer) == HeldMemory(_param_bytes(model), 0, 0)  # before any step
    _stepped(model, optimizer)
    held = held_memory(model, optimizer)
    steps = sum(s["step"].numel() * s["step"].element_size() for s in optimizer.state.values())
    assert held == HeldMemory(_param_bytes(model), _param_bytes(model), 2 * _param_bytes(model) + steps)
    assert held.total == held.parameters + held.gradients + held.optimizer
    with pytest.raises(dataclasses.FrozenInstanceError):
        held.parameters = 0  # type: ignore[misc]


def test_views_of_one_flat_buffer_count_once() -> None:
    flat = torch.zeros(300)
    views = [torch.nn.Parameter(flat[:100]), torch.nn.Parameter(flat[100:])]
    module = torch.nn.Module()
    module.a, module.b = views
    assert held_memory(module, torch.optim.SGD(views, lr=0.1)).parameters == 300 * 4


def test_the_prepared_optimizer_is_unwrapped_to_the_torch_one() -> None:
    accelerator = Accelerator(cpu=True)
    model = _model()
    inner = torch.optim.AdamW(model.parameters())
    prepared_model, prepared = accelerator.prepare(model, inner)
    assert prepared is not inner
    _stepped(prepared_model, prepared)
    assert held_memory(prepared_model, prepared) == held_memory(model, inner)
    assert held_memory(prepared_model, prepared).optimizer > 2 * _param_bytes(model)


def test_deepspeed_partitions_masters_and_gradient_buffer_are_counted() -> None:
    """A stand-in for ZeRO-3's objects: partitions in ``ds_tensor``, masters and the gradient buffer on the
    ZeRO optimizer, which our DeepSpeedOptimizer reaches as ``engine.optimizer``."""
    module = torch.nn.Linear(10, 10)  # 110 parameters
    flat_partition = torch.zeros(60)
    for offset, p in zip((0, 50), module.parameters()):  # both partitions are views of one flat buffer
        p.ds_tensor = flat_partition[offset:offset + p.numel() // 2]  # type: ignore[attr-defined]
    master = torch.zeros(55)
    inner = torch.optim.AdamW([master])
    inner.state[master] = {"exp_avg": torch.zeros(55), "exp_avg_sq": torch.zeros(55)}
    zero = SimpleNamespace(optimizer=inner, fp32_partitioned_groups_flat=[master],
                           grad_partitions_flat_buffer=torch.zeros(55))
    wrapper = SimpleNamespace(optimizer=inner, engine=SimpleNamespace(optimizer=zero))
    held = held_memory(module, wrapper)  # type: ignore[arg-type]
    assert held == HeldMemory(60 * 4, 55 * 4, 3 * 55 * 4)
    inner.param_groups[0]["params"] = []  # ZeRO-3 empties the torch optimizer's groups after its step
    assert held_memory(module, wrapper) == held  # type: ignore[arg-type]


def test_wrong_arguments_are_refused() -> None:
    model = _model()
    with pytest.raises(TypeError, match="pass the torch.nn.Module"):
        held_memory("model", torch.optim.SGD(model.parameters(), lr=0.1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got dict; pass the optimizer that accelerator.prepare returned"):
        held_memory(model, {})  # type: ignore[arg-type]


def train_and_measure(engine: str) -> tuple[int, int, int]:
    """Worker: two AdamW steps under ``engine``; (parameters, gradients, optimizer) bytes after the last step."""
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_accel.engines.deepspeed import DeepSpeedPlugin
    from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

    options: dict[str, Any] = {
        "DDP": {}, "ZeRO-2": {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=2)},
        "ZeRO-3": {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=3)},
        "FULL_SHARD": {"fsdp_plugin": FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD",
                                                                     transformer_cls_names_to_wrap="Linear")},
    }[engine]
    accelerator = Accelerator(**options)
    model = _model()
    loader = DataLoader(TensorDataset(torch.randn(32, WIDTH)), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters()), loader)
    for (x,) in loader:
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        held = held_memory(model, optimizer)
        optimizer.zero_grad()
    return max(accelerator.gather_object([dataclasses.astuple(held)]), key=sum)  # the rank holding the most


def _launch(engine: str) -> HeldMemory:
    return HeldMemory(*notebook_launcher(train_and_measure, (engine,), num_processes=2, dashboard=False, use_cpu=True))


@pytest.fixture(scope="module")
def ddp() -> HeldMemory:
    return _launch("DDP")


@pytest.mark.timeout(180)
def test_full_shard_holds_half_of_ddp_on_each_of_two_processes(ddp: HeldMemory) -> None:
    whole = _param_bytes(_model())
    assert ddp.parameters == ddp.gradients == whole and ddp.optimizer >= 2 * whole
    fsdp = _launch("FULL_SHARD")
    assert fsdp.parameters + fsdp.optimizer == pytest.approx((ddp.parameters + ddp.optimizer) / 2, rel=0.05)
    assert fsdp.gradients == pytest.approx(ddp.gradients / 2, rel=0.05)


NO_DEEPSPEED = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                  reason="deepspeed is not installed (pip install 'notebook-accel[deepspeed]')")


@pytest.mark.timeout(300)
@NO_DEEPSPEED
def test_zero3_holds_half_of_ddp_plus_its_master_copy(ddp: HeldMemory) -> None:
    whole = _param_bytes(_model())
    zero = _launch("ZeRO-3")
    assert zero.parameters == pytest.approx(whole / 2, rel=0.05)  # this rank's partition
    assert zero.gradients == pytest.approx(whole / 2, rel=0.05)  # the gradient-partition buffer, kept between steps
    # half of DDP's Adam moments, plus the fp32 master partition ZeRO keeps beside the module's (fp32) weights
    assert zero.optimizer == pytest.approx((ddp.optimizer + whole) / 2, rel=0.05)
    assert zero.parameters + zero.optimizer == pytest.approx((ddp.parameters + ddp.optimizer + whole) / 2, rel=0.05)


@pytest.mark.timeout(300)
@NO_DEEPSPEED
def test_zero2_after_its_step_holds_whole_parameters_no_gradients_and_half_the_optimizer(ddp: HeldMemory) -> None:
    whole = _param_bytes(_model())
    zero = _launch("ZeRO-2")
    assert zero.parameters == whole  # ZeRO-2 shards gradients and optimizer state, not the parameters
    assert zero.gradients == 0  # freed in DeepSpeed's step, which ran inside accelerator.backward
    assert zero.optimizer == pytest.approx((ddp.optimizer + whole) / 2, rel=0.05)
