"""One epoch of a prepared DataLoader against a plain DataLoader over a ``DistributedSampler``.

Two processes (forked by ``notebook_launcher``, gloo on CPU, with the event channel a launched run has) each read
one epoch of the same small-item dataset (ITEMS items, batch 32, shuffled) through

- ``raw``: ``DataLoader(data, batch_size=32, sampler=DistributedSampler(data, shuffle=True))``, ``set_epoch`` per
  epoch: the hand-written baseline;
- ``ours``: ``Accelerator().prepare(DataLoader(data, batch_size=32, shuffle=True))``: sharding, one batch ahead,
  resumable position, ``even_batches`` padding, dashboard progress and the step clock;
- ``accelerate``: the same through ``accelerate.Accelerator().prepare`` (skipped when accelerate is absent);
- ``raw2``: a second, identical raw loader, the A/A control: its ratio to ``raw`` is this harness's noise floor.

Each is measured without DataLoader workers and with ``num_workers=2``. Epochs rotate between the contenders in
the same two processes (who goes first changes every round); an epoch is as slow as the slower rank. The script
prints each contender's median epoch, and its per-round ratio to ``raw`` as median [min-max] (target: ours <=
1.02x), in wall time and in the main thread's CPU time (``time.thread_time``: the Python work each loader does per
batch, less sensitive to the other processes on shared cores; with workers, the items are read in the workers,
so it is the main thread's own share).

Usage: ``python benchmarks/loader.py [--quick] [--rounds N] [--items N] [--no-workers]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from notebook_accel import Accelerator, notebook_launcher

BATCH = 32
ITEMS = 200_000


def _raw(data: TensorDataset, workers: int) -> Callable[[], tuple[float, float]]:
    """The hand-written loader; each call reads one epoch and returns its (wall, CPU) seconds."""
    sampler: DistributedSampler[Any] = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=workers)
    epoch = [0]

    def run() -> tuple[float, float]:
        sampler.set_epoch(epoch[0])
        epoch[0] += 1
        return _epoch(loader)

    return run


def _prepared(loader: Iterable[Any]) -> Callable[[], tuple[float, float]]:
    """A prepared loader (it moves to the next epoch by itself)."""
    return lambda: _epoch(loader)


def _epoch(loader: Iterable[Any]) -> tuple[float, float]:
    """Wall and main-thread CPU seconds of one epoch, every batch touched as a training loop would."""
    dist.barrier()
    start, cpu = time.perf_counter(), time.thread_time()
    for x, _ in loader:
        x.shape  # noqa: B018 - the loop body of a training loop, reduced to nothing
    return time.perf_counter() - start, time.thread_time() - cpu


def _accelerate(data: TensorDataset, workers: int) -> Callable[[], tuple[float, float]] | None:
    """accelerate's prepared loader, or ``None`` when accelerate is not installed."""
    try:
        import accelerate
    except ImportError:
        return None
    loader = accelerate.Accelerator(cpu=True).prepare(
        DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=workers))
    epoch = [0]

    def run() -> tuple[float, float]:
        loader.set_epoch(epoch[0])
        epoch[0] += 1
        return _epoch(loader)

    return run


def measure(rounds: int, items: int, worker_counts: list[int]) -> dict[str, list[tuple[float, float]]]:
    """Worker body: rotate epochs of every contender; rank 0 gets each contender's (wall, CPU) epoch times, each
    the slower rank's."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(items, 8), torch.randint(0, 10, (items,)))
    ours = Accelerator(cpu=True)
    contenders: dict[str, Callable[[], tuple[float, float]]] = {}
    for workers in worker_counts:
        tag = f"/w{workers}"
        contenders["raw" + tag] = _raw(data, workers)
        contenders["ours" + tag] = _prepared(ours.prepare(
            DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=workers)))
        theirs = _accelerate(data, workers)
        if theirs is not None:
            contenders["accelerate" + tag] = theirs
        contenders["raw2" + tag] = _raw(data, workers)
    names = list(contenders)
    for name in names:  # warm-up: first-use imports, allocator
        contenders[name]()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        measured = {name: contenders[name]() for name in order}
        reduced = torch.tensor([measured[name] for name in names], dtype=torch.float64)
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX)  # an epoch is as slow as the slowest rank
        for name, (wall, cpu) in zip(names, reduced.tolist()):
            times[name].append((wall, cpu))
    return times


def _line(name: str, times: dict[str, list[tuple[float, float]]], base: str) -> str:
    """``name``'s median epoch and its per-round ratio to ``base``, median [min-max], in wall and CPU time."""
    parts = []
    for i, kind in enumerate(("wall", "CPU")):
        ratios = [a[i] / b[i] for a, b in zip(times[name], times[base])]
        median = statistics.median(t[i] for t in times[name])
        parts.append(f"{kind} {median:.3f} s = {statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}]")
    return f"{name:<11} " + "   ".join(parts)


def main() -> None:
    """Parse flags, run, print the lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 20,000 items")
    parser.add_argument("--rounds", type=int, default=None, help="rotating rounds (default 5, quick 2)")
    parser.add_argument("--items", type=int, default=None, help=f"dataset items (default {ITEMS:,})")
    parser.add_argument("--no-workers", action="store_true", help="only num_workers=0 (about half the time)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    items = args.items or (20_000 if args.quick else ITEMS)
    worker_counts = [0] if args.no_workers else [0, 2]
    times = notebook_launcher(measure, (rounds, items, worker_counts), num_processes=2, dashboard=False)
    print(f"loader: 2 processes (gloo, CPU), {items:,} items, batch {BATCH}, shuffle, {rounds} rotating rounds "
          "of one epoch each")
    for workers in worker_counts:
        tag = f"/w{workers}"
        print(f"num_workers={workers}:")
        for name in times:
            if name.endswith(tag):
                print("  " + _line(name, times, "raw" + tag))


if __name__ == "__main__":
    main()
