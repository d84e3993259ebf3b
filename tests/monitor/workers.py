"""Worker bodies for the monitor's real launches."""

from __future__ import annotations

import os
import time
from typing import Any

import torch


def busy(seconds: float) -> int:
    """Keep a core busy for ``seconds`` with a tensor held (so CPU % and memory are both above zero)."""
    held = torch.ones(4_000_000)  # 16 MB
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        held.mul_(1.0)
    return int(held.numel())


def grow_in_cgroup(procs_file: str) -> None:
    """Rank 1 moves into the memory cgroup ``procs_file`` belongs to and allocates until the kernel kills it;
    rank 0 waits to be stopped."""
    if int(os.environ["RANK"]) != 1:
        time.sleep(60)
        return
    with open(procs_file, "w") as f:
        f.write(str(os.getpid()))
    chunks = []
    while True:  # 8 MiB every 0.1 s up to 120 MiB, then 1 MiB: samples (every second) see the last 40 MiB fill up
        chunk = bytearray((8 if len(chunks) < 15 else 1) << 20)
        chunk[::4096] = b"\x01" * len(chunk[::4096])
        chunks.append(chunk)
        time.sleep(0.1)


class SlowItems(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Items that take 20 ms each to load."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.02)
        return torch.ones(8), torch.ones(1)


class TwelveMsItems(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """960 items that take 12 ms each to load (the issue's two identical slow loaders)."""

    def __len__(self) -> int:
        return 960

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.012)
        return torch.ones(8), torch.ones(1)


def twin_slow_loaders() -> None:
    """Both ranks load through one DataLoader worker each, 12 ms an item, batch 8: every rank waits for data."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(TwelveMsItems(), batch_size=8, num_workers=1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def _probe_step(model: torch.nn.Module, x: torch.Tensor, sync: bool) -> float:
    """Seconds of one forward and backward of ``model`` (DDP), with its all-reduce or under ``no_sync``."""
    import contextlib

    started = time.perf_counter()
    with contextlib.nullcontext() if sync else model.no_sync():  # type: ignore[operator]
        model(x).square().mean().backward()
    return time.perf_counter() - started


def compute_bound_ddp(steps: int, probes: int) -> list[float]:
    """Seven Linear(768, 768) under DDP, batch 256 of in-memory rows, for ``steps`` steps; then ``probes`` pairs of
    steps with and without the all-reduce (``no_sync``, not measured by the monitor). Returns every rank's real
    communication share of a step: 1 - (median step without) / (median step with)."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(768, 768) for _ in range(7)])
    data = torch.utils.data.TensorDataset(torch.randn(2 * 256 * steps, 768), torch.randn(2 * 256 * steps, 768))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(data, batch_size=256))
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    x = torch.randn(256, 768)
    timed = [(_probe_step(model, x, True), _probe_step(model, x, False)) for _ in range(probes)]
    with_sync = sorted(t for t, _ in timed)[probes // 2]
    without = sorted(t for _, t in timed)[probes // 2]
    shares = [None] * accelerator.num_processes
    torch.distributed.all_gather_object(shares, 1 - without / with_sync)
    return [float(share) for share in shares]  # type: ignore[arg-type]


def train_case(kind: str) -> None:
    """A short training loop built to be data-bound, communication-bound, to have a straggler, or balanced."""
    from torch.utils.data import DataLoader, TensorDataset

    from notebook_accel import Accelerator

    if kind == "fsdp_comm":  # the communication-bound case sharded: all-gathers and reduce-scatters instead
        from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

        accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(
            auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=1_000_000))
    elif kind == "deepspeed_comm":  # and through DeepSpeed's ZeRO-2: its reductions and gathers
        from notebook_accel import DeepSpeedPlugin

        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    else:
        accelerator = Accelerator()
    torch.manual_seed(0)
    if kind == "data":
        model: torch.nn.Module = torch.nn.Linear(8, 1)
        data: torch.utils.data.Dataset = SlowItems()  # type: ignore[type-arg]
        batch = 4
    elif kind in ("comm", "fsdp_comm", "deepspeed_comm"):  # 16M parameters (64 MB of gradients) for a batch of one
        model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)], torch.nn.Linear(2048, 1))
        data = TensorDataset(torch.randn(16, 2048), torch.randn(16, 1))
        batch = 1
    else:  # straggler, balanced: a small model and a large batch of in-memory rows
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
        # balanced: 48 steps a rank (~3.5 s), so that a burst of the host's noise on one rank (one CI run saw rank 0
        # lose ~0.3 s of a 1.1 s run of 16 steps: "a straggler, 1.3x") is not the whole measurement
        rows = 96 if kind == "balanced" else 32
        data = TensorDataset(torch.randn(rows, 64, 256), torch.randn(rows, 64, 1))
        batch = 1
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(data, batch_size=batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        if kind == "straggler" and accelerator.process_index == 1:
            time.sleep(0.4)  # well above the compute even on a loaded machine (300 matmuls took 0.4 s there)
        if kind in ("straggler", "balanced"):
            x, y = x.reshape(-1, 256), y.reshape(-1, 1)
            for _ in range(300):  # compute that dominates the step
                x = torch.tanh(x @ torch.eye(256) * 0.5)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def device_out_of_memory() -> None:
    """Rank 1 raises the error torch raises when a device runs out of memory."""
    if int(os.environ["RANK"]) == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    time.sleep(30)


def log_system(folder: str, wanted: bool) -> int:
    """Train a small model for 270 steps (about 3.5 s), logging every step to a JSONL tracker under ``folder`` with
    ``log_system_metrics=wanted``; returns the steps done."""
    from notebook_accel import Accelerator

    accelerator = Accelerator(log_with="jsonl", project_dir=folder, log_system_metrics=wanted)
    accelerator.init_trackers("run")
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
    model, optimizer, loader = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(data, batch_size=8))
    step = _train_steps(accelerator, model, optimizer, loader, 270, 0.01, "loss")  # about 3.5 s
    accelerator.end_training()
    return step


