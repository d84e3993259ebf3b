"""Worker bodies for the partial-collective tests: a collective that only the main process calls."""

from __future__ import annotations

import time

import torch

from notebook_accel import Accelerator

GATHER_LINE = 18  # the line of accelerator.gather below: the error must name it


def gather_on_main_only() -> str:
    accelerator = Accelerator()
    t = torch.ones(2) * accelerator.process_index
    if accelerator.is_main_process:
        accelerator.gather(t)
    return "done"


def main_waits_forever() -> str:
    """Rank 0 stands in for a collective that never completes (as under nccl); rank 1 returns."""
    accelerator = Accelerator()
    if accelerator.is_main_process:
        time.sleep(600)
    return "done"
