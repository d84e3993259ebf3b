"""Worker bodies for the transformers Trainer tests: a tiny random BERT (config only, no download) trained by
``Trainer`` on an in-memory dataset that records which items each rank fetched."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

ITEMS = 32
BATCH = 4  # per device
_fetched: list[int] = []


class Recorded(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """ITEMS token sequences with a label; remembers every index fetched in this process."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 50, (ITEMS, 8), generator=generator)

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, index: int) -> dict[str, Any]:
        _fetched.append(int(index))
        return {"input_ids": self.ids[index], "labels": index % 2}


def tiny_bert() -> Any:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    return BertForSequenceClassification(config)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def train(output_dir: str, ours_first: bool = False) -> dict[str, Any]:
    """Train one epoch; rank 0 returns what both ranks saw and hold, gathered over the Trainer's group.

    ``ours_first``: make notebook-accel's Accelerator (and so the process group) before the Trainer's accelerate.
    """
    from transformers import Trainer, TrainingArguments

    if ours_first:
        from notebook_accel import Accelerator

        Accelerator()
    group = dist.group.WORLD if dist.is_initialized() else None
    model = tiny_bert()
    initial = _flat(model)
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=BATCH, num_train_epochs=1,
                             logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", learning_rate=1e-2)
    trainer = Trainer(model=model, args=args, train_dataset=Recorded())
    trainer.train()
    weights = _flat(model)
    both = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(both, weights)  # the Trainer's own process group, joined by both ranks
    fetched: list[list[int]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(fetched, sorted(_fetched))
    return {
        "world_size": trainer.args.world_size,
        "same_group": group is None or group is dist.group.WORLD,
        "fetched": fetched,
        "same_weights": all(torch.equal(w, both[0]) for w in both),
        "moved": float((weights - initial).abs().max()),
        "losses": [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h],
        "max_steps": trainer.state.max_steps,
        "callbacks": [type(c).__name__ for c in trainer.callback_handler.callbacks],
    }


def train_alone(output_dir: str) -> dict[str, Any]:
    """One process (in the kernel): train, return the logged losses and the Trainer's callbacks."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=BATCH, max_steps=3,
                             logging_steps=1, report_to="none", use_cpu=True, save_strategy="no")
    trainer = Trainer(model=tiny_bert(), args=args, train_dataset=Recorded())
    trainer.train()
    return {
        "losses": [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h],
        "callbacks": [type(c).__name__ for c in trainer.callback_handler.callbacks],
    }
