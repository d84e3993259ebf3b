"""Worker bodies that hang in known places, for the stall reports' real launches. Each line a report should name
ends with a ``# <name>`` marker that the tests look up (:func:`line_of`)."""

from __future__ import annotations

import inspect
import time

import torch


def line_of(marker: str) -> int:
    """The line of this file that ends with ``# <marker>``."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()  # type: ignore[arg-type]
    return next(i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


def one_sided(collective: str, late: int) -> None:
    """Every rank but ``late`` calls ``collective`` (``"reduce"`` or ``"wait_for_everyone"``) through the
    Accelerator; rank ``late`` sleeps in its own code and never comes."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    if accelerator.process_index != late:
        if collective == "reduce":
            accelerator.reduce(torch.ones(1))  # reduce
        else:
            accelerator.wait_for_everyone()  # barrier
    time.sleep(120)  # sleep


def ddp_rank_stops_stepping() -> None:
    """DDP training where rank 1 stops after 3 steps (it sleeps): rank 0's next backward waits in DDP's gradient
    all-reduce for it."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(8, 1))
    for _ in range(3 if accelerator.process_index == 1 else 1000):
        loss = model(torch.randn(4, 8)).sum()
        accelerator.backward(loss)  # backward
    time.sleep(120)  # stopped


def one_long_call(seconds: float) -> int:
    """Compute for about ``seconds`` in one C call that holds the GIL all along (the stall watch cannot even run
    meanwhile): a rank slow in its own work, not a stalled one."""
    start = time.perf_counter()
    sum(range(2_000_000))
    n = int(2_000_000 * seconds / max(time.perf_counter() - start, 1e-6))
    return sum(range(n)) & 1


def one_long_torch_call(seconds: float) -> int:
    """Compute for ``seconds`` or somewhat less in one torch call, the GIL released (the stall watch runs and sees
    the same place all along, with the process's CPU busy): a rank slow in its own work, not a stalled one."""
    torch.linalg.eigvals(torch.randn(64, 64))  # the first call's set-up, out of the timing
    start = time.perf_counter()
    torch.linalg.eigvals(torch.randn(500, 500))
    n = int(500 * (seconds / max(time.perf_counter() - start, 1e-6)) ** (1 / 3))
    return int(torch.linalg.eigvals(torch.randn(n, n)).numel())
