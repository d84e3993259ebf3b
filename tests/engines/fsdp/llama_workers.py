"""Worker body for the real user case: a tiny, randomly initialised LlamaForCausalLM under accelerate's FSDP YAML.

The model is built from a config only (nothing downloaded). With ``fsdp_cpu_ram_efficient_loading`` only rank 0
builds real weights; the other ranks build the model on the meta device and receive rank 0's weights.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from notebook_accel import Accelerator
from notebook_accel.config import load_config
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.utils import set_seed


def tiny_llama(meta: bool = False) -> torch.nn.Module:
    """Two decoder layers, hidden size 32, vocabulary 64: about 40,000 parameters."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    set_seed(0)
    if meta:
        with torch.device("meta"):
            return LlamaForCausalLM(config)
    return LlamaForCausalLM(config)


def train(config_path: str | None, save_dir: str) -> dict[str, Any]:
    """6 steps of next-token prediction; losses, whether rank 0 holds a shard, and the exported/saved paths."""
    plugin = None
    if config_path is not None:
        plugin = FullyShardedDataParallelPlugin(**(load_config(config_path).fsdp_plugin_kwargs or {}))
    accelerator = Accelerator(fsdp_plugin=plugin)
    meta = plugin is not None and plugin.cpu_ram_efficient_loading and accelerator.process_index != 0
    model = tiny_llama(meta)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)  # no Adam: its normalised steps amplify rounding
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens = torch.randint(0, 64, (12, 4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for batch in tokens[accelerator.process_index::accelerator.num_processes][:6]:
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    exported = accelerator.save_model(model, os.path.join(save_dir, "export"))
    checkpoint = accelerator.save_state(os.path.join(save_dir, "ckpt"))
    accelerator.load_state(checkpoint)
    total = sum(p.numel() for p in accelerator.get_state_dict(model).values())  # collective: every rank calls it
    return {"losses": losses, "local": local, "total": total, "exported": exported, "layers": sorted({type(m).__name__ for m in model.modules()
                                                    if hasattr(m, "reshard") and m is not model})}
