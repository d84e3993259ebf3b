"""Background checkpoints (``save_state(async_save=True)``): how long the training loop stands still per save, and
how much slower its steps are while the writer runs. Run through ``python benchmarks/checkpoint.py --background``.

Two processes (gloo, CPU) train the model of :mod:`checkpoint` (``--size`` parameters in ``Linear(1024, 1024)``
blocks, AdamW), prepared plainly (DDP) or under FSDP. Each round runs these contenders, in an order that rotates
between rounds:

- ``blocking``: ``save_state(path)``, the crash-safe blocking save and the baseline of the blocked-time ratio;
  ``blocking2``, the same again (the A/A control);
- ``background <scheduling>``: a sandwich of training steps: ``n`` steps, then ``save_state(path, async_save=True)``
  (its time is the time the loop is blocked) and training steps for as long as the writer runs, then
  ``wait_for_checkpoint()`` and ``n`` steps again. The ratio is the mean step while the writer ran over the mean
  step of the steps around it (after two unmeasured steps), so a machine that speeds up or slows down during the
  round moves both. One such
  contender per writer scheduling (``background.WRITER_SCHEDULING``): ``idle`` (the default, ``SCHED_IDLE``),
  ``nice`` (nice +10, the previous default) and ``normal`` (the loop's priority: what the 2 cores cost);
- ``A/A``: the same sandwich with ``n`` more steps in the middle (each followed by the same exchange as the
  writer's middle steps: is every writer done?), the control of the step-time ratio.

``n`` is the number of steps the ``idle`` writer took in the warm-up round (at least 6, at most ``MAX_STEPS``).
Every time is the slowest rank's (a barrier on either side). The page cache is flushed (``os.sync``) between
contenders, outside the clock, and each round's folders are deleted. Ratios are per round, printed as the median
with the interquartile range [q1-q3] and the extremes {min-max}.
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
MAX_STEPS = 30  # the most steps of a sandwich's slices; a writer not done by then is waited for (its "wait")
SCHEDULINGS = ("idle", "nice", "normal")  # every writer scheduling ``--writers`` may name; "idle" always runs


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
            width: int, writers: tuple[str, ...] = SCHEDULINGS) -> dict[str, Any]:
    """Worker body: rotate the contenders for ``rounds`` rounds (plus a warm-up); the times come back.
    ``writers``: the writer schedulings to measure besides ``idle``."""
    others = tuple(s for s in writers if s != "idle")
    accelerator, net, optimizer = _prepared(engine, params, model)
    root = [tempfile.mkdtemp(prefix="ckpt-bg-bench-") if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(root)
    times: dict[str, list[float]] = {"blocking": [], "blocking2": [], "A/A": [], "A/A steps": []}
    for s in ("idle",) + others:
        times |= {f"blocked {s}": [], f"wait {s}": [], f"step ratio {s}": [], f"steps during {s}": [],
                  f"step during {s}": [], f"step around {s}": []}
    outer = [6]

    def steps(n: int) -> list[float]:
        return [_train_step(accelerator, net, optimizer, width) for _ in range(n)]

    def synced_steps(n: int) -> list[float]:
        """``n`` steps, each followed by the exchange the writer's middle makes (is every writer done?)."""
        spent = []
        for _ in range(n):
            spent.append(_train_step(accelerator, net, optimizer, width))
            _slowest(0.0)
        return spent

    def sandwich(middle: Callable[[], list[float]]) -> tuple[float, float, list[float]]:
        """(mean step of the middle, mean step of the outer slices, the middle's steps), the slowest rank's; two
        unmeasured steps first (the first steps after a contender are slower)."""
        steps(2)
        before = steps(outer[0])
        inner = middle()
        after = steps(outer[0])
        return (_slowest(statistics.mean(inner)), _slowest(statistics.mean(before + after)), inner)

    def with_writer(scheduling: str) -> Callable[[int], None]:
        def run(r: int) -> None:
            blocked: list[float] = []

            def middle() -> list[float]:
                previous = getattr(background, "WRITER_SCHEDULING", "idle")  # (a tree from before it: nice +10)
                background.WRITER_SCHEDULING = scheduling  # type: ignore[assignment]
                try:
                    start = time.perf_counter()
                    accelerator.save_state(os.path.join(root[0], f"bg-{scheduling}-{r}"), async_save=True)
                    blocked.append(time.perf_counter() - start)
                    spent: list[float] = []
                    while True:
                        spent.append(_train_step(accelerator, net, optimizer, width))
                        if not _slowest(0.0 if background.in_flight() is None else 1.0) or len(spent) >= MAX_STEPS:
                            return spent  # every writer is done (or the rest is the wait's)
                finally:
                    background.WRITER_SCHEDULING = previous

            during, around, inner = sandwich(middle)
            wait = _blocked(accelerator.wait_for_checkpoint)
            if scheduling == "idle" and not r:
                outer[0] = max(6, min(MAX_STEPS, len(inner)))
            record(r, {f"blocked {scheduling}": _slowest(blocked[0]), f"wait {scheduling}": wait,
                       f"step during {scheduling}": during, f"step around {scheduling}": around,
                       f"step ratio {scheduling}": during / around, f"steps during {scheduling}": float(len(inner))})
        return run

    def control(r: int) -> None:
        during, around, inner = sandwich(lambda: synced_steps(outer[0]))
        record(r, {"A/A": during / around, "A/A steps": float(len(inner))})

    def blocking(name: str) -> Callable[[int], None]:
        def run(r: int) -> None:
            record(r, {name: _blocked(lambda: accelerator.save_state(os.path.join(root[0], f"{name}-{r}")))})
        return run

    def record(r: int, values: dict[str, float]) -> None:
        if r:
            for k, v in values.items():
                times[k].append(v)

    steps(2)
    contenders = [blocking("blocking"), with_writer("idle"), control, blocking("blocking2")] + \
        [with_writer(s) for s in others]
    for r in range(rounds + 1):
        order = contenders if not r else contenders[r % len(contenders):] + contenders[:r % len(contenders)]
        for run in order:  # the warm-up round starts with the idle writer: it sets the sandwiches' size
            run(r)
            _flush()
        dist.barrier()
        if dist.get_rank() == 0:
            print(f"round {r} of {rounds} done ({outer[0]} steps around each write)", flush=True)
            for name in os.listdir(root[0]):
                shutil.rmtree(os.path.join(root[0], name), ignore_errors=True)
    if dist.get_rank() == 0:
        shutil.rmtree(root[0], ignore_errors=True)
    return {"times": times, "threads": torch.get_num_threads(), "outer": outer[0], "writers": ("idle",) + others}


