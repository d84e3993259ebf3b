"""GPU step time through the Accelerator against the same loop in raw torch, and launch time, on one GPU.

Two workloads, each trained by two contenders on the same device, in rotating chunks so both see the same GPU
state (clocks, caches, allocator):

- ``mlp``: the accelerate-tutorial style MLP (1024-4096-4096-1024), fp32, AdamW, batches moved host -> device
  each step (the prepared loader does that for the Accelerator; the raw loop calls ``.to(device)``);
- ``transformer``: a 6-layer ``nn.TransformerEncoder`` (d=512, 8 heads, sequence 128), bf16 autocast (the raw loop
  wraps its forward in ``torch.autocast``; the Accelerator gets ``mixed_precision="bf16"``).

Each chunk ends with ``torch.cuda.synchronize()``. The script prints the median ms/step of each contender, the
median of per-round ratios (Accelerator / raw; target <= 1.02x) and an A/A control (two identical raw loops).

``fp8`` (needs torchao, ``pip install 'notebook-accel[fp8]'``, and a GPU of compute capability 8.9+): a stack of six
4096x4096 ``Linear`` layers on batches of 8192 rows, the Accelerator with ``mixed_precision="bf16"`` against
``"fp8"`` (torchao float8: the four inner layers convert, the first and last stay bf16), eager and under
``torch.compile`` (torchao's float8 casts are only fused when compiled); prints fp8 / bf16 step-time ratios (below
1 is faster) and a bf16 A/A control. ``--device cpu`` runs it small, with torchao's emulation, to check the script.

Launch time: ``notebook_launcher(num_processes=1)`` (in process), ``notebook_launcher(num_processes=1,
timeout=...)`` (one forked worker) and a raw ``multiprocessing`` fork, each running the same function that puts
one tensor on the GPU; measured first, while this process has not touched CUDA.

Without a CUDA GPU it prints why and exits 0 (``dev.py bench`` runs every benchmark). ``--device cpu`` runs the
same harness on the CPU, to check the script itself.

Usage: ``python benchmarks/gpu_step.py [--quick] [--rounds N] [--device cuda|cpu] [--only fp8]``
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


def _linear_stack(width: int = 4096, depth: int = 6) -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


FP8_DIMS = {"cuda": (4096, 8192), "cpu": (256, 256)}  # (width, batch rows): big enough for fp8 matmuls to pay


class _Loop:
    """One contender: a model, its optimizer, and how one step is taken."""

    def __init__(self, name: str, accelerated: bool, device: torch.device, batches: list[torch.Tensor],
                 precision: str | None = None, compiled: bool = False) -> None:
        build, _, default = WORKLOADS[name] if name in WORKLOADS else (
            lambda: _linear_stack(FP8_DIMS[device.type][0]), (), "bf16")
        precision = precision or default
        self.batches, self.i = batches, 0
        self.device, self.precision = device, precision
        model = build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        if accelerated:
            handlers: list[Any] = []
            if precision == "fp8" and device.type == "cpu":  # the script check: torchao's emulation
                from torchao.float8 import Float8LinearConfig

                from notebook_accel import AORecipeKwargs
                handlers.append(AORecipeKwargs(config=Float8LinearConfig(emulate=True)))
            self.accelerator: Accelerator | None = Accelerator(mixed_precision=precision, cpu=device.type == "cpu",
                                                               kwargs_handlers=handlers)
            self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
            if compiled:
                self.model = torch.compile(self.model)
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


def fp8_step_times(rounds: int) -> dict[str, Any]:
    """Launched body: rotate chunks of bf16 / fp8 / bf16' on the Linear stack, eager then compiled."""
    device = Accelerator().device
    width, rows = FP8_DIMS[device.type]
    batches = [torch.randn(rows, width).pin_memory() if device.type == "cuda" else torch.randn(rows, width)
               for _ in range(2)]
    out: dict[str, Any] = {"device": str(device), "width": width, "rows": rows}
    for compiled in (False, True):
        loops = {n: _Loop("fp8", True, device, batches, precision=n.rstrip("'"), compiled=compiled)
                 for n in ("bf16", "fp8", "bf16'")}
        names = list(loops)
        for loop in loops.values():  # warm-up (and compilation)
            loop.chunk()
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % 3:] + names[: r % 3]:
                times[n].append(loops[n].chunk())
        out["compiled" if compiled else "eager"] = {
            "bf16": statistics.median(times["bf16"]), "fp8": statistics.median(times["fp8"]),
            "ratio": statistics.median(a / b for a, b in zip(times["fp8"], times["bf16"])),
            "aa": statistics.median(a / b for a, b in zip(times["bf16'"], times["bf16"]))}
        del loops
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _print_fp8(r: dict[str, Any], rounds: int) -> None:
    """The fp8 workload's lines."""
    for mode in ("eager", "compiled"):
        m = r[mode]
        print(f"step    fp8 {mode:<8} on {r['device']} (6 Linear {r['width']}x{r['width']}, batch {r['rows']}): "
              f"bf16 {m['bf16'] * 1e3:.3f} ms/step, fp8 {m['fp8'] * 1e3:.3f} ms/step, fp8/bf16 {m['ratio']:.3f}x, "
              f"A/A {m['aa']:.3f}x ({rounds} rounds of {CHUNK})")


