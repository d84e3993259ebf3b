"""Per-step overhead of the Accelerator against the same loop written with raw DDP + DistributedSampler.

Two processes (forked by ``notebook_launcher``, gloo on CPU) train two copies of a small MLP on the same data:
one through ``Accelerator.prepare`` / ``accumulate`` / ``backward`` / the wrapped optimizer and prepared loader,
one with ``DistributedDataParallel``, a ``DistributedSampler`` and a plain ``DataLoader``, plus a second identical
raw loop as an A/A control, and the Accelerator loop again with the step-time monitor paused
(:func:`notebook_accel.monitor.steps.paused`: no clock reads, no DDP model watched), whose ratio to the
monitored one is the monitor's cost (target <= 1.005x). Chunks of CHUNK steps rotate between the three (who goes first changes every round) so
all see the same machine state; the script prints each median time per step, the median of the per-round ratios
(Accelerator / raw; target <= 1.02x), and the A/A ratio, the harness's own noise floor on this machine. Each is
given for wall time and for the main thread's CPU time (``time.thread_time``: the Python work the Accelerator adds,
less sensitive to other processes taking the shared cores; DDP's communication thread is excluded from both).

Usage: ``python benchmarks/step_overhead.py [--quick] [--rounds N] [--no-progress]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from notebook_accel import Accelerator, channel, notebook_launcher
from notebook_accel.monitor import steps

WIDTH, BATCH, STEPS, CHUNK = 256, 32, 48, 16


def _mlp() -> torch.nn.Module:
    """The benchmarked model (same initial weights for both contenders)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))


class _Batches:
    """Endless batches of a loader, one epoch after another (``set_epoch`` on a DistributedSampler)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.epoch = 0
        self.iterator = iter(loader)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch, starting a new epoch when one ends."""
        try:
            return next(self.iterator)
        except StopIteration:
            self.epoch += 1
            if isinstance(self.loader.sampler, DistributedSampler):
                self.loader.sampler.set_epoch(self.epoch)
            self.iterator = iter(self.loader)
            return next(self.iterator)


def _chunk_raw(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: _Batches) -> tuple[float, float]:
    """CHUNK steps of the hand-written DDP loop; (wall, this thread's CPU) seconds."""
    dist.barrier()
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(CHUNK):
        x, y = batches.next()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - start, time.thread_time() - cpu


def _chunk_accelerated(accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                       batches: _Batches) -> tuple[float, float]:
    """CHUNK steps of the same loop through the Accelerator; (wall, this thread's CPU) seconds."""
    dist.barrier()
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(CHUNK):
        x, y = batches.next()
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return time.perf_counter() - start, time.thread_time() - cpu


def measure(rounds: int, progress: bool = True) -> dict[str, float]:
    """Worker body: rotate chunks of the three contenders; rank 0's medians come back.

    The contenders are the raw loop, the Accelerator loop, and a second, identical raw loop (an A/A control: its
    ratio to the first shows how much this harness and machine differ between two equal loops).
    ``progress=False`` detaches the event channel, so the prepared loader posts no progress events.
    """
    writer = None if progress else channel.uninstall()
    accelerator = Accelerator()
    n = accelerator.num_processes
    data = TensorDataset(torch.randn(BATCH * STEPS * n, 64), torch.randn(BATCH * STEPS * n, 1))

    def raw_setup() -> Callable[[], tuple[float, float]]:
        model = DistributedDataParallel(_mlp())
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        sampler = DistributedSampler(data, shuffle=True, seed=0)
        batches = _Batches(DataLoader(data, batch_size=BATCH, sampler=sampler))
        return lambda: _chunk_raw(model, optimizer, batches)

    raw = raw_setup()
    model = _mlp()
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-3),
                                                   DataLoader(data, batch_size=BATCH, shuffle=True))
    accelerated = _Batches(loader)
    with steps.paused():
        quiet_model = _mlp()
        quiet_model, quiet_optimizer, quiet_loader = accelerator.prepare(
            quiet_model, torch.optim.SGD(quiet_model.parameters(), lr=1e-3),
            DataLoader(data, batch_size=BATCH, shuffle=True))
    quiet = _Batches(quiet_loader)

    def unmonitored() -> tuple[float, float]:
        with steps.paused():
            return _chunk_accelerated(accelerator, quiet_model, quiet_optimizer, quiet)

    contenders = {"raw": raw, "accel": lambda: _chunk_accelerated(accelerator, model, optimizer, accelerated),
                  "raw2": raw_setup(), "unmonitored": unmonitored}
    names = list(contenders)
    for name in names * 2:  # warm-up
        contenders[name]()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        measured = {name: contenders[name]() for name in order}
        reduced = torch.tensor([measured[name] for name in names], dtype=torch.float64)
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX)  # a step is as slow as the slowest rank
        for name, (w, c) in zip(names, reduced.tolist()):
            wall[name].append(w / CHUNK)
            cpu[name].append(c / CHUNK)
    if writer is not None:
        channel.install(writer)

    def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    return {"raw": statistics.median(wall["raw"]), "accel": statistics.median(wall["accel"]),
            "ratio": ratio(wall, "accel", "raw"), "aa": ratio(wall, "raw2", "raw"),
            "raw_cpu": statistics.median(cpu["raw"]), "accel_cpu": statistics.median(cpu["accel"]),
            "cpu_ratio": ratio(cpu, "accel", "raw"), "cpu_aa": ratio(cpu, "raw2", "raw"),
            "min_ratio": min(cpu["accel"]) / min(cpu["raw"]), "min_aa": min(cpu["raw2"]) / min(cpu["raw"]), "n": n,
            "monitor": ratio(wall, "accel", "unmonitored"), "monitor_cpu": ratio(cpu, "accel", "unmonitored")}


def main() -> None:
    """Parse flags, run, print the lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rotating rounds (default 90, quick 15)")
    parser.add_argument("--no-progress", action="store_true", help="post no progress events from the loader")
    args = parser.parse_args()
    rounds = args.rounds or (15 if args.quick else 90)
    result = notebook_launcher(measure, (rounds, not args.no_progress), num_processes=2, dashboard=False)
    print(f"step_overhead: {result['n']} processes (gloo, CPU), MLP 64-{WIDTH}-{WIDTH}-1, batch {BATCH}/process, "
          f"{rounds} rotating rounds of {CHUNK} steps")
    print(f"raw DDP + DistributedSampler: {result['raw'] * 1e3:.3f} ms/step wall, "
          f"{result['raw_cpu'] * 1e3:.3f} ms/step main-thread CPU (medians)")
    print(f"Accelerator:                  {result['accel'] * 1e3:.3f} ms/step wall, "
          f"{result['accel_cpu'] * 1e3:.3f} ms/step main-thread CPU (medians)")
    print(f"ratio Accelerator / raw:      {result['ratio']:.3f}x wall, {result['cpu_ratio']:.3f}x CPU "
          "(medians of per-round ratios; target <= 1.02x)")
    print(f"A/A control raw' / raw:       {result['aa']:.3f}x wall, {result['cpu_aa']:.3f}x CPU "
          "(two identical raw loops: this run's noise floor)")
    print(f"fastest chunks, CPU:          {result['min_ratio']:.3f}x Accelerator / raw, {result['min_aa']:.3f}x A/A "
          "(least-disturbed chunks, as timeit's min)")
    print(f"step-time monitor on / off:   {result['monitor']:.3f}x wall, {result['monitor_cpu']:.3f}x CPU "
          "(Accelerator loop with and without the step clock; target <= 1.005x)")

if __name__ == "__main__":
    main()
