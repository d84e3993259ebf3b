"""The Accelerator's checkpoint methods delegate here: registration errors, world-size mismatch, round trip."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator
from notebook_accel.checkpointing import CheckpointError, UnregistrableError
from notebook_accel.launcher import notebook_launcher
from tests.checkpointing import training


def _prepared(seed: int):
    torch.manual_seed(seed)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    loader = DataLoader(torch.arange(12.0).view(6, 2), batch_size=2, shuffle=True)
    return (acc, *acc.prepare(model, optimizer, loader))


def test_register_for_checkpointing_refuses_plain_objects() -> None:
    acc = Accelerator(cpu=True)
    with pytest.raises(UnregistrableError, match="int object 42, which has no state_dict"):
        acc.register_for_checkpointing(42)
    assert acc._custom_objects == []


def test_single_process_round_trip_mid_epoch(tmp_path) -> None:
    acc, model, optimizer, loader = _prepared(0)
    batches = iter(loader)
    next(batches)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = acc.save_state(str(tmp_path / "ckpt"))
    rest = [b.tolist() for b in batches]
    weights = [p.detach().clone() for p in model.parameters()]

    acc2, model2, optimizer2, loader2 = _prepared(1)
    acc2.load_state(path)
    assert [b.tolist() for b in loader2] == rest  # the loader continues where the saved run was
    assert all(torch.equal(a, b) for a, b in zip(weights, model2.parameters()))
    assert optimizer2.state_dict()["state"][0]["step"] == 1


def test_checkpoint_from_two_processes_refused_in_one(tmp_path) -> None:
    notebook_launcher(training.first_part, (str(tmp_path), 1, 0, 1, False), num_processes=2, dashboard=False,
                      use_cpu=True)
    run = training._Run(0, str(tmp_path), 1)
    rng_before = torch.get_rng_state()
    with pytest.raises(CheckpointError, match=r"saved by 2 process.*this run has 1\. Resume with num_processes=2 "
                                              r".*allow_world_size_change=True"):
        run.acc.load_state()
    path = run.acc.load_state(allow_world_size_change=True)  # the explicit choice: all but the per-rank states
    saved = torch.load(os.path.join(path, "pytorch_model.bin"), weights_only=True)
    assert all(torch.equal(saved[k], v) for k, v in run.model.state_dict().items())
    assert run.counter.value == torch.load(os.path.join(path, "custom_checkpoint_0.pkl"), weights_only=True)["value"]
    assert run.scheduler.state_dict()["last_epoch"] > 0 and run.optimizer.state_dict()["state"]
    assert torch.equal(torch.get_rng_state(), rng_before)  # this run's RNG, not rank 0's of the saved run
    assert run.loader.state_dict()["batches_yielded"] == 0  # the loader starts at its first batch


def test_async_save_from_the_accelerator_and_from_its_project_configuration(tmp_path) -> None:
    from notebook_accel import ProjectConfiguration
    from notebook_accel.checkpointing import background

    acc, model, optimizer, loader = _prepared(0)
    path = acc.save_state(str(tmp_path / "a"), async_save=True)
    assert acc.wait_for_checkpoint() == path and os.path.isfile(os.path.join(path, "manifest.json"))
    assert acc.wait_for_checkpoint() is None
    acc.project_configuration = ProjectConfiguration(async_save=True)
    path = acc.save_state(str(tmp_path / "b"))  # the configuration's default: in the background
    assert acc.load_state(path) == path and background.in_flight() is None  # load_state waited for it
    acc.save_state(str(tmp_path / "c"))
    acc.end_training()  # waits too
    assert background.in_flight() is None and os.path.isfile(tmp_path / "c" / "manifest.json")
    background.release_buffers()


def test_async_save_refuses_values_other_than_true_false_none(tmp_path) -> None:
    from notebook_accel import ProjectConfiguration
    from notebook_accel.plugins import ConfigurationError

    acc, *_ = _prepared(0)
    with pytest.raises(TypeError, match=r"async_save=\.\.\.\) must be True, False or None .*got 'yes'"):
        acc.save_state(str(tmp_path / "a"), async_save="yes")
    with pytest.raises(ConfigurationError, match="async_save"):
        ProjectConfiguration(async_save="yes")