def _train_steps(accelerator: Any, model: Any, optimizer: Any, loader: Any, steps: int, pause: float,
                 metric: str) -> int:
    """Train ``steps`` steps (a count, not a clock: every rank must run the same collectives), logging ``metric``
    and sleeping ``pause`` seconds after each; returns the steps done."""
    step = 0
    while step < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            accelerator.log({metric: loss.item()}, step=step)
            step += 1
            time.sleep(pause)
            if step == steps:
                break
    return step


def _fill(chunks: list[bytearray], mib: int) -> None:
    """Allocate ``mib`` MiB more and touch every page (so it is resident)."""
    chunk = bytearray(mib << 20)
    chunk[::4096] = b"\x01" * len(chunk[::4096])
    chunks.append(chunk)


def leak_until_killed(mib_a_second: int) -> None:
    """Rank 1 grows by ``mib_a_second`` (in tenths of a second) until the kernel kills it, as the out-of-memory
    killer's first choice; rank 0 waits to be stopped."""
    if int(os.environ["RANK"]) != 1:
        time.sleep(120)
        return
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    chunks: list[bytearray] = []
    while True:
        _fill(chunks, mib_a_second // 10)
        time.sleep(0.1)


def killed_at_high_memory(share: float) -> None:
    """Rank 1 fills its memory cgroup to ``share`` of its limit, stays there for the sampler to see it, then a plain
    SIGKILL (not the out-of-memory killer) ends it; rank 0 waits to be stopped."""
    import signal

    from notebook_accel.monitor.host import cgroup_memory

    if int(os.environ["RANK"]) != 1:
        time.sleep(120)
        return
    chunks: list[bytearray] = []
    limit, usage = cgroup_memory(os.getpid())
    while limit is not None and usage is not None and usage < share * limit:
        _fill(chunks, 16)
        limit, usage = cgroup_memory(os.getpid())
    time.sleep(3)  # three samples at that level
    os.kill(os.getpid(), signal.SIGKILL)


def hang_in_all_reduce() -> None:
    """Rank 0 waits in an all_reduce that rank 1, asleep, never joins: every rank idle until the run's timeout."""
    import torch.distributed as dist

    from notebook_accel import Accelerator

    Accelerator()
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    time.sleep(120)


def busy_then_hang(timeout: float, idle: float) -> None:
    """Both ranks compute until ``idle`` seconds before the run's ``timeout`` (counted from this process's start,
    about when the launcher starts counting), then rank 0 waits in an all_reduce that rank 1, asleep, never joins:
    every rank idle for the run's last ``idle`` seconds, until its timeout stops it."""
    import psutil
    import torch.distributed as dist

    from notebook_accel import Accelerator

    Accelerator()
    x, until = torch.ones(64, 64), psutil.Process().create_time() + timeout - idle
    while time.time() < until:
        x = torch.tanh(x @ x)
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    time.sleep(120)


def hold_memory(mib: int, seconds: float) -> int:
    """Hold ``mib`` MiB, touched, for ``seconds`` (a job for a compile worker); returns this process's id."""
    chunk = bytearray(mib << 20)
    chunk[:: 4096] = b"x" * len(chunk[:: 4096])
    time.sleep(seconds)
    return os.getpid()


def compile_pool_holds(mib: int, seconds: float) -> None:
    """Rank 0 starts torch's own compile worker pool (``SubprocPool``: the side process running
    ``torch/_inductor/compile_worker/__main__.py``, and its forked workers, as ``torch.compile`` does with
    ``compile_threads`` > 1) and has one of its workers hold ``mib`` MiB for ``seconds``; rank 1 waits as long."""
    import torch.distributed as dist
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    from notebook_accel import Accelerator

    Accelerator()
    if dist.get_rank() == 0:
        pool = SubprocPool(2)
        try:
            assert pool.submit(hold_memory, mib, seconds).result(timeout=120) != os.getpid()
        finally:
            pool.shutdown()
    else:
        time.sleep(seconds + 2)
    dist.barrier()


def sleepy_training(seconds: float, pause: float) -> int:
    """A loop that sleeps ``pause`` seconds every step (as a loop waiting on a remote service or throttled by hand
    does) for about ``seconds``: next to no CPU, yet steps, metrics and progress all the while. Returns the steps."""
    from notebook_accel import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.05),
                                                   torch.utils.data.DataLoader(data, batch_size=4))
    return _train_steps(accelerator, model, optimizer, loader, int(seconds / pause), pause, "train/loss")
