"""Worker bodies for the 2-process save_model tests (module level, so the launcher can run them)."""

from __future__ import annotations

import os
from typing import Any

import torch

from notebook_accel import Accelerator
from notebook_accel.checkpointing import CheckpointError


def rank_model(rank: int) -> torch.nn.Linear:
    """A small model whose weights say which rank made it."""
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.fill_(float(rank + 1))
        model.bias.fill_(-float(rank + 1))
    return model


def save_from_every_rank(directory: str) -> list[dict[str, Any]]:
    """Every rank calls save_model with its own weights; returns what each rank saw right after the call."""
    acc = Accelerator(cpu=True)
    path = acc.save_model(rank_model(acc.process_index), directory, max_shard_size=40)
    seen = {"rank": acc.process_index, "path": path, "files_after_call": sorted(os.listdir(directory))}
    return acc.gather_object(seen)


def main_process_fails(directory: str) -> list[str]:
    """The main process cannot write (its target is a file); every rank must raise the same error."""
    acc = Accelerator(cpu=True)
    target = os.path.join(directory, "rank0-cannot-write")
    if acc.is_main_process:
        open(target, "w").close()  # a file where the directory should be
    acc.wait_for_everyone()
    try:
        acc.save_model(rank_model(acc.process_index), target)
    except CheckpointError as e:
        return acc.gather_object(str(e))
    raise AssertionError("save_model into a file path did not raise")
