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

Epoch ratios on shared cores move by more than the 2% in question, so the script also decomposes a batch's cost
(on by default; ``--parts-only`` skips the epochs, ``--no-parts`` the decomposition), in two processes as well:

- (a) our own work per batch: runs of RUN batches of a prepared loader whose torch iterator is replaced by batches
  made beforehand (so only our per-batch path runs: look-ahead, position, progress, step clock, device check),
  less the same runs of a plain ``for`` over the same list, plus the start of an epoch (``iter()`` to the first
  batch, the same difference) spread over its batches; a second, identical measurement is its A/A control;
- (b) a raw batch: the ``DistributedSampler`` loader's time per batch over short runs of CHUNK batches, wall and
  main-thread CPU; ``raw2`` is its A/A control;
- (c) the sampling: one pass of our sharded batch sampler less one of ``BatchSampler(DistributedSampler)`` (ours
  runs in place of theirs inside torch's iterator, in the main process also with workers; (a) leaves it out).

Each figure is the minimum of REPEATS short repeats (the load mostly adds to a repeat, so minima move little), per
round; rounds rotate the order. Our figures are the larger rank's, raw's the smaller rank's. The ratio per round is
``1 + a/b`` and, with the sampling, ``1 + (a + c)/b``, printed as median [min-max] over rounds. With
``num_workers=2`` the main process only receives batches (the items are read and collated in the workers), so
``b`` is what a batch costs the main process (CPU) or the loop (wall) there, and ``1 + a/b`` is the main
process's extra work, an upper bound of what it adds to an epoch (it overlaps the workers' reading).

Usage: ``python benchmarks/loader.py [--quick] [--rounds N] [--items N] [--no-workers] [--parts-only | --no-parts]``
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
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
REPEATS = 25  # short repeats of each decomposed figure per round; the figure is their minimum
CHUNK = 16  # batches of a raw loader per short repeat
RUN = 128  # batches per short repeat of our per-batch path (~0.2 ms)


def _raw(data: TensorDataset, workers: int) -> Callable[[], tuple[float, float]]:
    """The hand-written loader; each call reads one epoch and returns its (wall, CPU) seconds."""
    loader = _raw_loader(data, workers)
    sampler = loader.sampler
    epoch = [0]

    def run() -> tuple[float, float]:
        sampler.set_epoch(epoch[0])  # type: ignore[attr-defined]
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


class _Premade(DataLoader):
    """A batch stream of batches made beforehand, in place of torch's (what a prepared loader's ``super().__iter__()``
    returns, when mixed in after the prepared loader's class)."""

    premade: list[Any] = []

    def __iter__(self) -> Any:
        return iter(self.premade)


def _over_premade(loader: Any, premade: list[Any]) -> Any:
    """``loader`` (a prepared one) reading ``premade`` instead of making batches: only our per-batch path runs."""
    loader.__class__ = type("PremadePrepared", (type(loader), _Premade), {"premade": premade})
    for first in loader:
        if first is not premade[0]:
            raise RuntimeError("the prepared loader did not hand over the premade batch as is: it no longer wraps "
                               "super().__iter__(), or it moved a batch already on its device; fix _over_premade")
        break
    return loader


def _runs(batches: Iterable[Any]) -> tuple[float, float]:
    """One pass over ``batches`` with the training loop's body: (the least seconds per batch over its runs of RUN
    batches, seconds of its start: ``iter()`` and the first batch)."""
    start = time.perf_counter()
    iterator = iter(batches)
    x, _ = next(iterator)
    first, best = time.perf_counter() - start, math.inf
    while True:
        start, n = time.perf_counter(), 0
        for x, _ in itertools.islice(iterator, RUN):
            x.shape  # noqa: B018 - as in _epoch
            n += 1
        if n < RUN:
            return best, first
        best = min(best, (time.perf_counter() - start) / RUN)


