"""Run by ``notebook-accel launch`` in the DeepSpeed CLI test: a plain Accelerator() picks DeepSpeed up from the
launch (``NOTEBOOK_ACCEL_DEEPSPEED``)."""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader

from notebook_accel import Accelerator
from notebook_accel.utils import set_seed
from tests.engines.fsdp.workers import TinyNet, dataset


def main() -> int:
    """Three steps; one line per rank: the distributed type, the engine and the ZeRO stage."""
    accelerator = Accelerator()
    set_seed(0)
    model = TinyNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(24), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    plugin = accelerator.deepspeed_plugin
    sys.stdout.write(f"rank {accelerator.process_index}: {accelerator.distributed_type.value} "
                     f"{accelerator.engine.name} stage={plugin.zero_stage if plugin else None}\n")
    sys.stdout.flush()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
