"""Small stand-ins for the Accelerator's parts, so checkpointing is tested on its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from notebook_accel.plugins import ProjectConfiguration


@dataclass
class FakeState:
    """The fields of the Accelerator's state that checkpointing reads."""

    process_index: int = 0
    num_processes: int = 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def local_process_index(self) -> int:
        return self.process_index


class FakeLoader:
    """A loader whose state is a position and an epoch."""

    def __init__(self) -> None:
        self.position = 0
        self.epoch = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position, self.epoch = state["position"], state["epoch"]


class Counter:
    """A registrable custom object."""

    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]


class OptimizerWrapper:
    """Like the Accelerator's wrapped optimizer: the torch optimizer as ``.optimizer``."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state)


@dataclass
class FakeAccelerator:
    """What checkpointing relies on from the Accelerator."""

    state: FakeState = field(default_factory=FakeState)
    _models: list[Any] = field(default_factory=list)
    _optimizers: list[Any] = field(default_factory=list)
    _schedulers: list[Any] = field(default_factory=list)
    _dataloaders: list[Any] = field(default_factory=list)
    _custom_objects: list[Any] = field(default_factory=list)
    scaler: Any = None
    project_configuration: ProjectConfiguration = field(default_factory=ProjectConfiguration)
    step: int = 0

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    def unwrap_model(self, model: Any) -> Any:
        return getattr(model, "module", model)


def make_accelerator(seed: int = 0, project_dir: str | None = None, total_limit: int | None = None,
                     rank: int = 0, world: int = 1, scaler: bool = False) -> FakeAccelerator:
    """A fake Accelerator with a model, SGD with momentum, a StepLR, a loader and a custom object."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=project_dir is not None,
                                  total_limit=total_limit)
    return FakeAccelerator(
        state=FakeState(rank, world),
        _models=[model],
        _optimizers=[OptimizerWrapper(optimizer)],
        _schedulers=[scheduler],
        _dataloaders=[FakeLoader()],
        _custom_objects=[Counter()],
        scaler=torch.amp.GradScaler("cpu", init_scale=1024.0) if scaler else None,
        project_configuration=config,
    )


def train_step(acc: FakeAccelerator) -> None:
    """One step that changes every part of the state (weights, momentum, schedule, loader, counter, step)."""
    model = acc._models[0]
    loss = model(torch.randn(3, 4)).pow(2).sum()
    loss.backward()
    acc._optimizers[0].optimizer.step()
    acc._optimizers[0].optimizer.zero_grad()
    acc._schedulers[0].step()
    acc._dataloaders[0].position += 1
    acc._custom_objects[0].value += 1
    acc.step += 1


def fingerprint(acc: FakeAccelerator) -> dict[str, Any]:
    """Everything a resume must bring back, comparable with ==."""
    opt = acc._optimizers[0].optimizer
    return {
        "weights": [p.detach().clone().tolist() for p in acc._models[0].parameters()],
        "momentum": [opt.state[p]["momentum_buffer"].tolist() for p in opt.param_groups[0]["params"] if p in opt.state],
        "lr": opt.param_groups[0]["lr"],
        "sched": [s.last_epoch for s in acc._schedulers],
        "loader": acc._dataloaders[0].state_dict(),
        "counter": acc._custom_objects[0].value,
        "step": acc.step,
    }
