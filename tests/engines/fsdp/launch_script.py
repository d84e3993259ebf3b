"""Run by ``notebook-accel launch`` in the FSDP CLI test: a plain Accelerator() picks FSDP up from the launch."""

from __future__ import annotations

import sys

import torch
from torch.distributed.tensor import DTensor

from notebook_accel import Accelerator
from notebook_accel.utils import set_seed
from tests.engines.fsdp.workers import TinyNet


def main() -> int:
    """Three steps; one line per rank: the distributed type, the strategy and the share of parameters held."""
    accelerator = Accelerator()
    set_seed(0)
    model = TinyNet()
    full = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(3):
        accelerator.backward(model(torch.randn(4, 8)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    held = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in model.parameters())
    plugin = accelerator.fsdp_plugin
    sys.stdout.write(f"rank {accelerator.process_index}: {accelerator.distributed_type.value} "
                     f"{plugin.sharding_strategy if plugin else None} held={held / full:.2f}\n")
    sys.stdout.flush()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