def _chunks(loader: DataLoader, repeats: int) -> tuple[float, float]:
    """(wall, main-thread CPU) seconds per batch of ``loader``: the least over ``repeats`` runs of CHUNK batches of
    one epoch (its start, where workers are forked, left out)."""
    repeats = max(1, min(repeats, (len(loader) - 1) // CHUNK))  # within one epoch
    iterator = iter(loader)
    next(iterator)
    wall = cpu = math.inf
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.thread_time()
        for _ in range(CHUNK):
            x, _ = next(iterator)
            x.shape  # noqa: B018
        wall = min(wall, (time.perf_counter() - start) / CHUNK)
        cpu = min(cpu, (time.thread_time() - cpu_start) / CHUNK)
    return wall, cpu


def _least(timed: Callable[[Any], Any], what: Any) -> tuple[float, ...]:
    """The least of REPEATS runs of ``timed(what)``, figure by figure (it returns a float or a tuple of them)."""
    runs = [timed(what) for _ in range(REPEATS)]
    return tuple(min(values) for values in zip(*runs)) if isinstance(runs[0], tuple) else (min(runs),)


def _sampling(batch_sampler: Iterable[Any]) -> float:
    """Seconds per batch of one pass over a batch sampler (one rank's index lists)."""
    start = time.perf_counter()
    n = sum(1 for _ in batch_sampler)
    return (time.perf_counter() - start) / n


def measure_parts(rounds: int, items: int, worker_counts: list[int]) -> dict[str, dict[str, list[float]]]:
    """Worker body of the decomposition (see the module docstring): per ``num_workers`` and figure, one value per
    round on rank 0 (seconds per batch; our figures the larger rank's, raw's the smaller rank's)."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(items, 8), torch.randint(0, 10, (items,)))
    ours = Accelerator(cpu=True)
    found: dict[str, dict[str, list[float]]] = {}
    for workers in worker_counts:
        repeats = REPEATS if workers == 0 else max(3, REPEATS // 3)  # a worker-fed batch costs ~10x more here
        raw = _raw_loader(data, workers)
        raw2 = _raw_loader(data, workers)
        premade = list(_raw_loader(data, 0))
        wrapped = _over_premade(ours.prepare(DataLoader(data, batch_size=BATCH, shuffle=True)), premade)
        sampled = ours.prepare(DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=workers)).batch_sampler
        figures: dict[str, Callable[[], tuple[float, ...]]] = {
            "wrapper": functools.partial(_least, _runs, wrapped), "wrapper2": functools.partial(_least, _runs, wrapped),
            "bare": functools.partial(_least, _runs, premade),
            "raw": functools.partial(_chunks, raw, repeats), "raw2": functools.partial(_chunks, raw2, repeats),
            "sampling ours": functools.partial(_least, _sampling, sampled),
            "sampling raw": functools.partial(_least, _sampling, raw.batch_sampler),
        }
        names = list(figures)
        mine: dict[str, list[float]] = {}
        for r in range(rounds):
            got = {name: figures[name]() for name in names[r % len(names):] + names[: r % len(names)]}
            for key, value in _round_figures(got, len(premade)).items():
                mine.setdefault(key, []).append(value)
        every: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        found[f"w{workers}"] = {key: [(min if key.startswith("b") else max)(rank[key][i] for rank in every)
                                      for i in range(rounds)] for key in mine}
    return found


def _raw_loader(data: TensorDataset, workers: int) -> DataLoader:
    """The hand-written loader over a ``DistributedSampler``."""
    return DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=True, seed=0),
                      num_workers=workers)


def _round_figures(got: dict[str, tuple[float, ...]], batches: int) -> dict[str, float]:
    """One round's figures, per batch: a, a2 (ours, its A/A; an epoch's start spread over its ``batches``), e (that
    start, seconds per epoch), c (sampling, ours less raw's), b and b2 (raw's and its A/A's wall), b_cpu and b2_cpu
    (their main-thread CPU)."""
    bare, bare_start = got["bare"]
    start = got["wrapper"][1] - bare_start
    return {"a": got["wrapper"][0] - bare + start / batches, "a2": got["wrapper2"][0] - bare + start / batches,
            "e": start, "c": got["sampling ours"][0] - got["sampling raw"][0], "c_ours": got["sampling ours"][0],
            "b": got["raw"][0], "b2": got["raw2"][0], "b_cpu": got["raw"][1], "b2_cpu": got["raw2"][1]}


def _spread(values: list[float], scale: float = 1.0, unit: str = "") -> str:
    """``median [min-max]`` of ``values`` times ``scale``."""
    v = [x * scale for x in values]
    digits = 3 if unit == "x" else 2
    return f"{statistics.median(v):.{digits}f}{unit} [{min(v):.{digits}f}-{max(v):.{digits}f}]"


def _parts_lines(workers: str, f: dict[str, list[float]]) -> list[str]:
    """The decomposition's lines for one ``num_workers``."""
    us = 1e6
    ratio = [1 + a / b for a, b in zip(f["a"], f["b"])]
    ratio_cpu = [1 + a / b for a, b in zip(f["a"], f["b_cpu"])]
    with_sampling = [1 + (a + c) / b for a, c, b in zip(f["a"], f["c"], f["b"])]
    return [
        f"parts, num_workers={workers[1:]} (per batch; each figure the least of its short repeats, median "
        "[min-max] over rounds):",
        f"  (a) our own work      {_spread(f['a'], us)} µs   A/A second measurement {_spread(f['a2'], us)} µs "
        f"(with an epoch's start, {_spread(f['e'], us)} µs an epoch)",
        f"  (b) raw batch, wall   {_spread(f['b'], us)} µs   A/A raw2/raw "
        f"{_spread([x / y for x, y in zip(f['b2'], f['b'])], unit='x')}",
        f"  (b) raw batch, CPU    {_spread(f['b_cpu'], us)} µs   A/A raw2/raw "
        f"{_spread([x / y for x, y in zip(f['b2_cpu'], f['b_cpu'])], unit='x')}",
        f"  (c) sampling, ours less raw {_spread(f['c'], us)} µs (ours {_spread(f['c_ours'], us)} µs)",
        f"  ratio 1 + a/b: wall {_spread(ratio, unit='x')}, CPU {_spread(ratio_cpu, unit='x')}; "
        f"with the sampling 1 + (a + c)/b: {_spread(with_sampling, unit='x')}   (target <= 1.02x)",
    ]


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
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--parts-only", action="store_true", help="only the decomposition (a minute or so)")
    which.add_argument("--no-parts", action="store_true", help="only the epochs")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    items = args.items or (20_000 if args.quick else ITEMS)
    worker_counts = [0] if args.no_workers else [0, 2]
    load = os.getloadavg()
    print(f"loader: 2 processes (gloo, CPU), {items:,} items, batch {BATCH}, shuffle, {rounds} rotating rounds; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not args.parts_only:
        times = notebook_launcher(measure, (rounds, items, worker_counts), num_processes=2, dashboard=False)
        for workers in worker_counts:
            tag = f"/w{workers}"
            print(f"epochs, num_workers={workers}:")
            for name in times:
                if name.endswith(tag):
                    print("  " + _line(name, times, "raw" + tag))
    if not args.no_parts:
        parts = notebook_launcher(measure_parts, (rounds, items, worker_counts), num_processes=2, dashboard=False)
        for workers, figures in parts.items():
            print("\n".join(_parts_lines(workers, figures)))
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
