"""Worker bodies for the fp8 tests: a small transformer trained by one function under bf16 or emulated fp8, with
DDP or FSDP, saving or resuming a checkpoint. torchao is imported inside the functions (the tests skip without it).

Each runs on every rank under ``notebook_launcher``; rank 0's return value (plain data) reaches the test.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, AORecipeKwargs
from notebook_accel.engines.fsdp import FullyShardedDataParallelPlugin
from notebook_accel.float8.convert import float8_module_names
from notebook_accel.utils import set_seed

VOCAB, WIDTH, SEQ = 64, 32, 16


class Block(torch.nn.Module):
    """A pre-norm transformer layer: causal self-attention and an MLP, every Linear a multiple of 16 wide."""

    def __init__(self, width: int = WIDTH, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(torch.nn.Module):
    """Token embedding, two Blocks, a vocabulary head (about 30,000 parameters)."""

    def __init__(self, depth: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(depth))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _data(samples: int = 128) -> TensorDataset:
    """Sequences of a fixed random permutation walk: each token says the next one (learnable in a few steps)."""
    g = torch.Generator().manual_seed(1)
    following = torch.randperm(VOCAB, generator=g)
    start = torch.randint(0, VOCAB, (samples,), generator=g)
    seq = [start]
    for _ in range(SEQ):
        seq.append(following[seq[-1]])
    tokens = torch.stack(seq, dim=1)
    return TensorDataset(tokens[:, :-1], tokens[:, 1:])


def _accelerator(precision: str, fsdp: bool, project_dir: str | None) -> Accelerator:
    """bf16, or fp8 with torchao's emulation (what runs on a CPU); FSDP wraps each Block."""
    handlers: list[Any] = []
    if precision == "fp8":
        from torchao.float8 import Float8LinearConfig

        handlers.append(AORecipeKwargs(config=Float8LinearConfig(emulate=True, enable_fsdp_float8_all_gather=fsdp)))
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block"]) if fsdp else None
    return Accelerator(mixed_precision=precision, kwargs_handlers=handlers, fsdp_plugin=plugin,
                       project_dir=project_dir)


def train(precision: str, fsdp: bool = False, steps: int = 16, save_at: int | None = None,
          resume: str | None = None, folder: str | None = None) -> dict[str, Any]:
    """Train ``steps`` optimizer steps; save the state after step ``save_at`` into ``folder``, or start from
    ``resume``. Returns the mean loss of every step, the float8 layers, and where the state was saved."""
    accelerator = _accelerator(precision, fsdp, folder)
    set_seed(0)
    model = TinyTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(_data(), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    done, saved = 0, None
    if resume is not None:
        accelerator.load_state(resume)
        done = save_at or 0
    losses: list[float] = []
    while done < steps:
        for tokens, targets in loader:
            loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(accelerator.reduce(loss.detach(), "mean").item())
            done += 1
            if done == save_at and resume is None:
                saved = accelerator.save_state(f"{folder}/step_{done}")
            if done == steps:
                break
    unwrapped = accelerator.unwrap_model(model)
    return {"losses": losses, "float8": float8_module_names(unwrapped), "saved": saved,
            "types": sorted({type(m).__name__ for m in unwrapped.modules() if isinstance(m, torch.nn.Linear)})}


def save_weights(folder: str) -> dict[str, Any]:
    """Train two steps in emulated fp8 and ``save_model`` into ``folder``; the float8 layers' names."""
    accelerator = _accelerator("fp8", False, None)
    set_seed(0)
    model = accelerator.prepare(TinyTransformer())
    loss = F.cross_entropy(model(_data()[:8][0]).flatten(0, 1), _data()[:8][1].flatten())
    accelerator.backward(loss)
    accelerator.save_model(model, folder)
    return {"float8": float8_module_names(accelerator.unwrap_model(model))}
