"""Worker bodies for resuming FSDP checkpoints with another number of processes (tests/fsdp/test_reshard.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
from torch.utils.data import DataLoader

from notebook_accel import Accelerator, DataLoaderConfiguration
from notebook_accel.utils import set_seed
from tests.engines.fsdp.workers import TinyNet, _plugin, dataset, steps


def _full_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The full AdamW state keyed by parameter name, as lists (collective; rank 0 gets it)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_optimizer_state_dict(model, optimizer, options=options).get("state", {})  # empty off rank 0
    return {name: {k: v.tolist() for k, v in buffers.items()} for name, buffers in state.items()}


def _prepared(state_dict_type: str, seed: int) -> tuple[Accelerator, Any, Any, Any]:
    accelerator = Accelerator(fsdp_plugin=_plugin("FULL_SHARD", {"state_dict_type": state_dict_type}),
                              dataloader_config=DataLoaderConfiguration(data_seed=3))
    set_seed(seed)
    model = TinyNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = DataLoader(dataset(80), batch_size=4, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader


def _state(accelerator: Accelerator, model: Any, optimizer: Any) -> dict[str, Any]:
    weights = {k: v.tolist() for k, v in accelerator.get_state_dict(model).items()}
    return {"weights": weights, "optimizer": _full_optimizer(model, optimizer), "step": accelerator.step,
            "world": accelerator.num_processes, "sharded": accelerator.distributed_type.value}


def save(directory: str, state_dict_type: str = "SHARDED_STATE_DICT") -> dict[str, Any]:
    """Train 4 steps under FULL_SHARD (one process: the same plugin, nothing to shard) and save; the state saved."""
    accelerator, model, optimizer, loader = _prepared(state_dict_type, 0)
    steps(accelerator, model, optimizer, iter(loader), 4)
    accelerator.step = 4
    accelerator.save_state(directory)
    return _state(accelerator, model, optimizer)


def load(directory: str, state_dict_type: str = "SHARDED_STATE_DICT", allow: bool = True) -> dict[str, Any]:
    """A fresh model (other seed) loads ``directory`` (``allow``: with ``allow_world_size_change``); the state
    loaded, then one more step works on every rank. A refused load returns its error and whether anything changed.
    """
    accelerator, model, optimizer, loader = _prepared(state_dict_type, 1)
    before = accelerator.get_state_dict(model)
    rng = torch.get_rng_state()
    try:
        accelerator.load_state(directory, allow_world_size_change=allow)
    except Exception as e:  # noqa: BLE001 - the test reads the message
        after = accelerator.get_state_dict(model)
        return {"error": f"{type(e).__name__}: {e}", "optimizer_state": len(optimizer.state),
                "unchanged": all(torch.equal(before[k], after[k]) for k in before)}
    out = _state(accelerator, model, optimizer)
    out["rng_kept"] = torch.equal(rng, torch.get_rng_state())
    out["loss"] = steps(accelerator, model, optimizer, iter(loader), 1)[0]
    return out
