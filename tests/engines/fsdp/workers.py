"""Worker bodies for the FSDP tests: the same training function under DDP (no plugin) and every FSDP strategy.

Each runs on every rank under ``notebook_launcher``; rank 0's return value (plain data) reaches the test.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, DataLoaderConfiguration, ProjectConfiguration
from notebook_accel.config import load_config
from notebook_accel.environment import FSDP, patched_environ
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.utils import set_seed

WIDTH = 16


class Block(torch.nn.Module):
    """A pre-norm residual MLP block: the "transformer layer" the tests wrap by class name."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.ff = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                      torch.nn.Linear(4 * width, width))
        self.calls = 0  # forward runs, recomputation under activation checkpointing included

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.ff(self.norm(x))


class TinyNet(torch.nn.Module):
    """Embedding, two Blocks, a head: about 4,600 parameters (``aux=True``: one more layer, ``aux``)."""

    def __init__(self, width: int = WIDTH, depth: int = 2, aux: bool = False) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, width)
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.aux = torch.nn.Linear(width, width) if aux else None
        self.head = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        if self.aux is not None:
            h = h + self.aux(h)
        return self.head(h)


def dataset(n: int = 80) -> TensorDataset:
    """A deterministic regression set."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, torch.sin(x.sum(dim=1, keepdim=True)))


def local_bytes(tensors: Any) -> int:
    """Bytes this rank holds for ``tensors`` (the local shard of a DTensor)."""
    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _plugin(strategy: str | None, options: dict[str, Any]) -> FullyShardedDataParallelPlugin | None:
    if strategy is None:
        return None
    return FullyShardedDataParallelPlugin(sharding_strategy=strategy, **{"transformer_cls_names_to_wrap": ["Block"],
                                                                         **options})


def _model(meta_off_rank0: bool, rank: int) -> torch.nn.Module:
    set_seed(0)
    if meta_off_rank0 and rank != 0:
        with torch.device("meta"):
            return TinyNet()
    return TinyNet()


def train(strategy: str | None, accumulation: int = 1, options: dict[str, Any] | None = None,
          config_path: str | None = None, fsdp_env: str | None = None, optimizer_first: bool = False,
          meta_off_rank0: bool = False, mixed_precision: str = "no", save_dir: str | None = None) -> dict[str, Any]:
    """Train TinyNet on 10 optimizer steps; return losses, clip norms, full weights and per-rank bytes."""
    plugin = _plugin(strategy, options or {})
    if config_path is not None:
        plugin = FullyShardedDataParallelPlugin(**(load_config(config_path).fsdp_plugin_kwargs or {}))
    with patched_environ({FSDP: fsdp_env}):
        accelerator = Accelerator(fsdp_plugin=plugin, gradient_accumulation_steps=accumulation,
                                  mixed_precision=mixed_precision, dataloader_config=DataLoaderConfiguration(data_seed=3))
    model = _model(meta_off_rank0, accelerator.process_index)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(80 * accumulation), batch_size=4, shuffle=True)
    if optimizer_first:
        optimizer, model, loader = accelerator.prepare(optimizer, model, loader)
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert accelerator.prepare(model) is model  # preparing again does not shard again
    losses, norms, gathered_rows = [], [], 0
    for x, y in loader:
        with accelerator.accumulate(model):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), 0.5)))
            optimizer.step()
            optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
        gathered_rows += accelerator.gather(out.detach()).shape[0]
    opt_state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    memory = accelerator.gather_object([local_bytes(model.parameters()), local_bytes(opt_state)])
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    saved = accelerator.save_model(model, save_dir) if save_dir is not None else None
    return {"losses": losses, "norms": norms, "weights": weights, "param_bytes": memory[0::2],
            "optimizer_bytes": memory[1::2], "type": accelerator.distributed_type.value, "gathered_rows": gathered_rows,
            "unwrapped_is_model": accelerator.unwrap_model(model) is model,
            "block_calls": sum(m.calls for m in model.modules() if isinstance(m, Block)), "saved": saved,
            "plugin": None if accelerator.fsdp_plugin is None else accelerator.fsdp_plugin.to_json()}


def steps(accelerator: Accelerator, model: Any, optimizer: Any, batches: Any, count: int,
          clip: bool = True) -> list[float]:
    """``count`` optimizer steps from the iterator ``batches`` (gradients clipped at 0.5 unless ``clip=False``:
    DeepSpeed clips inside its own step); the reduced losses."""
    losses = []
    for _ in range(count):
        x, y = next(batches)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        if clip:
            accelerator.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    return losses


def resume(strategy: str | None, directory: str, load: bool, before: int = 4, after: int = 4,
           state_dict_type: str = "SHARDED_STATE_DICT", aux: bool = False) -> dict[str, Any]:
    """Exact resume: train ``before`` steps and save (``load=False``) or load that checkpoint (``load=True``),
    then train ``after`` more; returns the losses after, the full weights and the checkpoint's files."""
    plugin = _plugin(strategy, {"state_dict_type": state_dict_type})
    accelerator = Accelerator(fsdp_plugin=plugin, dataloader_config=DataLoaderConfiguration(data_seed=3))
    set_seed(0)
    model = TinyNet(aux=aux)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(80), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    if load:
        untouched = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
        accelerator.load_state(directory)
        loaded = accelerator.get_state_dict(model)
        assert accelerator.is_main_process is False or any(not torch.equal(untouched[k], loaded[k]) for k in loaded)
        batches = iter(loader)
    else:
        batches = iter(loader)
        steps(accelerator, model, optimizer, batches, before)
        set_seed(123 + accelerator.process_index)  # the RNG state that must come back, different on each rank
        accelerator.step = 7 * before  # the step counter that must come back
        accelerator.save_state(directory)
    losses = steps(accelerator, model, optimizer, batches, after)
    weights = accelerator.get_state_dict(model)
    state = {k: v.tolist() for k, v in weights.items()}
    files = sorted(os.path.relpath(os.path.join(root, name), directory)
                   for root, _, names in os.walk(directory) for name in names)
    return {"losses": losses, "weights": state, "files": files, "step_count": int(optimizer.state_dict()["state"]
            [next(iter(optimizer.state_dict()["state"]))]["step"]) if optimizer.state else 0,
            "random": torch.rand(1).item(), "step": accelerator.step}


