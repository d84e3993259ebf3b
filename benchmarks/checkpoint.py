"""Checkpoint cost: ``save_state`` / ``load_state`` against the same state saved and loaded by hand.

Two processes (forked by ``notebook_launcher``, gloo on CPU) hold a model of ``--size`` parameters (a stack of
``Linear(1024, 1024)`` blocks) and its AdamW state after one step, once prepared plainly (DDP: rank 0 writes the
weights and the optimizer state, every rank reads them) and once under FSDP (each rank writes and reads its
shards with ``torch.distributed.checkpoint``). The contenders, saving into a fresh folder each time:

- ``raw``: ``torch.save`` (plain) or ``dcp.save`` without fsync (FSDP), what a notebook does; not crash-safe;
- ``safe``: the crash-safe limit and the baseline of every ratio: the same files written into a temporary folder,
  each fsync'd, the folder renamed into place and its parent fsync'd (``safe2``, the same again: the A/A control);
- ``ours``: ``Accelerator.save_state`` (atomic folder, fsync, rename, per-rank RNG and a checksum of every file);
- ``accelerate``: accelerate's ``save_state`` on its own DDP copy of the model, as a peer (plain only, when
  accelerate is installed);
- ``two-call`` (FSDP only): ``save_state`` in the layout of checkpoint format 3, the model and its optimizer in
  DCP files of their own (two DCP calls), which ``load_state`` still reads: the layout change measured in the same
  rounds, so its effect is not lost in the machine's swings between runs.

Loading reads the folder each contender saved in that round: ``raw`` is ``torch.load`` + ``load_state_dict``
(``dcp.load`` + ``set_state_dict`` under FSDP) and the baseline there; ``raw2`` the A/A control. Contenders
rotate within each round (who goes first changes), so all see the same machine; the page cache is flushed
(``os.sync``) and old folders deleted between contenders, outside the clock. The script prints the median time of
each, and each ratio as the median over rounds of the per-round ratios, with their interquartile range (the least
and the most below 4 rounds).

Each contender's best round is printed too, as a ratio to the baseline's best (a busy machine lengthens a save or
a load but never shortens it, so the best rounds are the least disturbed), with the A/A control's.

``--saves-only`` times the saves alone (no loads), for more rounds in the same time. ``--loads-only`` saves once and then rotates only the loads, from the page cache, for more rounds in the same
time (default 12). It adds the CPU seconds of both processes, every thread counted (a checksum checked on a helper
thread costs CPU even where it costs no wall time), each as a ratio to raw's, with raw2 as the A/A control.

``--background`` measures ``save_state(async_save=True)`` instead: the time the loop is blocked per save against a
blocking save, and the step time while the writer runs against steps without one (see ``checkpoint_background.py``).

Usage: ``python benchmarks/checkpoint.py [--quick] [--size 50M] [--rounds N] [--engine plain|fsdp|both]
[--saves-only | --loads-only] [--background [--writers idle,nice,normal]]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.checkpointing.atomic import commit_dir, fsync_dir, make_dir, temp_sibling
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin

WIDTH = 1024


class Block(torch.nn.Module):
    """One ``Linear(WIDTH, WIDTH)`` with a ReLU: the unit FSDP shards."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def _model(params: int) -> torch.nn.Module:
    """About ``params`` parameters of blocks (same initial weights on every rank)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Block() for _ in range(max(1, round(params / (WIDTH * WIDTH + WIDTH))))])


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """One optimizer step, so AdamW holds its two buffers per parameter."""
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def _fsync_tree(path: str) -> None:
    """fsync every file of ``path`` and the folder itself."""
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(path)


def _plain_save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str, safe: bool) -> None:
    """Rank 0 writes ``model.bin`` and ``optimizer.bin``; with ``safe`` into a temporary folder, fsync'd and
    renamed into place."""
    if dist.get_rank() == 0:
        target = temp_sibling(path) if safe else path
        make_dir(target)
        torch.save(model.state_dict(), os.path.join(target, "model.bin"))
        torch.save(optimizer.state_dict(), os.path.join(target, "optimizer.bin"))
        if safe:
            _fsync_tree(target)
            commit_dir(target, path)


def _plain_load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Every rank reads both files and loads them."""
    model.load_state_dict(torch.load(os.path.join(path, "model.bin"), map_location="cpu", weights_only=True))
    optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.bin"), map_location="cpu", weights_only=True))


