# %% [markdown]
# # 8. Models that do not fit one device: FSDP and DeepSpeed ZeRO
#
# With plain data parallelism (DDP) every process holds a whole copy of the model's parameters, its gradients and
# the optimizer's state (for Adam, two more tensors the size of the model). Sharded engines split these across the
# processes, so each one holds about 1/N of them:
#
# | engine | what each process holds whole | what is split across processes |
# | --- | --- | --- |
# | DDP | parameters, gradients, optimizer state | nothing |
# | FSDP `FULL_SHARD` (torch's `fully_shard`) | one block's parameters, only while it runs | parameters, gradients, optimizer state |
# | DeepSpeed ZeRO-3 | one layer's parameters, only while it runs | parameters, gradients, optimizer state (and an fp32 master copy of the parameters) |
#
# (ZeRO-1 splits only the optimizer state, ZeRO-2 also the gradients; FSDP's `SHARD_GRAD_OP` is like ZeRO-2.)
#
# This notebook trains **the same training function** under DDP, FSDP and ZeRO-3, changing only the engine given to
# the `Accelerator`, and shows what each process held. The engine can also come from accelerate's config file
# (`distributed_type: FSDP` with an `fsdp_config` block, or `DEEPSPEED` with a `deepspeed_config` block).
#
# It runs on two CPU processes (gloo); on GPUs the same code runs with NCCL. DeepSpeed is optional:
# `pip install "notebook-accel[deepspeed]"`.

# %%
import importlib.util
import warnings

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, FullyShardedDataParallelPlugin, held_memory, notebook_launcher, set_seed
from notebook_accel import DeepSpeedPlugin

HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None

# %% [markdown]
# A model made of repeated blocks, like a transformer's layers: FSDP shards it block by block (its *auto-wrap*
# policy names the block class), so only one block's full parameters exist at a time during forward and backward.

# %%
class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def make_model(width=128, blocks=4):
    return nn.Sequential(nn.Linear(64, width), *(Block(width) for _ in range(blocks)), nn.Linear(width, 10))


digits = load_digits()
images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
labels = torch.tensor(digits.target, dtype=torch.long)
train_set = TensorDataset(images[:1500], labels[:1500])
test_set = TensorDataset(images[1500:], labels[1500:])
parameter_count = sum(p.numel() for p in make_model().parameters())
print(f"{parameter_count / 1e6:.2f} M parameters, {parameter_count * 4 / 2**20:.1f} MiB in fp32")

# %% [markdown]
# ## One training function, three engines
#
# `engine_options(name)` is the only thing that differs: the plugin handed to the `Accelerator`. Everything else
# (`prepare`, `backward`, `step`, `gather_for_metrics`, `get_state_dict`) is the same code.
#
# `held_memory(model, optimizer)` (notebook-accel's own, not an accelerate function) counts the bytes this process
# holds for training: parameters, gradients and optimizer state; for a sharded engine only this process's shard.
# It is read right after the first `optimizer.step()`, before `zero_grad()`, when DDP and FSDP hold all three at
# once. DeepSpeed steps inside `accelerator.backward` and frees its reduced gradients there; ZeRO-3 keeps a buffer
# for this process's gradient partition between steps, and that buffer is what its gradient column shows.
# `gather_object` collects every process's count, and the function keeps the larger (uneven shards differ slightly).

# %%
def engine_options(name):
    if name == "FSDP FULL_SHARD":
        return {"fsdp_plugin": FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD",
                                                               transformer_cls_names_to_wrap="Block")}
    if name == "ZeRO-3":
        return {"deepspeed_plugin": DeepSpeedPlugin(zero_stage=3)}
    return {}


def train(name, epochs=5):
    # DeepSpeed calls torch collectives that torch marks deprecated; keep that warning out of the output
    warnings.filterwarnings("ignore", message=r".*is deprecated. Please use `torch\.distributed", category=FutureWarning)
    accelerator = Accelerator(**engine_options(name))
    set_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    train_loader = DataLoader(train_set, batch_size=50, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=50)
    model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, test_loader)
    held = None
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            if held is None:  # after the first step: everything is allocated
                held = held_memory(model, optimizer)
            optimizer.zero_grad()
            accelerator.log({"train/loss": loss.item()})
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_loader:
            predictions = accelerator.gather_for_metrics(model(x).argmax(dim=1))
            correct += (predictions == accelerator.gather_for_metrics(y)).sum().item()
            total += len(predictions)
    full_weights = accelerator.get_state_dict(model)  # gathered from every shard onto the main process
    return {"engine": name, "held": max(accelerator.gather_object([held]), key=lambda h: h.total),
            "accuracy": correct / total, "weights": sum(t.numel() for t in full_weights.values())}

# %% [markdown]
# ## Run each engine

# %%
engines = ["DDP", "FSDP FULL_SHARD"] + (["ZeRO-3"] if HAVE_DEEPSPEED else [])
if not HAVE_DEEPSPEED:
    print('deepspeed is not installed: the ZeRO-3 row is left out (pip install "notebook-accel[deepspeed]")')
results = [notebook_launcher(train, args=(name,), num_processes=2) for name in engines]

# %% [markdown]
# ## What each process held
#
# The table shows the process that held the most. FSDP holds half of DDP's bytes on each of the two processes.
# ZeRO-3 holds half of the parameters, gradients and Adam moments too, plus an fp32 *master* copy of its half of
# the parameters, which its optimizer steps on (in bf16 training that copy is what keeps full precision; in fp32
# training, as here, it is a second copy): its optimizer column includes it, so its total is about 5/8 of DDP's.
# Not counted for any engine: activations, and the one block's (or layer's) parameters a sharded engine gathers
# while it runs.

# %%
MiB = 2**20
ddp_total = results[0]["held"].total
print(f"{'engine':<16}{'params':>9}{'grads':>9}{'optimizer':>11}{'total':>9}{'vs DDP':>8}  test accuracy")
for r in results:
    h = r["held"]
    print(f"{r['engine']:<16}{h.parameters / MiB:>8.2f}M{h.gradients / MiB:>8.2f}M{h.optimizer / MiB:>10.2f}M"
          f"{h.total / MiB:>8.2f}M{h.total / ddp_total:>7.2f}x  {r['accuracy']:.3f}")

# %% [markdown]
# ## Checks
#
# This cell fails if sharding stops sharding, or if an engine trains differently: each sharded engine holds at
# most about half of DDP's parameters, the totals are what the table above says they should be, every engine
# reaches about the same accuracy, and `get_state_dict` gives back every weight of the model under each engine.

# %%
by_engine = {r["engine"]: r for r in results}
ddp = by_engine["DDP"]["held"]
fsdp = by_engine["FSDP FULL_SHARD"]["held"]
assert fsdp.parameters <= 0.55 * ddp.parameters and fsdp.total <= 0.55 * ddp.total, (fsdp, ddp)
if "ZeRO-3" in by_engine:
    zero = by_engine["ZeRO-3"]["held"]
    assert zero.parameters <= 0.55 * ddp.parameters and zero.total <= 0.65 * ddp.total, (zero, ddp)
accuracies = [r["accuracy"] for r in results]
assert min(accuracies) > 0.85 and max(accuracies) - min(accuracies) < 0.05, accuracies
assert all(r["weights"] == parameter_count for r in results), [r["weights"] for r in results]
print("sharding holds:", ", ".join(f"{r['engine']} {r['held'].total / ddp_total:.2f}x DDP" for r in results[1:]))
