"""Worker bodies for the real multi-process tests (module-level so they are easy to read and reuse).

Each function runs on every rank under ``notebook_launcher`` (or in-process for one process), checks what it
can with plain asserts, and returns plain data (rank 0's return value reaches the test).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, DataLoaderConfiguration, GradScalerKwargs
from notebook_accel.ops import CollectiveShapeError
from notebook_accel.utils import set_seed


def regression_data(n: int = 24, seed: int = 0) -> TensorDataset:
    """A small deterministic regression dataset."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def train(batch_size: int, accumulation: int = 1, n_items: int = 24, shuffle: bool = False,
          epochs: int = 1, mixed_precision: str = "no", with_scheduler: bool = False) -> dict[str, Any]:
    """Train a tiny MLP for ``epochs`` epochs; return the parameters, sync flags, losses and lrs."""
    set_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=accumulation, mixed_precision=mixed_precision,
                              dataloader_config=DataLoaderConfiguration(data_seed=7))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    loader = DataLoader(regression_data(n_items), batch_size=batch_size, shuffle=shuffle)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    syncs, losses, lrs = [], [], []
    for _ in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                if with_scheduler:
                    scheduler.step()
                optimizer.zero_grad()
            syncs.append(accelerator.sync_gradients)
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
            lrs.append(scheduler.get_last_lr()[0])
    params = [p.detach().tolist() for p in accelerator.unwrap_model(model).parameters()]  # plain data
    return {"params": params, "syncs": syncs, "losses": losses, "lrs": lrs, "steps_per_epoch": len(loader),
            "type": accelerator.distributed_type.value, "n": accelerator.num_processes}


def data_and_collectives() -> dict[str, Any]:
    """even_batches example, exact gather_for_metrics, collectives, helpers, shape-mismatch error."""
    accelerator = Accelerator()
    rank, n = accelerator.process_index, accelerator.num_processes
    out: dict[str, Any] = {"n": n, "type": accelerator.distributed_type.value}
    # accelerate's documented example: range(21), batch 3
    loader = accelerator.prepare(DataLoader(torch.arange(21), batch_size=3))
    batches, gathered, objects = [], [], []
    for batch in loader:
        batches.append(batch.tolist())
        gathered.append(accelerator.gather_for_metrics(batch))
        objects += accelerator.gather_for_metrics([f"item{int(i)}" for i in batch])
    out["batches_per_rank"] = accelerator.gather_object([batches])
    out["gathered"] = torch.cat(gathered).tolist()
    out["objects"] = objects
    out["len"] = len(loader)
    # a dataset with a short last batch, nested (dict) batches
    data = [{"x": torch.tensor([float(i)]), "i": i} for i in range(20)]
    nested = accelerator.prepare(DataLoader(data, batch_size=3))
    seen = [accelerator.gather_for_metrics(b)["i"] for b in nested]
    out["nested"] = torch.cat(seen).tolist()
    # collectives
    t = torch.tensor([float(rank + 1)])
    out["sum"] = accelerator.reduce(t).item()
    out["mean"] = accelerator.reduce(t, "mean").item()
    out["max"] = accelerator.reduce({"a": t}, "max")["a"].item()
    out["broadcast"] = accelerator.broadcast(torch.tensor([rank * 10 + 5])).tolist()
    out["scalar_gather"] = accelerator.gather(torch.tensor(rank)).tolist()
    out["uneven_gather"] = accelerator.gather(torch.arange(rank + 1)).tolist()
    padded = accelerator.pad_across_processes(torch.ones(1, rank + 1), dim=1, pad_index=-1)
    out["padded"] = accelerator.gather(padded).tolist()
    out["objects_gathered"] = accelerator.gather_object([rank, "x"])
    with accelerator.split_between_processes(list(range(5)), apply_padding=True) as part:
        out["split"] = accelerator.gather_object([part])
    try:
        accelerator.gather(torch.zeros(2, rank + 2))  # second dimension differs across ranks
        out["mismatch"] = "no error"
    except CollectiveShapeError as e:
        out["mismatch"] = str(e)
    many = [torch.full((1, 1), float(rank)) for _ in range(60)]  # signature too long: the object fallback
    out["many"] = [t.flatten().tolist() for t in accelerator.gather(many)[:2]]
    try:
        accelerator.pad_across_processes(torch.zeros([2] * (rank + 1)))  # 1-d on rank 0, 2-d on rank 1
        out["pad_mismatch"] = "no error"
    except CollectiveShapeError as e:
        out["pad_mismatch"] = str(e)
    calls: list[int] = []
    accelerator.on_main_process(lambda: calls.append(1))()
    accelerator.on_process(process_index=n - 1)(lambda: calls.append(2))()
    out["calls"] = accelerator.gather_object([calls])
    if accelerator.is_last_process:
        accelerator.set_trigger()
    out["trigger"] = (accelerator.check_trigger(), accelerator.check_trigger())  # seen everywhere, then reset
    accelerator.wait_for_everyone()
    return out