def _sharded_save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str, safe: bool) -> None:
    """Every rank writes its shards with DCP; with ``safe`` (DCP fsyncs each file) into a temporary folder that
    rank 0 renames into place."""
    target = temp_sibling(path) if safe else path
    target = [target]
    dist.broadcast_object_list(target)  # one folder for every rank
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state},
             storage_writer=dcp.FileSystemWriter(target[0], sync_files=safe))
    dist.barrier()
    if safe and dist.get_rank() == 0:
        commit_dir(target[0], path)


def _sharded_load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Every rank reads its shards into fresh state dicts and sets them."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _accelerate_peer(params: int) -> Any:
    """accelerate's Accelerator with its own prepared copy of the model (``None`` when it is not installed)."""
    try:
        import accelerate
    except ImportError:
        return None
    peer = accelerate.Accelerator(cpu=True)
    model = _model(params)
    model, optimizer = peer.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    _step(model, optimizer)
    return peer


def _two_call(save: Callable[[str], Any]) -> Callable[[str], None]:
    """``save`` with the FSDP layout of format 3: no model shares a DCP state with its optimizers."""
    from notebook_accel.engines.fsdp.layout import FsdpLayout

    def run(path: str) -> None:
        joint = FsdpLayout.__dict__["_group"]
        FsdpLayout._group = staticmethod(lambda index, context: None)  # type: ignore[method-assign]
        try:
            save(path)
        finally:
            FsdpLayout._group = joint  # type: ignore[method-assign]

    return run


def _timed(action: Callable[[], Any]) -> float:
    """Seconds ``action`` takes on the slowest rank (barriers on both sides)."""
    dist.barrier()
    start = time.perf_counter()
    action()
    dist.barrier()
    return time.perf_counter() - start


def _timed_cpu(action: Callable[[], Any]) -> tuple[float, float]:
    """``(wall seconds on the slowest rank, CPU seconds of both ranks' processes, every thread)``."""
    cpu = time.process_time()
    wall = _timed(action)
    spent = [0.0] * dist.get_world_size()
    dist.all_gather_object(spent, time.process_time() - cpu)
    return wall, sum(spent)


def measure_loads(engine: str, params: int, rounds: int) -> dict[str, Any]:
    """Worker body of ``--loads-only``: every contender saves once, then only the loads rotate for ``rounds`` rounds
    (plus one warm-up), all from the page cache; wall and CPU times come back."""
    saves, loads = _contenders(engine, params)
    root = [tempfile.mkdtemp(prefix="ckpt-bench-") if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(root)
    folders = {name: os.path.join(root[0], name) for name in saves}
    for name, save in saves.items():
        save(folders[name])
    times: dict[str, list[float]] = {f"load {n}": [] for n in loads}
    cpu: dict[str, list[float]] = {f"load {n}": [] for n in loads}
    names = list(loads)
    for r in range(rounds + 1):
        for name in names[r % len(names):] + names[:r % len(names)]:
            wall, spent = _timed_cpu(lambda: loads[name](folders["safe" if name.startswith("raw") else name]))
            if r:
                times[f"load {name}"].append(wall)
                cpu[f"load {name}"].append(spent)
    if dist.get_rank() == 0:
        shutil.rmtree(root[0], ignore_errors=True)
    return {"times": times, "cpu": cpu, "bytes": _bytes(params)}


def _contenders(engine: str, params: int) -> tuple[dict[str, Callable[[str], None]],
                                                               dict[str, Callable[[str], None]]]:
    """The save and load actions of every contender, each taking its folder."""
    plugin = FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD", transformer_cls_names_to_wrap=["Block"]) \
        if engine == "fsdp" else None
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = _model(params)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    _step(model, optimizer)
    if engine == "fsdp":
        save, load, inner = _sharded_save, _sharded_load, model
    else:
        save, load, inner = _plain_save, _plain_load, accelerator.unwrap_model(model)
    saves: dict[str, Callable[[str], None]] = {
        "safe": lambda p: save(inner, optimizer, p, True), "raw": lambda p: save(inner, optimizer, p, False),
        "ours": lambda p: accelerator.save_state(p), "safe2": lambda p: save(inner, optimizer, p, True)}
    loads: dict[str, Callable[[str], None]] = {
        "raw": lambda p: load(inner, optimizer, p), "ours": lambda p: accelerator.load_state(p),
        "raw2": lambda p: load(inner, optimizer, p)}
    if engine == "fsdp":
        saves["two-call"] = _two_call(lambda p: accelerator.save_state(p))
        loads["two-call"] = lambda p: accelerator.load_state(p)  # the layout is the checkpoint's
    peer = _accelerate_peer(params) if engine == "plain" else None
    if peer is not None:
        saves["accelerate"] = lambda p: peer.save_state(p)
        loads["accelerate"] = lambda p: peer.load_state(p)
    return saves, loads


def _clean(paths: list[str]) -> None:
    """Rank 0 deletes ``paths`` and flushes the page cache; every rank waits (outside the clock)."""
    dist.barrier()
    if dist.get_rank() == 0:
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)
        os.sync()
    dist.barrier()