def resume_apart(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """:func:`resume`, saving in the layout before format 4, as the code before it wrote it: the model and its
    optimizer in DCP files of their own, two DCP calls (the per-object writers are kept, for these checkpoints)."""
    from notebook_accel.engines.fsdp.layout import FsdpLayout

    FsdpLayout._group = staticmethod(lambda index, context: None)  # type: ignore[method-assign]  # this worker only
    return resume(*args, **kwargs)


def resume_reading_nothing_back(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """:func:`resume`, where hashing a file after it was written fails: the save must hash while it writes."""
    import notebook_accel.checkpointing.atomic as atomic
    import notebook_accel.checkpointing.save as save

    def read_back(path: str, *rest: Any) -> Any:
        raise AssertionError(f"the save read {path} back to hash it")

    atomic.file_digest = save.file_digest = read_back  # type: ignore[assignment]  # this worker only
    return resume(*args, **kwargs)


def load_refused(directory: str, width: int, state_dict_type: str = "SHARDED_STATE_DICT",
                 trained: int = 0) -> dict[str, Any]:
    """Try to load ``directory`` into a FULL_SHARD TinyNet of ``width`` (trained ``trained`` steps first); the
    error, and whether anything changed."""
    accelerator = Accelerator(fsdp_plugin=_plugin("FULL_SHARD", {"state_dict_type": state_dict_type}))
    set_seed(1)
    model = TinyNet(width)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(80), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)  # the objects the checkpoint holds
    steps(accelerator, model, optimizer, iter(loader), trained)
    return {**attempt_load(accelerator, model, directory, optimizer), "optimizer_state": len(optimizer.state)}


def load_counting_opens(directory: str, width: int) -> dict[str, Any]:
    """Load ``directory`` into a FULL_SHARD TinyNet of ``width`` while counting, on every rank, how often each
    shard file (``.distcp``) is opened, whatever opens it (``open``, ``io.open``, ``os.open``, ``Path.open``)."""
    import builtins
    import collections
    import io
    import os

    accelerator = Accelerator(fsdp_plugin=_plugin("FULL_SHARD", {}))
    model = TinyNet(width)
    accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                        DataLoader(dataset(80), batch_size=4, shuffle=True))  # the objects the checkpoint holds
    opened: collections.Counter[str] = collections.Counter()
    real_open, real_os_open = builtins.open, os.open

    def note(path: Any) -> None:
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).endswith(".distcp"):
            opened[os.path.basename(os.fspath(path))] += 1

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        note(file)
        return real_open(file, *args, **kwargs)

    def counting_os_open(path: Any, *args: Any, **kwargs: Any) -> int:
        note(path)
        return real_os_open(path, *args, **kwargs)

    builtins.open = io.open = counting_open  # type: ignore[assignment]  # this worker only, for one load
    os.open = counting_os_open  # type: ignore[assignment]
    try:
        accelerator.load_state(directory)
    finally:
        builtins.open = io.open = real_open  # type: ignore[assignment]
        os.open = real_os_open  # type: ignore[assignment]
    return {"opened": accelerator.gather_object([dict(opened)])}


