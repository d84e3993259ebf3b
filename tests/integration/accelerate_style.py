"""A training script written the way Hugging Face accelerate users write them (only the imports name our package).

It trains a small MLP classifier on generated data with gradient accumulation, clipping, a warm-up/decay LR
schedule, a shuffled loader, an exact evaluation with ``gather_for_metrics``, trackers, a checkpoint that is
saved and loaded back, and a model export. The main process writes a JSON summary to ``--output`` (and
``training_function`` returns it, so ``notebook_launcher`` hands it back to the caller).

Three ways to start it::

    notebook_launcher(training_function, args=(parse_args([...]),), num_processes=2)      # from a notebook
    notebook-accel launch --num_processes 2 accelerate_style.py --output r.json --project_dir d
    python accelerate_style.py --output r.json --project_dir d --gradient_accumulation_steps 2   # one process

Every line is valid accelerate code once the package name in the import lines is changed: the test suite checks
that with a textual rename, so keep every other mention of the package's name out of this file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator
from notebook_accel.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed

NUM_FEATURES = 8
NUM_CLASSES = 3
TRAIN_SIZE = 100  # 13 batches of 8: the last batch is short, so the sharded loader pads and the ranks stay even
EVAL_SIZE = 50  # not a multiple of the global batch: gather_for_metrics must drop the padding duplicates
BATCH_SIZE = 8
SEED = 42
CHECKPOINT_NAME = "epoch_0"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options. ``--mixed_precision`` and ``--gradient_accumulation_steps`` left out are left out of
    the ``Accelerator`` call too, so the launch config (or the default) decides them."""
    parser = argparse.ArgumentParser(description="accelerate-style training of a small MLP")
    parser.add_argument("--output", required=True, help="where the main process writes the JSON summary")
    parser.add_argument("--project_dir", required=True, help="folder for data cache, checkpoints, logs, export")
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"],
                        help="default: the launch config's")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=None, help="default: the launch config's")
    parser.add_argument("--num_epochs", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=0.05)
    return parser.parse_args(argv)


def make_datasets(cache_path: str) -> tuple[TensorDataset, TensorDataset, bool]:
    """Generated classification data (a random linear teacher), cached in ``cache_path``; the flag says
    whether this call built the cache."""
    built = not os.path.exists(cache_path)
    if built:
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(TRAIN_SIZE + EVAL_SIZE, NUM_FEATURES, generator=generator)
        teacher = torch.randn(NUM_FEATURES, NUM_CLASSES, generator=generator)
        labels = (features @ teacher).argmax(dim=-1)
        torch.save({"features": features, "labels": labels}, cache_path + ".tmp")
        os.replace(cache_path + ".tmp", cache_path)
    data = torch.load(cache_path, weights_only=True)
    features, labels = data["features"], data["labels"]
    return (TensorDataset(features[:TRAIN_SIZE], labels[:TRAIN_SIZE]),
            TensorDataset(features[TRAIN_SIZE:], labels[TRAIN_SIZE:]), built)


def build_model() -> nn.Module:
    """A two-layer MLP with dropout."""
    return nn.Sequential(nn.Linear(NUM_FEATURES, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, NUM_CLASSES))


def linear_warmup_decay(num_warmup_steps: int, num_training_steps: int) -> Any:
    """LR factor: linear warm-up, then linear decay to zero."""
    def factor(step: int) -> float:
        if step < num_warmup_steps:
            return (step + 1) / (num_warmup_steps + 1)
        remaining = num_training_steps - step
        return max(0.0, remaining / max(1, num_training_steps - num_warmup_steps))
    return factor


def parameter_summary(model: nn.Module) -> tuple[str, list[float]]:
    """A sha256 of the parameters' float32 bytes (in state_dict order) and the parameters as a flat list."""
    tensors = [t.detach().float().cpu().reshape(-1) for t in model.state_dict().values()]
    flat = torch.cat(tensors)
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest(), flat.tolist()


def evaluate(accelerator: Accelerator, model: nn.Module, eval_loader: DataLoader) -> tuple[int, int]:
    """(correct predictions, items seen) over the whole eval set, gathered from every process."""
    model.eval()
    correct, seen = 0, 0
    for features, labels in eval_loader:
        with torch.no_grad():
            logits = model(features)
        predictions, references = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels))
        correct += int((predictions == references).sum().item())
        seen += int(references.numel())
    model.train()
    return correct, seen