def measure(engine: str, params: int, rounds: int, with_loads: bool = True) -> dict[str, Any]:
    """Worker body: rotate the contenders for ``rounds`` rounds (plus one warm-up); rank 0's times come back
    (``with_loads=False``: the saves only)."""
    saves, loads = _contenders(engine, params)  # the Accelerator brings up the process group
    loads = loads if with_loads else {}
    root = [tempfile.mkdtemp(prefix="ckpt-bench-") if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(root)
    times: dict[str, list[float]] = {f"save {n}": [] for n in saves} | {f"load {n}": [] for n in loads}
    for r in range(rounds + 1):
        folders = {name: os.path.join(root[0], f"{name}-{r}") for name in saves}
        names = list(saves)
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds = _timed(lambda: saves[name](folders[name]))
            if dist.get_rank() == 0:
                os.sync()  # what "raw" left unflushed is not written back during the next contender's fsyncs
            if r:
                times[f"save {name}"].append(seconds)
        names = list(loads)
        for name in names[r % len(names):] + names[:r % len(names)] if names else []:
            source = folders["safe" if name.startswith("raw") else name]
            seconds = _timed(lambda: loads[name](source))
            if r:
                times[f"load {name}"].append(seconds)
        _clean(list(folders.values()))
    if dist.get_rank() == 0:
        shutil.rmtree(root[0], ignore_errors=True)
    return {"times": times, "bytes": _bytes(params)}


def _bytes(params: int) -> int:
    """Bytes of the weights and AdamW's two buffers (float32)."""
    blocks = max(1, round(params / (WIDTH * WIDTH + WIDTH)))
    return 3 * 4 * blocks * (WIDTH * WIDTH + WIDTH)


def _parse_size(text: str) -> int:
    """``50M`` -> 50_000_000 parameters."""
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles of the per-round ratios (the least and the most below 4 rounds)."""
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def _report(engine: str, result: dict[str, Any], rounds: int) -> None:
    """The lines of one engine: medians, and the median of every per-round ratio against its baseline with the
    interquartile range over rounds."""
    times = result["times"]
    print(f"checkpoint [{engine}]: 2 processes (gloo, CPU), weights + AdamW {result['bytes'] / 2**20:.0f} MiB, "
          f"{rounds} rotating rounds")
    for kind, base in (("save", "save safe"), ("load", "load raw")):
        for name in [n for n in times if n.startswith(kind)]:
            ratios = [t / b for t, b in zip(times[name], times[base])]
            note = {"save safe": " (baseline: fsync + rename, the crash-safe limit)", "load raw": " (baseline)",
                    "save safe2": " (A/A control)", "load raw2": " (A/A control)"}.get(name, "")
            low, high = _quartiles(ratios)
            print(f"  {name:<16} {statistics.median(times[name]):7.3f} s   {statistics.median(ratios):.2f}x "
                  f"[IQR {low:.2f}-{high:.2f}]{note}")
    best = {name: min(values) for name, values in times.items()}  # load lengthens a round, never shortens it
    cpu = {name: min(values) for name, values in result.get("cpu", {}).items()}
    print("  best round (wall s): " + ", ".join(f"{n} {v:.3f}" for n, v in best.items()))
    if cpu:  # --loads-only: the CPU seconds of both ranks, every thread
        print("  least CPU of both ranks (s): " + ", ".join(f"{n[5:]} {v:.3f}" for n, v in cpu.items()))
    for kind, base in (("save", "save safe"), ("load", "load raw")):
        for name in [n for n in times if n.startswith(kind) and n != base]:
            spent = f", CPU {cpu[name] / cpu[base]:.3f}x" if name in cpu else ""
            control = " (A/A control)" if name in ("save safe2", "load raw2") else ""
            print(f"  best-round ratio {name} / {base[5:]}: wall {best[name] / best[base]:.3f}x{spent}{control}")
    for kind in ("save", "load"):
        if f"{kind} two-call" in times:  # the layout change, round by round
            ratios = [t / b for t, b in zip(times[f"{kind} ours"], times[f"{kind} two-call"])]
            print(f"  {kind} ours / two-call, per round: {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}]")


def _background(args: argparse.Namespace) -> None:
    """``--background``: the measurements of :mod:`checkpoint_background`, with this file's model."""
    import checkpoint_background

    rounds = args.rounds or (2 if args.quick else 8)
    params = _parse_size(args.size or ("4M" if args.quick else "8M"))
    for engine in ("plain", "fsdp") if args.engine == "both" else (args.engine,):
        writers = tuple(w for w in args.writers.split(",") if w)
        result = notebook_launcher(checkpoint_background.measure, (engine, params, rounds, _model, WIDTH, writers),
                                   num_processes=2, dashboard=False)
        checkpoint_background.report(engine, result, rounds, _bytes(params))


def main() -> None:
    """Parse flags, run each engine in fresh processes, print the lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model and fewer rounds (a smoke run)")
    parser.add_argument("--size", default=None, help="parameters of the model: 8M (default; quick 4M), 50M (the "
                                                     "issue's case: 572 MiB with AdamW)")
    parser.add_argument("--rounds", type=int, default=None, help="rotating rounds (default 7, quick 2)")
    parser.add_argument("--engine", choices=("plain", "fsdp", "both"), default="both")
    parser.add_argument("--saves-only", action="store_true", help="time the saves only (more rounds in the same "
                                                                   "time)")
    parser.add_argument("--loads-only", action="store_true", help="save once, then rotate only the loads (more "
                                                                   "rounds in the same time; adds CPU seconds)")
    parser.add_argument("--background", action="store_true", help="save_state(async_save=True): the time the loop "
                                                                   "is blocked and its step time while the writer "
                                                                   "runs (benchmarks/checkpoint_background.py)")
    parser.add_argument("--writers", default="idle,nice,normal", help="--background: the writer schedulings to "
                                                                      "measure (idle always; nice, normal)")
    args, _ = parser.parse_known_args()
    if args.background:
        _background(args)
        return
    rounds = args.rounds or (2 if args.quick else 12 if args.loads_only else 7)
    params = _parse_size(args.size or ("4M" if args.quick else "8M"))
    for engine in ("plain", "fsdp") if args.engine == "both" else (args.engine,):
        body, inputs = (measure_loads, (engine, params, rounds)) if args.loads_only else \
            (measure, (engine, params, rounds, not args.saves_only))
        result = notebook_launcher(body, inputs, num_processes=2, dashboard=False)
        _report(engine, result, rounds)


if __name__ == "__main__":
    main()
