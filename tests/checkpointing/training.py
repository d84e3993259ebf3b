"""Worker bodies for the exact-resume tests with the real Accelerator: a shuffled loader, dropout, SGD with
momentum, a scheduler, gradient accumulation and a registered object, on every rank."""

from __future__ import annotations

import io
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, ProjectConfiguration, set_seed
from tests.checkpointing.fakes import Counter


def to_bytes(obj: Any) -> bytes:
    """``torch.save`` into bytes (the launcher cannot return tensors themselves yet)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> Any:
    """Undo :func:`to_bytes`."""
    return torch.load(io.BytesIO(data), weights_only=True)


class _Run:
    """Everything one training run prepares."""

    def __init__(self, seed: int, project_dir: str, accumulation: int, loader_generator: bool = False) -> None:
        config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2)
        self.acc = Accelerator(cpu=True, project_config=config, gradient_accumulation_steps=accumulation)
        set_seed(seed, device_specific=True)  # each rank draws its own dropout masks
        data = torch.Generator().manual_seed(0)  # the data set is the same in every run
        x = torch.randn(40, 6, generator=data)
        y = x @ torch.randn(6, 2, generator=data)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
        generator = torch.Generator().manual_seed(1) if loader_generator else None
        loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, generator=generator)
        self.model, self.optimizer, self.loader, self.scheduler = self.acc.prepare(model, optimizer, loader, scheduler)
        self.counter = Counter()
        self.acc.register_for_checkpointing(self.counter)

    def train(self, max_batches: int | None = None) -> None:
        """One pass over the loader (what is left of the epoch after a resume), stopping after ``max_batches``."""
        for i, (x, y) in enumerate(self.loader):
            with self.acc.accumulate(self.model):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.acc.backward(loss)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad()
            self.counter.value += 1
            if max_batches is not None and i + 1 == max_batches:
                return

    def result(self) -> dict[str, Any]:
        """The parameters (on CPU) and the counters a resumed run must match."""
        params = {k: v.detach().cpu().clone() for k, v in self.acc.unwrap_model(self.model).state_dict().items()}
        return {"params": to_bytes(params), "counter": self.counter.value, "lr": self.optimizer.param_groups[0]["lr"],
                "epoch": self.loader.epoch, "draw": torch.rand(1).item()}


def straight(project_dir: str, epochs: int, accumulation: int, loader_generator: bool) -> dict[str, Any]:
    """``epochs`` epochs without interruption."""
    run = _Run(0, project_dir, accumulation, loader_generator)
    for _ in range(epochs):
        run.train()
    return run.result()


def first_part(project_dir: str, epochs: int, batches: int, accumulation: int, loader_generator: bool) -> str:
    """``epochs`` full epochs and ``batches`` batches of the next, then save_state."""
    run = _Run(0, project_dir, accumulation, loader_generator)
    for _ in range(epochs):
        run.train()
    if batches:
        run.train(max_batches=batches)
    return run.acc.save_state()


def resumed(project_dir: str, epochs: int, accumulation: int, loader_generator: bool) -> dict[str, Any]:
    """Rebuild everything (another seed, so nothing matches by chance), load_state, train up to ``epochs``."""
    run = _Run(999, project_dir, accumulation, loader_generator)
    run.acc.load_state()
    while run.loader.epoch < epochs:  # the loader knows its epoch; a mid-epoch resume finishes that epoch first
        run.train()
    return run.result()


def export_model(project_dir: str) -> dict[str, Any]:
    """Train a little, save_model; returns the path and the weights to compare."""
    run = _Run(0, project_dir, 1)
    run.train(max_batches=2)
    path = run.acc.save_model(run.model, f"{project_dir}/export")
    return {"path": path, "params": run.result()["params"]}