def mixed_precision_losses() -> dict[str, Any]:
    """Same model and batches in fp32, bf16 and fp16; losses, output dtypes and fp16 skip behaviour."""
    out: dict[str, Any] = {}
    for mode in ("no", "bf16", "fp16"):
        result = train(batch_size=4, mixed_precision=mode, n_items=16)
        out[mode] = result["losses"]
    accelerator = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    y = model(torch.ones(2, 4, device=accelerator.device))
    out["fp16_out_dtype"] = str(y.dtype)
    before = [p.detach().clone() for p in model.parameters()]
    accelerator.backward(y.sum() * float("inf"))
    optimizer.step()
    out["skipped"] = accelerator.optimizer_step_was_skipped
    out["unchanged"] = all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    optimizer.zero_grad()
    accelerator.backward(model(torch.ones(2, 4)).sum())
    norm = accelerator.clip_grad_norm_(model.parameters(), 1e-3)
    optimizer.step()
    out["norm_unscaled"] = float(norm) < 100.0  # ~4.5 unscaled, ~2300 if clipping saw the scaled gradients
    out["skipped_after"] = accelerator.optimizer_step_was_skipped
    return out


def loader_resume(stop_after: int, with_generator: bool = False) -> dict[str, Any]:
    """Three epochs of a shuffled loader, and a second loader resumed from the first's mid-epoch-1 state
    (the shuffle drawn from a seeded generator of the user's when ``with_generator``)."""
    accelerator = Accelerator()
    dataset = torch.arange(22)

    def build() -> DataLoader:  # type: ignore[type-arg]
        generator = torch.Generator().manual_seed(5) if with_generator else None
        return DataLoader(dataset, batch_size=3, shuffle=True, generator=generator)

    loader = accelerator.prepare(build())
    reference: list[list[list[int]]] = []
    saved: dict[str, Any] = {}
    for epoch in range(3):
        reference.append([])
        for i, batch in enumerate(loader):
            reference[-1].append(batch.tolist())
            if epoch == 1 and i + 1 == stop_after:
                saved = loader.state_dict()
    torch.manual_seed(1234 + accelerator.process_index)  # the resumed loader must not depend on the RNG
    resumed = accelerator.prepare(build())
    resumed.load_state_dict(saved)
    rest = [b.tolist() for b in resumed]
    after = [b.tolist() for b in resumed]
    seeds = accelerator.gather_object([loader.seed])
    return {"reference": reference, "rest": rest, "after": after, "saved": saved, "seeds": seeds,
            "all_reference": accelerator.gather_object([reference])}


def train_with_generator(batch_size: int, epochs: int = 3) -> dict[str, Any]:
    """accelerate's "N processes equal 1 with the same global batch" check, each rank seeded differently and the
    shuffle driven by the DataLoader's own seeded generator; returns the parameters and every rank's batches."""
    accelerator = Accelerator()
    torch.manual_seed(100 + accelerator.process_index)  # the global RNG differs between ranks
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.1, -0.2, 0.3, 0.4]]))
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = regression_data(24)
    indexed = TensorDataset(torch.arange(24), *data.tensors)
    loader = DataLoader(indexed, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(42))
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seen: list[list[int]] = []
    for _ in range(epochs):
        for ids, x, y in loader:
            seen.append(ids.tolist())
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    params = [p.detach().tolist() for p in accelerator.unwrap_model(model).parameters()]
    return {"params": params, "batches": accelerator.gather_object([seen])}


def launch_choices() -> dict[str, Any]:
    """What an Accelerator built with no arguments picks up from the launch, and a second one in the same process."""
    first = Accelerator()
    second = Accelerator(mixed_precision="no")  # shares the process group the first one formed
    total = second.reduce(torch.ones(1)).item()
    return {"mp": first.mixed_precision, "steps": first.gradient_accumulation_steps,
            "type": first.distributed_type.value, "second_mp": second.mixed_precision, "total": total,
            "scaler": first.scaler is not None}


def both_ranks_report(steps: int = 150) -> int:
    """Every rank prints, walks a prepared DataLoader (progress), and the main process logs a curve; 40 ms a step."""
    import time

    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(torch.arange(float(2 * steps)), batch_size=1))
    for step, batch in enumerate(loader):
        print(f"rank {accelerator.process_index} saw {int(batch.item())}", flush=True)
        accelerator.log({"loss": 1.0 / (step + 1)}, step=step)
        time.sleep(0.04)
    return accelerator.num_processes
