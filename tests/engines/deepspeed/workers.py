"""Worker bodies for the DeepSpeed tests: the FSDP tests' training function and model under each ZeRO stage.

Each runs on every rank under ``notebook_launcher``; rank 0's return value (plain data) reaches the test.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator, DataLoaderConfiguration
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.utils import set_seed
from tests.engines.fsdp.workers import TinyNet, attempt_load, dataset, steps


def _accelerator(options: dict[str, Any] | None, accumulation: int = 1) -> Accelerator:
    plugin = DeepSpeedPlugin(**options) if options is not None else None
    return Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=accumulation,
                       dataloader_config=DataLoaderConfiguration(data_seed=3))


def _prepared(accelerator: Accelerator, n: int = 80, aux: bool = False) -> tuple[Any, Any, Any, Any]:
    set_seed(0)
    model = TinyNet(aux=aux)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    loader = DataLoader(dataset(n), batch_size=4, shuffle=True)
    return accelerator.prepare(model, optimizer, loader, scheduler)


def train(options: dict[str, Any] | None, accumulation: int = 1, save_dir: str | None = None) -> dict[str, Any]:
    """10 optimizer steps of TinyNet (clipped at 0.5, a StepLR schedule); losses, weights and what prepare made.

    ``options=None`` without a launch config trains with plain DDP (the baseline); DeepSpeed clips to
    ``gradient_clipping`` inside its step, so DeepSpeed runs pass ``gradient_clipping=0.5``.
    """
    accelerator = _accelerator(options, accumulation)
    model, optimizer, loader, scheduler = _prepared(accelerator, 80 * accumulation)
    losses, lrs, gathered_rows = [], [], 0
    for x, y in loader:
        with accelerator.accumulate(model):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            accelerator.backward(loss)
            if accelerator.engine.name != "DEEPSPEED" and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
        lrs.append(scheduler.get_last_lr()[0])
        gathered_rows += accelerator.gather(out.detach()).shape[0]
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    saved = accelerator.save_model(model, save_dir) if save_dir is not None else None
    plugin = accelerator.deepspeed_plugin
    return {"losses": losses, "lrs": lrs, "weights": weights, "type": accelerator.distributed_type.value,
            "engine": accelerator.engine.name, "gathered_rows": gathered_rows, "saved": saved,
            "unwrapped": type(accelerator.unwrap_model(model)).__name__,
            "norm": None if accelerator.engine.name != "DEEPSPEED" else
            float(accelerator.clip_grad_norm_(model.parameters(), 0.5)),
            "stage": None if plugin is None else plugin.zero_stage,
            "config": None if plugin is None else accelerator.engine.wrapped.config}


def resume(options: dict[str, Any], directory: str, load: bool, before: int = 4, after: int = 4,
           kill_during_save: bool = False, aux: bool = False) -> dict[str, Any]:
    """Exact resume: train ``before`` steps and save (``load=False``) or load that checkpoint (``load=True``),
    then train ``after`` more. ``kill_during_save`` makes rank 1 die inside DeepSpeed's save_checkpoint; ``aux``
    adds a layer to the model."""
    accelerator = _accelerator(options)
    model, optimizer, loader, _ = _prepared(accelerator, aux=aux)
    batches = iter(loader)
    if load:
        accelerator.load_state(directory)
    else:
        steps(accelerator, model, optimizer, batches, before, clip=False)
        set_seed(123 + accelerator.process_index)
        if kill_during_save and accelerator.process_index == 1:
            real = model.save_checkpoint

            def die(*args: Any, **kwargs: Any) -> None:
                real(*args, **kwargs)
                os._exit(3)

            model.save_checkpoint = die
        accelerator.save_state(directory)
    losses = steps(accelerator, model, optimizer, batches, after, clip=False)
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    files = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    return {"losses": losses, "weights": weights, "files": files, "random": torch.rand(1).item()}


def load_refused(options: dict[str, Any], directory: str, trained: int = 0, **load_options: Any) -> dict[str, Any]:
    """Try to load ``directory`` (after ``trained`` steps) with other options; the error, and whether the weights
    or the ZeRO optimizer's state (its fp32 partitions, its optimizer's moments) changed on any rank."""
    accelerator = _accelerator(options)
    model, optimizer, loader, _ = _prepared(accelerator)
    steps(accelerator, model, optimizer, iter(loader), trained, clip=False)
    return attempt_load(accelerator, model, directory, model.optimizer, **load_options)
