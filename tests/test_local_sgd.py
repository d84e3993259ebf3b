"""LocalSGD: parameters equal across 2 real processes after each averaging and different in between; off in one
process and with enabled=False; refused under a sharding engine and with a bad step count."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.local_sgd import LocalSGD, LocalSGDError
from notebook_accel.plugins import ConfigurationError
from notebook_accel.state import DistributedType
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)

STEPS = 7


def _training(enabled: bool, local_sgd_steps: int) -> dict[str, Any]:
    """SGD on data that differs by rank; after each step every rank's parameters are gathered (as lists)."""
    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    generator = torch.Generator().manual_seed(accelerator.process_index)
    data = DataLoader(torch.randn(STEPS, 3, generator=generator), batch_size=1)  # not prepared: each rank its own
    after_step: list[list[list[float]]] = []
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=local_sgd_steps, enabled=enabled) as local:
        for x in data:
            accelerator.backward((model(x) - 1.0).pow(2).mean())
            optimizer.step()
            optimizer.zero_grad()
            local.step()
            mine = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
            after_step.append(accelerator.gather_object([mine]))
    final = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    return {"after_step": after_step, "final": accelerator.gather_object([final]), "steps": local.num_steps,
            "enabled": local.enabled}


def local_sgd_every_3() -> dict[str, Any]:
    return _training(enabled=True, local_sgd_steps=3)


def local_sgd_disabled() -> dict[str, Any]:
    return _training(enabled=False, local_sgd_steps=3)


def test_parameters_agree_after_each_averaging_and_drift_in_between() -> None:
    result = notebook_launcher(local_sgd_every_3, num_processes=2, dashboard=RecordingSink())
    assert result["enabled"] and result["steps"] == STEPS
    equal = [rank0 == rank1 for rank0, rank1 in result["after_step"]]
    assert equal == [False, False, True, False, False, True, False]  # averaged after steps 3 and 6 only
    rank0, rank1 = result["final"]
    assert rank0 == rank1  # leaving the block averages once more
    last0, last1 = result["after_step"][-1]
    assert rank0 == pytest.approx([(a + b) / 2 for a, b in zip(last0, last1)], abs=1e-6)


def test_disabled_it_trains_as_plain_ddp() -> None:
    result = notebook_launcher(local_sgd_disabled, num_processes=2, dashboard=RecordingSink())
    assert not result["enabled"]
    assert all(rank0 == rank1 for rank0, rank1 in result["after_step"])  # DDP all-reduced every backward


def test_one_process_is_off_and_bad_arguments_are_refused() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    with LocalSGD(accelerator, model, local_sgd_steps=1) as local:
        local.step()
    assert (local.enabled, local.num_steps) == (False, 1)
    for bad in (0, -1, 2.0, "4", True):
        with pytest.raises(ConfigurationError, match=r"local_sgd_steps=.*expected a whole number >= 1"):
            LocalSGD(accelerator, model, local_sgd_steps=bad)  # type: ignore[arg-type]
    accelerator.state.distributed_type = DistributedType.FSDP
    with pytest.raises(LocalSGDError, match="runs FSDP.*only with plain DDP"):
        LocalSGD(accelerator, model, local_sgd_steps=2)
