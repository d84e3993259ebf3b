"""The GPU case for DDP's communication figure: what the step clock reports against a measurement of its own.

On a GPU the CPU does not wait for DDP's all-reduce, so :class:`~notebook_accel.monitor.steps.StepClock` takes the
communication a step waits for from torch's DDP logger (the last bucket's return less the end of backward's
computation, CUDA events, sampled). This case checks that figure against an independent one, in one process on one
GPU (a one-rank nccl group: DDP still runs its reducer, its buckets and its comm hook):

- ``plain``: a compute-bound model and a one-rank all-reduce: next to nothing is waited for;
- ``delayed``: the same model with a communication hook that holds the (single) bucket back by a fixed GPU sleep on a
  stream of its own before all-reducing it, as a slow network would: the step waits about that long after its
  computation.

The independent measurement is the step time, synchronised after every step, with the all-reduce against the
same steps under ``no_sync`` (no reducer work at all); their difference is what communication cost the step.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

_SLEEP_CYCLES = 20_000_000  # about 10-15 ms at an H100's or H200's clock


def _step_seconds(ddp: Any, optimizer: Any, x: Any, y: Any, steps: int, sync: bool) -> list[float]:
    """Seconds per step, synchronised after each one; ``sync=False`` runs the steps under ``no_sync``."""
    import contextlib

    import torch

    out: list[float] = []
    for _ in range(steps):
        torch.cuda.synchronize()
        began = time.perf_counter()
        with contextlib.nullcontext() if sync else ddp.no_sync():
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        out.append(time.perf_counter() - began)
    return out


def _clocked(ddp: Any, optimizer: Any, x: Any, y: Any, steps: int) -> dict[str, float]:
    """Train ``steps`` steps under a step clock, as a prepared loop is timed; its figures per step."""
    import torch

    from notebook_accel.monitor.steps import StepClock

    sent: list[Any] = []
    clock = StepClock(0, sent.append)
    clock.watch(ddp)
    for _ in range(steps):
        clock.batch_ready(0.0)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        began = clock.backward_begins(loss)
        loss.backward()
        clock.backward(time.perf_counter() - began)
        began = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        clock.optimizer(time.perf_counter() - began)
        loss.item()  # a loop that logs its loss waits for the GPU once a step
    clock.end_of_epoch()
    counted = sum(e.steps for e in sent)
    return {"steps": counted, "step": sum(e.step_seconds for e in sent) / counted,
            "comm": sum(e.comm_seconds for e in sent) / counted}


def ddp_exposed_wait() -> dict[str, Any]:
    """Both workloads; each one's clock figures, the independent cost of communication, and torch's raw figures."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    results: dict[str, Any] = {}
    try:
        for name in ("plain", "delayed"):
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], bucket_cap_mb=64)
            if name == "delayed":
                ddp.register_comm_hook(None, _delayed_all_reduce)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4)
            x, y = torch.randn(8192, 1024, device="cuda"), torch.randn(8192, 1024, device="cuda")
            _step_seconds(ddp, optimizer, x, y, 5, sync=True)  # warm-up
            clocked = _clocked(ddp, optimizer, x, y, 60)
            with_comm = _step_seconds(ddp, optimizer, x, y, 30, sync=True)
            without = _step_seconds(ddp, optimizer, x, y, 30, sync=False)
            logged = ddp._get_ddp_logging_data()
            results[name] = {
                **clocked, "real_comm": statistics.median(with_comm) - statistics.median(without),
                "real_step": statistics.median(with_comm),
                "torch": {k: logged.get(k) for k in ("avg_backward_comm_time", "avg_backward_compute_comm_overlap_time",
                                                     "avg_backward_compute_time")},
            }
    finally:
        dist.destroy_process_group()
    return results


_side: list[Any] = []  # the stream the delayed all-reduce is issued on (made on first use)


def _delayed_all_reduce(_state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses other annotations
    """A comm hook that holds the bucket back on a stream of its own (a GPU sleep, then the all-reduce), as a slow
    network holds nccl's stream: the computation's stream goes on and waits only where DDP waits for the result."""
    import torch
    import torch.distributed as dist

    if not _side:
        _side.append(torch.cuda.Stream())
    side, buffer = _side[0], bucket.buffer()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(_SLEEP_CYCLES)
        work = dist.all_reduce(buffer, async_op=True)
    buffer.record_stream(side)
    return work.get_future().then(lambda f: f.value()[0])


def fp8_eager_notice() -> dict[str, Any]:
    """An fp8 model on the GPU run eagerly, then another compiled: the warnings each gave, and the compiled one's
    graph breaks (the hook must not add one)."""
    import warnings

    import torch

    from notebook_accel import Accelerator

    out: dict[str, Any] = {}
    for mode in ("eager", "compiled"):
        accelerator = Accelerator(mixed_precision="fp8")
        torch.manual_seed(0)
        model = accelerator.prepare(torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(4))))
        if mode == "compiled":
            torch._dynamo.reset()
            model = torch.compile(model)
        x = torch.randn(512, 256, device=accelerator.device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                model(x).float().sum().backward()
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
        out[mode] = {"warnings": [str(w.message) for w in caught if "fp8" in str(w.message)],
                     "graph_breaks": breaks}
    return out