def main() -> int:
    """Parse flags, measure, print the lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=None, help="rotating rounds (default 60, quick 6)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--only", choices=("fp8",), default=None, help="only the fp8 workload (no launch times)")
    args = parser.parse_args()
    rounds = args.rounds or (6 if args.quick else 60)
    if args.device == "cuda":
        if torch.version.cuda is None or hardware.visible_gpu_count() == 0:
            why = "torch is a CPU build" if torch.version.cuda is None else "no NVIDIA GPU is visible"
            print(f"gpu_step: skipped: {why} (run it on a GPU machine, or --device cpu to check the script)")
            return 0
    use_cpu = args.device == "cpu"
    if args.only == "fp8":
        return _fp8(rounds, use_cpu)
    with contextlib.redirect_stdout(io.StringIO()):  # the launcher's own "Launching ..." lines
        launches = launch_times(args.device, 3 if args.quick else 10)
    for way, seconds in launches.items():
        print(f"launch  {way:<38} median {seconds * 1e3:8.1f} ms")
    print(f"launch  ratio forked launcher / raw fork: {launches['notebook_launcher forked (timeout=)'] / launches['raw fork']:.2f}x")
    for name in WORKLOADS:
        with contextlib.redirect_stdout(io.StringIO()):
            r = notebook_launcher(step_times, (name, rounds), num_processes=1, dashboard=False, use_cpu=use_cpu)
        print(f"step    {name:<12} on {r['device']}: raw {r['raw'] * 1e3:.3f} ms/step, Accelerator {r['accel'] * 1e3:.3f}"
              f" ms/step, ratio {r['ratio']:.3f}x (target <= 1.02x), A/A {r['aa']:.3f}x ({rounds} rounds of {CHUNK})")
    return _fp8(rounds, use_cpu)


def _fp8(rounds: int, use_cpu: bool) -> int:
    """The fp8 workload, when torchao and the device allow it (else one line saying why)."""
    from notebook_accel.float8 import MIN_CAPABILITY, torchao_installed

    gpus = [] if use_cpu else hardware.detect_gpus()
    if not torchao_installed():
        print("step    fp8: skipped: torchao is not installed (pip install 'notebook-accel[fp8]')")
        return 0
    if gpus and (gpus[0].compute_capability or (0, 0)) < MIN_CAPABILITY:
        print(f"step    fp8: skipped: {gpus[0].name} has compute capability {gpus[0].compute_capability}, fp8 needs "
              f"{MIN_CAPABILITY} or newer")
        return 0
    with contextlib.redirect_stdout(io.StringIO()):
        r = notebook_launcher(fp8_step_times, (rounds,), num_processes=1, dashboard=False, use_cpu=use_cpu)
    _print_fp8(r, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