def _leaves(state: Any) -> list[Any]:
    """Every value in a nested state, tensors as copies of this rank's local data (a DTensor's shard)."""
    if isinstance(state, dict):
        return [leaf for key in sorted(state, key=str) for leaf in [repr(key), *_leaves(state[key])]]
    if isinstance(state, (list, tuple)):
        return [leaf for item in state for leaf in _leaves(item)]
    if isinstance(state, torch.Tensor):
        local = state.to_local() if isinstance(state, DTensor) else state
        return [local.detach().clone()]
    return [repr(state)]


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
                                    else x == y for x, y in zip(a, b))


def attempt_load(accelerator: Accelerator, model: Any, directory: str, optimizer: Any = None,
                 **load_options: Any) -> dict[str, Any]:
    """``load_state(directory, **load_options)``: the error (``"loaded"`` when none), and whether, on every rank,
    the full weights and (given ``optimizer``) every value of the optimizer's state dict are unchanged, bit for bit."""
    before = _leaves(accelerator.get_state_dict(model)) + _leaves(optimizer.state_dict() if optimizer else None)
    try:
        accelerator.load_state(directory, **load_options)
        error = "loaded"
    except Exception as e:  # noqa: BLE001 - the test reads the message
        error = f"{type(e).__name__}: {e}"
    after = _leaves(accelerator.get_state_dict(model)) + _leaves(optimizer.state_dict() if optimizer else None)
    return {"error": error, "unchanged": all(accelerator.gather_object([_same(before, after)]))}


def _automatic(project_dir: str) -> tuple[Accelerator, Any, Any, Any]:
    """A FULL_SHARD run with automatic checkpoint naming in ``project_dir``: accelerator, model, optimizer, batches."""
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    accelerator = Accelerator(fsdp_plugin=_plugin("FULL_SHARD", {}), project_config=config)
    set_seed(0)
    model = TinyNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(80), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, iter(loader)


def killed_mid_save(project_dir: str, victim: int) -> None:
    """Save checkpoint_0 after 2 steps; 2 steps later rank ``victim`` is SIGKILLed right after writing its shards
    of checkpoint_1 (before the manifest and the rename)."""
    accelerator, model, optimizer, batches = _automatic(project_dir)
    steps(accelerator, model, optimizer, batches, 2)
    accelerator.save_state()
    steps(accelerator, model, optimizer, batches, 2)
    if accelerator.process_index == victim:
        real = dcp.save

        def dies_after_writing(*args: Any, **kwargs: Any) -> Any:
            real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)

        dcp.save = dies_after_writing
    accelerator.save_state()


def killed_before_rename(project_dir: str) -> None:
    """Save checkpoint_0 after 2 steps; 2 steps later rank 0 is SIGKILLed right before renaming the complete
    checkpoint_1 into place."""
    import notebook_accel.checkpointing.atomic as atomic

    accelerator, model, optimizer, batches = _automatic(project_dir)
    steps(accelerator, model, optimizer, batches, 2)
    accelerator.save_state()
    steps(accelerator, model, optimizer, batches, 2)
    real = os.rename

    def dies_before_renaming(src: Any, dst: Any) -> None:
        if os.path.basename(os.fspath(dst)) == "checkpoint_1":
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)

    atomic.os.rename = dies_before_renaming  # type: ignore[assignment]  # this worker's os; it dies right after
    accelerator.save_state()


def load_newest(project_dir: str, then_save: bool = False) -> dict[str, Any]:
    """Automatic load of the newest complete checkpoint; its path and the optimizer's step count (and, with
    ``then_save``, the path of the next automatic save)."""
    accelerator, model, optimizer, _ = _automatic(project_dir)
    path = accelerator.load_state()
    state = optimizer.state_dict()["state"]
    out = {"path": path, "adam_step": int(state[next(iter(state))]["step"])}
    return {**out, "saved": accelerator.save_state()} if then_save else out
