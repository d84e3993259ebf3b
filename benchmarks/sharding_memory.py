"""Per-rank memory of parameters + gradients + optimizer state, and step time: DDP, each FSDP strategy, ZeRO 1-3.

Two processes (forked by ``notebook_launcher``, gloo on CPU) train the same model in the same run, each contender
through its own ``Accelerator``: plain DDP, and ``FullyShardedDataParallelPlugin`` with FULL_SHARD, SHARD_GRAD_OP,
NO_SHARD and HYBRID_SHARD (one machine, so HYBRID_SHARD's shard group is both processes), and ``DeepSpeedPlugin`` with
ZeRO stages 1, 2 and 3 (when deepspeed is installed). All live at once and take one step each per round, who goes
first rotating, so they share the machine's state. The model is a stack of pre-norm residual MLP blocks, each block wrapped by class name, with AdamW.

Memory is what this rank holds for the three at the fullest point of a step, as ``held_memory(model, optimizer)``
counts it (distinct storages; a DTensor's local shard; ZeRO-3's partitions): for DDP and FSDP after
``optimizer.step()``, before ``zero_grad()`` (parameters, gradients and the two Adam moments all live). It leaves out
activations and FSDP's short-lived gathered copy of the one block that is running (plus the next one, prefetched),
which is printed separately as "transient": one block's parameters. DeepSpeed steps inside ``accelerator.backward``
and frees its reduced gradients in its step, so its bytes are counted inside that step, right after the torch
optimizer's; "optim" then holds the Adam moments plus the fp32 master partitions ZeRO keeps beside the module's
weights (a second copy even in fp32 training).
Step time is the median of the slowest rank's time; "time vs DDP" the median of the per-round ratios to DDP.

The default model is about 100 MB of fp32 parameters (a few hundred MB would make each CPU step take seconds on
this shared 2-core machine; ``--blocks``/``--width`` scale it).

Usage: ``python benchmarks/sharding_memory.py [--width 1024] [--blocks 3] [--rounds 10]``
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist

from notebook_accel import Accelerator, held_memory, notebook_launcher
from notebook_accel.engines.deepspeed import DeepSpeedPlugin
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

FSDP = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
ZERO = ("ZeRO-1", "ZeRO-2", "ZeRO-3") if importlib.util.find_spec("deepspeed") else ()
CONTENDERS = ("DDP", *FSDP, *ZERO)
BATCH = 8


class Block(torch.nn.Module):
    """Pre-norm residual MLP block (8 * width**2 parameters)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _model(width: int, blocks: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(Block(width) for _ in range(blocks)), torch.nn.Linear(width, 1))


def _plugins(name: str) -> dict[str, Any]:
    """The Accelerator's engine arguments for contender ``name``."""
    if name in FSDP:
        return {"fsdp_plugin": FullyShardedDataParallelPlugin(sharding_strategy=name,
                                                              transformer_cls_names_to_wrap="Block")}
    if name in ZERO:
        return {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=int(name[-1]))}
    return {}


class _Contender:
    """One contender's Accelerator, model and optimizer, stepped one step at a time."""

    def __init__(self, name: str, width: int, blocks: int) -> None:
        self.accelerator = Accelerator(**_plugins(name))
        model = _model(width, blocks)
        inner = torch.optim.AdamW(model.parameters(), lr=1e-4)
        settings = {"train_micro_batch_size_per_gpu": BATCH} if name in ZERO else {}
        if settings:  # no DataLoader here: the micro batch size goes into the DeepSpeed config
            self.accelerator.deepspeed_plugin.deepspeed_config.update(settings)
        self.model, self.optimizer = self.accelerator.prepare(model, inner)
        self.x = torch.randn(BATCH, width)
        self.held = (0, 0, 0)
        self.zero = name in ZERO
        if self.zero:  # count inside DeepSpeed's step, right after the torch optimizer's step
            real_step = inner.step

            def counted(*args: Any, **kwargs: Any) -> Any:
                result = real_step(*args, **kwargs)
                self.held = dataclasses.astuple(held_memory(self.model, self.optimizer))
                return result

            inner.step = counted  # type: ignore[method-assign]

    def step(self) -> float:
        """One training step; the slowest rank's seconds. Records the bytes held at the step's fullest point."""
        dist.barrier()
        start = time.perf_counter()
        self.accelerator.backward(self.model(self.x).pow(2).mean())
        self.optimizer.step()
        if not self.zero:
            self.held = dataclasses.astuple(held_memory(self.model, self.optimizer))
        self.optimizer.zero_grad()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        return elapsed.item()


def measure(width: int, blocks: int, rounds: int) -> dict[str, Any]:
    """Worker body: every contender steps once per round, who goes first rotating; rank 0's results come back."""
    contenders = {name: _Contender(name, width, blocks) for name in CONTENDERS}
    times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for r in range(rounds + 2):  # two warm-up rounds
        order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
        measured = {name: contenders[name].step() for name in order}
        if r >= 2:
            for name in CONTENDERS:
                times[name].append(measured[name])
    first = next(iter(contenders.values())).accelerator
    held = {name: first.gather_object([c.held]) for name, c in contenders.items()}
    return {name: {"held": held[name], "step": statistics.median(times[name]),
                   "ratio": statistics.median(t / d for t, d in zip(times[name], times["DDP"]))}
            for name in CONTENDERS}


def main() -> None:
    """Parse flags, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10, help="timed rounds, one step of each contender per round")
    args = parser.parse_args()
    results = notebook_launcher(measure, (args.width, args.blocks, args.rounds), num_processes=2, dashboard=False,
                                use_cpu=True)
    model_bytes = sum(p.numel() * 4 for p in _model(args.width, args.blocks).parameters())
    block_bytes = 8 * args.width**2 * 4
    mib = 1 << 20
    print(f"sharding_memory: 2 processes (gloo, CPU), {args.blocks} blocks of width {args.width} + head "
          f"= {model_bytes / mib:.1f} MiB fp32 parameters, AdamW, batch {BATCH}/process, {args.rounds} rotating rounds of one step each")
    print(f"{'contender':<14} {'params':>9} {'grads':>9} {'optim':>9} {'total/rank':>11} {'vs DDP':>7} "
          f"{'step ms':>8} {'time vs DDP':>11}")
    ddp_total = max(sum(h) for h in results["DDP"]["held"])
    for name in CONTENDERS:
        held, step = results[name]["held"], results[name]["step"]
        worst = max(held, key=sum)  # the rank holding the most (uneven shards differ by a few rows)
        print(f"{name:<14} {worst[0] / mib:>7.1f}Mi {worst[1] / mib:>7.1f}Mi {worst[2] / mib:>7.1f}Mi "
              f"{sum(worst) / mib:>9.1f}Mi {sum(worst) / ddp_total:>6.2f}x {step * 1e3:>8.1f} "
              f"{results[name]['ratio']:>10.2f}x")
    print(f"transient (FSDP strategies): + one gathered block, {block_bytes / mib:.1f} MiB, during its forward and "
          "backward (two with prefetch); activations are not counted for any contender")


if __name__ == "__main__":
    main()
