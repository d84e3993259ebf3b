"""Background checkpoints (``save_state(async_save=True)``): how long the training loop stands still per save, and
how much slower its steps are while the writer runs. Run through ``python benchmarks/checkpoint.py --background``.

Two processes (gloo, CPU) train the model of :mod:`checkpoint` (``--size`` parameters in ``Linear(1024, 1024)``
blocks, AdamW), prepared plainly (DDP) or under FSDP. Each round, in an order that rotates between rounds:

- ``blocking``: ``save_state(path)``, the crash-safe blocking save and the baseline of the blocked-time ratio;
  ``blocking2``, the same again (the A/A control);
- ``background``: ``save_state(path, async_save=True)`` (the time the loop is blocked: the snapshot into CPU
  memory), then training steps, each timed, for as long as the writer runs, then ``wait_for_checkpoint()``;
- ``background nice0``: the same with the writer thread at the loop's CPU priority (``WRITER_NICENESS = 0``), to
  show what the lowered priority buys;
- ``steps``: the same number of training steps with no write in flight, the baseline of the step-time ratio;
  ``steps2``, the same again (the A/A control).

Every time is the slowest rank's (a barrier on either side). The page cache is flushed (``os.sync``) between
contenders, outside the clock, and each round's folders are deleted. Ratios are per round, printed as the median
with [min-max].
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from notebook_accel import Accelerator
from notebook_accel.checkpointing import background
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

BATCH = 8


def _prepared(engine: str, params: int, model: Callable[[int], torch.nn.Module]) -> tuple[Accelerator, Any, Any]:
    plugin = FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD", transformer_cls_names_to_wrap=["Block"]) \
        if engine == "fsdp" else None
    accelerator = Accelerator(fsdp_plugin=plugin)
    net = model(params)
    net, optimizer = accelerator.prepare(net, torch.optim.AdamW(net.parameters(), lr=1e-4))
    return accelerator, net, optimizer


def _train_step(accelerator: Accelerator, model: Any, optimizer: Any, width: int) -> float:
    """One optimizer step on a random batch; its seconds on this rank."""
    start = time.perf_counter()
    loss = model(torch.randn(BATCH, width)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return time.perf_counter() - start


def _slowest(seconds: float) -> float:
    """The largest of every rank's ``seconds``."""
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, seconds)
    return max(every)


def _blocked(action: Callable[[], Any]) -> float:
    """Seconds ``action`` takes on the slowest rank (a barrier before it)."""
    dist.barrier()
    start = time.perf_counter()
    action()
    return _slowest(time.perf_counter() - start)


def _flush() -> None:
    dist.barrier()
    if dist.get_rank() == 0:
        os.sync()
    dist.barrier()


def measure(engine: str, params: int, rounds: int, model: Callable[[int], torch.nn.Module],
            width: int) -> dict[str, Any]:
    """Worker body: rotate the contenders for ``rounds`` rounds (plus a warm-up); the times come back."""
    accelerator, net, optimizer = _prepared(engine, params, model)
    step = lambda: _train_step(accelerator, net, optimizer, width)  # noqa: E731
    step()
    root = [tempfile.mkdtemp(prefix="ckpt-bg-bench-") if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(root)
    times: dict[str, list[float]] = {k: [] for k in ("blocking", "blocking2", "background", "wait", "step during",
                                                      "step", "step2", "steps during", "background nice0",
                                                      "wait nice0", "step during nice0", "steps during nice0")}
    overlap = [3]  # steps that a background write took, measured in the warm-up; used for the step contenders

    def during(r: int, suffix: str = "") -> None:
        blocked = _blocked(lambda: accelerator.save_state(os.path.join(root[0], f"bg{suffix}-{r}"), async_save=True))
        spent: list[float] = []
        while True:
            spent.append(step())
            if not _slowest(0.0 if background.in_flight() is None else 1.0):  # every rank's writer is done
                break
        wait = _blocked(accelerator.wait_for_checkpoint)
        if not suffix:
            overlap[0] = len(spent)
        record(r, {f"background{suffix}": blocked, f"wait{suffix}": wait,
                   f"step during{suffix}": _slowest(statistics.mean(spent)), f"steps during{suffix}": float(len(spent))})

    def during_at_full_priority(r: int) -> None:
        niceness = background.WRITER_NICENESS
        background.WRITER_NICENESS = 0
        try:
            during(r, " nice0")
        finally:
            background.WRITER_NICENESS = niceness

    def steps_only(name: str) -> Callable[[int], None]:
        def run(r: int) -> None:
            spent = [step() for _ in range(overlap[0])]
            record(r, {name: _slowest(statistics.mean(spent))})
        return run

    def blocking(name: str) -> Callable[[int], None]:
        def run(r: int) -> None:
            record(r, {name: _blocked(lambda: accelerator.save_state(os.path.join(root[0], f"{name}-{r}")))})
        return run

    def record(r: int, values: dict[str, float]) -> None:
        if r:
            for k, v in values.items():
                times[k].append(v)

    contenders = [blocking("blocking"), during, steps_only("step"), blocking("blocking2"), steps_only("step2"),
                  during_at_full_priority]
    for r in range(rounds + 1):
        for run in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
            run(r)
            _flush()
        dist.barrier()
        if dist.get_rank() == 0:
            for name in os.listdir(root[0]):
                shutil.rmtree(os.path.join(root[0], name), ignore_errors=True)
    if dist.get_rank() == 0:
        shutil.rmtree(root[0], ignore_errors=True)
    return {"times": times, "threads": torch.get_num_threads()}


def report(engine: str, result: dict[str, Any], rounds: int, size_bytes: int) -> None:
    """The lines of one engine."""
    t = result["times"]

    def ratio(a: str, b: str) -> str:
        values = [x / y for x, y in zip(t[a], t[b])]
        return f"{statistics.median(values):.3f}x [{min(values):.3f}-{max(values):.3f}]"

    print(f"checkpoint background [{engine}]: 2 processes (gloo, CPU, {result['threads']} torch thread(s) each), "
          f"weights + AdamW {size_bytes / 2**20:.0f} MiB, {rounds} rotating rounds, batch {BATCH}")
    for name in ("blocking", "blocking2", "background", "wait", "step", "step2", "step during", "step during nice0"):
        print(f"  {name:<17} {statistics.median(t[name]):7.3f} s")
    print(f"  steps while a write runs: median {statistics.median(t['steps during']):.0f} (writer at full priority: "
          f"{statistics.median(t['steps during nice0']):.0f})")
    print(f"  blocked per save, background / blocking: {ratio('background', 'blocking')} (target <= 0.15x)")
    print(f"  A/A control, blocking2 / blocking: {ratio('blocking2', 'blocking')}")
    print(f"  step while writing / step without: {ratio('step during', 'step')} (target <= 1.10x)")
    print(f"  A/A control, step2 / step: {ratio('step2', 'step')}")
    print(f"  the same, the writer at the loop's priority (WRITER_NICENESS=0): step {ratio('step during nice0', 'step')}"
          f", blocked {ratio('background nice0', 'blocking')}")