def _spread(values: list[float]) -> str:
    """``1.031x [0.990-1.070] {0.950-1.200}``: median, interquartile range, extremes."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (values[0],) * 3
    return (f"{statistics.median(values):.3f}x [{q1:.3f}-{q3:.3f}] {{{min(values):.3f}-{max(values):.3f}}}")


def report(engine: str, result: dict[str, Any], rounds: int, size_bytes: int) -> None:
    """The lines of one engine."""
    t = result["times"]

    def ratio(a: str, b: str) -> str:
        return _spread([x / y for x, y in zip(t[a], t[b])])

    print(f"checkpoint background [{engine}]: 2 processes (gloo, CPU, {result['threads']} torch thread(s) each), "
          f"weights + AdamW {size_bytes / 2**20:.0f} MiB, {rounds} rotating rounds, batch {BATCH}, "
          f"{result['outer']} steps before and after each write")
    print(f"  blocking save {statistics.median(t['blocking']):.3f} s; median step "
          f"{statistics.median(t['step around idle']):.4f} s")
    for s in result["writers"]:
        print(f"  writer {s:<6}: blocked {statistics.median(t[f'blocked {s}']):.3f} s, "
              f"{statistics.median(t[f'steps during {s}']):.0f} steps while it wrote, then a wait of "
              f"{statistics.median(t[f'wait {s}']):.3f} s")
    print(f"  blocked per save, background / blocking: {ratio('blocked idle', 'blocking')} (target <= 0.15x)")
    print(f"  A/A control, blocking2 / blocking: {ratio('blocking2', 'blocking')}")
    print(f"  step while writing / steps around it (writer SCHED_IDLE): {_spread(t['step ratio idle'])} "
          "(target <= 1.10x)")
    print(f"  A/A control, steps in the middle / steps around them: {_spread(t['A/A'])}")
    for s in result["writers"][1:]:
        print(f"  the same, writer {s}: step {_spread(t[f'step ratio {s}'])}, blocked "
              f"{ratio(f'blocked {s}', 'blocking')}")
