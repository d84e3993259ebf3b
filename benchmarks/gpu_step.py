"""GPU step time through the Accelerator against the same loop in raw torch, and launch time, on one GPU.

Two workloads, each trained by two contenders on the same device, in rotating chunks so both see the same GPU
state (clocks, caches, allocator):

- ``mlp``: the accelerate-tutorial style MLP (1024-4096-4096-1024), fp32, AdamW, batches moved host -> device
  each step (the prepared loader does that for the Accelerator; the raw loop calls ``.to(device)``);
- ``transformer``: a 6-layer ``nn.TransformerEncoder`` (d=512, 8 heads, sequence 128), bf16 autocast (the raw loop
  wraps its forward in ``torch.autocast``; the Accelerator gets ``mixed_precision="bf16"``).

Each chunk ends with ``torch.cuda.synchronize()``. The script prints the median ms/step of each contender, the
median of per-round ratios (Accelerator / raw; target <= 1.02x) and an A/A control (two identical raw loops).

Launch time: ``notebook_launcher(num_processes=1)`` (in process), ``notebook_launcher(num_processes=1,
timeout=...)`` (one forked worker) and a raw ``multiprocessing`` fork, each running the same function that puts
one tensor on the GPU; measured first, while this process has not touched CUDA.

Without a CUDA GPU it prints why and exits 0 (``dev.py bench`` runs every benchmark). ``--device cpu`` runs the
same harness on the CPU, to check the script itself.

Usage: ``python benchmarks/gpu_step.py [--quick] [--rounds N] [--device cuda|cpu]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from notebook_accel import Accelerator, hardware, notebook_launcher

CHUNK = 10


def _touch_device(device: str) -> float:
    """The launched work: one tensor on the device, synchronised."""
    t = torch.ones(1024, device=device) * 2
    if t.is_cuda:
        torch.cuda.synchronize()
    return float(t.sum().item())


def _raw_fork(device: str) -> None:
    """A hand-written launcher: fork one process that does the same work, wait for it."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_touch_device, args=(device,))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"raw fork exited with {proc.exitcode}")


def launch_times(device: str, runs: int) -> dict[str, float]:
    """Median seconds of each way to launch the work (forks first: CUDA must stay untouched here)."""
    use_cpu = device == "cpu"
    ways: dict[str, Callable[[], Any]] = {
        "raw fork": lambda: _raw_fork(device),
        "notebook_launcher forked (timeout=)": lambda: notebook_launcher(
            _touch_device, (device,), num_processes=1, timeout=600, dashboard=False, use_cpu=use_cpu),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(runs):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - start)
    in_process: list[float] = []  # last: it initialises CUDA in this process
    for _ in range(runs):
        start = time.perf_counter()
        notebook_launcher(_touch_device, (device,), num_processes=1, dashboard=False, use_cpu=use_cpu)
        in_process.append(time.perf_counter() - start)
    result = {name: statistics.median(values) for name, values in times.items()}
    result["notebook_launcher in process"] = statistics.median(in_process)
    return result


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                               torch.nn.GELU(), torch.nn.Linear(4096, 1024))


def _transformer() -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)


WORKLOADS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...], str]] = {
    "mlp": (_mlp, (256, 1024), "no"),
    "transformer": (_transformer, (32, 128, 512), "bf16"),
}


class _Loop:
    """One contender: a model, its optimizer, and how one step is taken."""

    def __init__(self, name: str, accelerated: bool, device: torch.device, batches: list[torch.Tensor]) -> None:
        build, _, precision = WORKLOADS[name]
        self.batches, self.i = batches, 0
        self.device, self.precision = device, precision
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        if accelerated:
            self.accelerator: Accelerator | None = Accelerator(mixed_precision=precision, cpu=device.type == "cpu")
            self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        else:
            self.accelerator = None
            self.model, self.optimizer = model.to(device), optimizer

    def step(self) -> None:
        """One training step on the next host batch."""
        x = self.batches[self.i % len(self.batches)]
        self.i += 1
        x = x.to(self.device, non_blocking=True)
        if self.accelerator is not None:
            loss = self.model(x).float().pow(2).mean()
            self.accelerator.backward(loss)
        else:
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
                out = self.model(x)
            loss = out.float().pow(2).mean()
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def chunk(self) -> float:
        """CHUNK steps, synchronised; seconds per step."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        for _ in range(CHUNK):
            self.step()
        sync()
        return (time.perf_counter() - start) / CHUNK


def step_times(name: str, rounds: int) -> dict[str, float]:
    """Launched body: rotate raw / Accelerator / raw' chunks of workload ``name``; medians and ratios."""
    device = Accelerator().device
    _, shape, _ = WORKLOADS[name]
    batches = [torch.randn(*shape).pin_memory() if device.type == "cuda" else torch.randn(*shape) for _ in range(4)]
    loops = {"raw": _Loop(name, False, device, batches), "accel": _Loop(name, True, device, batches),
             "raw2": _Loop(name, False, device, batches)}
    names = list(loops)
    for loop in loops.values():  # warm-up: allocator, kernels, autotuning
        loop.chunk()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % 3:] + names[: r % 3]:
            times[n].append(loops[n].chunk())
    ratio = statistics.median(a / b for a, b in zip(times["accel"], times["raw"]))
    aa = statistics.median(a / b for a, b in zip(times["raw2"], times["raw"]))
    return {"raw": statistics.median(times["raw"]), "accel": statistics.median(times["accel"]), "ratio": ratio,
            "aa": aa, "device": str(device)}


def main() -> int:
    """Parse flags, measure, print the lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rotating rounds (default 60, quick 6)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    rounds = args.rounds or (6 if args.quick else 60)
    if args.device == "cuda":
        if torch.version.cuda is None or hardware.visible_gpu_count() == 0:
            why = "torch is a CPU build" if torch.version.cuda is None else "no NVIDIA GPU is visible"
            print(f"gpu_step: skipped: {why} (run it on a GPU machine, or --device cpu to check the script)")
            return 0
    with contextlib.redirect_stdout(io.StringIO()):  # the launcher's own "Launching ..." lines
        launches = launch_times(args.device, 3 if args.quick else 10)
    for way, seconds in launches.items():
        print(f"launch  {way:<38} median {seconds * 1e3:8.1f} ms")
    print(f"launch  ratio forked launcher / raw fork: {launches['notebook_launcher forked (timeout=)'] / launches['raw fork']:.2f}x")
    use_cpu = args.device == "cpu"
    for name in WORKLOADS:
        with contextlib.redirect_stdout(io.StringIO()):
            r = notebook_launcher(step_times, (name, rounds), num_processes=1, dashboard=False, use_cpu=use_cpu)
        print(f"step    {name:<12} on {r['device']}: raw {r['raw'] * 1e3:.3f} ms/step, Accelerator {r['accel'] * 1e3:.3f}"
              f" ms/step, ratio {r['ratio']:.3f}x (target <= 1.02x), A/A {r['aa']:.3f}x ({rounds} rounds of {CHUNK})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