def train_one_epoch(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer,
                    lr_scheduler: Any, train_loader: DataLoader, global_step: int) -> tuple[float, int, int]:
    """One pass over ``train_loader``; returns (mean loss over all processes, global step, optimizer steps)."""
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    epoch_loss = torch.zeros((), device=accelerator.device)
    updates = 0
    for features, labels in train_loader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(features), labels)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)
                updates += 1
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        epoch_loss += loss.detach().float()
        global_step += 1
        accelerator.log({"train_loss": loss.item(), "lr": lr_scheduler.get_last_lr()[0]}, step=global_step)
    mean_loss = accelerator.reduce(epoch_loss / len(train_loader), reduction="mean")
    return float(mean_loss.item()), global_step, updates


def training_function(args: argparse.Namespace) -> dict[str, Any]:
    """Train, evaluate, checkpoint and export; returns the summary (also written to ``args.output``)."""
    accelerator_kwargs: dict[str, Any] = {}
    if args.mixed_precision is not None:
        accelerator_kwargs["mixed_precision"] = args.mixed_precision
    if args.gradient_accumulation_steps is not None:
        accelerator_kwargs["gradient_accumulation_steps"] = args.gradient_accumulation_steps
    accelerator = Accelerator(
        log_with="jsonl",
        project_config=ProjectConfiguration(project_dir=args.project_dir,
                                            logging_dir=os.path.join(args.project_dir, "logs")),
        dataloader_config=DataLoaderConfiguration(even_batches=True),
        **accelerator_kwargs,
    )
    accelerator.init_trackers("mlp", config={"lr": args.learning_rate, "epochs": args.num_epochs,
                                             "batch_size": BATCH_SIZE})
    set_seed(SEED)

    with accelerator.main_process_first():  # the main process builds the cache, the others then read it
        train_set, eval_set, built_cache = make_datasets(os.path.join(args.project_dir, "data.pt"))
    cache_builders = accelerator.gather_object([built_cache])
    train_loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=BATCH_SIZE, shuffle=False)

    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    updates_per_epoch = math.ceil(len(train_loader) / accelerator.gradient_accumulation_steps)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_warmup_decay(2, updates_per_epoch * args.num_epochs))
    model, optimizer, train_loader, eval_loader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, lr_scheduler)

    checkpoint_dir = os.path.join(args.project_dir, "checkpoints", CHECKPOINT_NAME)
    saved_checksum = ""
    global_step, optimizer_steps = 0, 0
    for epoch in range(args.num_epochs):
        mean_loss, global_step, updates = train_one_epoch(accelerator, model, optimizer, lr_scheduler,
                                                          train_loader, global_step)
        optimizer_steps += updates
        correct, seen = evaluate(accelerator, model, eval_loader)
        accelerator.print(f"epoch {epoch}: loss {mean_loss:.4f}, eval accuracy {correct / seen:.3f}")
        accelerator.log({"eval_accuracy": correct / seen}, step=global_step)
        if epoch == 0:
            accelerator.save_state(checkpoint_dir)
            saved_checksum, _ = parameter_summary(accelerator.unwrap_model(model))

    accelerator.wait_for_everyone()
    unwrapped = accelerator.unwrap_model(model)
    checksum, parameters = parameter_summary(unwrapped)
    final_lr = lr_scheduler.get_last_lr()[0]
    scheduler_steps = lr_scheduler.state_dict()["last_epoch"]
    export_dir = os.path.join(args.project_dir, "export")
    accelerator.save_model(model, export_dir)
    accelerator.save(unwrapped.state_dict(), os.path.join(args.project_dir, "final_state_dict.pt"))

    accelerator.load_state(checkpoint_dir)  # back to the end of epoch 0
    restored_checksum, _ = parameter_summary(accelerator.unwrap_model(model))
    accelerator.end_training()

    summary = {
        "final_loss": mean_loss,
        "eval_accuracy": correct / seen,
        "eval_items": seen,
        "world_size": accelerator.num_processes,
        "cache_built_by_rank": cache_builders,
        "distributed_type": str(accelerator.distributed_type),
        "mixed_precision": str(accelerator.mixed_precision),
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
        "batches_per_epoch": len(train_loader),
        "optimizer_steps": optimizer_steps,
        "final_lr": final_lr,
        "scheduler_steps": scheduler_steps,
        "checksum": checksum,
        "parameters": parameters,
        "checkpoint_restored": restored_checksum == saved_checksum and saved_checksum != checksum,
        "exported": sorted(os.listdir(export_dir)) if accelerator.is_main_process else [],
    }
    if accelerator.is_main_process:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(summary, f)
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point for ``python accelerate_style.py`` and the launchers."""
    training_function(parse_args(argv))


if __name__ == "__main__":
    main()
