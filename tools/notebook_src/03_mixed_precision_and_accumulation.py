# %% [markdown]
# # 3. Mixed precision and gradient accumulation
#
# Two switches on the `Accelerator` that change how a step is computed, not what your loop looks like:
#
# - `mixed_precision="bf16"` (or `"fp16"` on GPUs) runs the model's forward pass under autocast: matrix products in
#   16-bit floats, which is faster and lighter on hardware that supports it, while the weights stay in 32 bits.
#   `"fp8"` goes further on recent NVIDIA GPUs, through torchao (see "fp8" below).
# - `gradient_accumulation_steps=k` adds up the gradients of `k` batches before each optimizer step, so you get the
#   effective batch of a bigger machine on a smaller one.
#
# Both can be set in the `Accelerator(...)` call, in `notebook_launcher(...)`, or in a config file (notebook 5).

# %%
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits

from notebook_accel import Accelerator, notebook_launcher, set_seed

# %% [markdown]
# The data is scikit-learn's digits dataset (shipped inside scikit-learn, no download): 1,797 8x8 images.

# %%
# NBVAL_CHECK_OUTPUT
digits = load_digits()
train_set = TensorDataset(
    torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target, dtype=torch.long)
)
print(len(train_set), "images")

# %% [markdown]
# ## Mixed precision
#
# The training function below records, with a forward hook, the dtype the first layer really computes in, and the
# dtype of what the model returns. The mixed precision mode is **not** written in the function: we pass it to the
# launcher, and it reaches every worker's `Accelerator`.

# %%
def train(epochs=2, batch_size=32):
    accelerator = Accelerator()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    seen = {}

    def record_dtype(module, inputs, output):
        seen.setdefault("first layer", output.dtype)

    model[0].register_forward_hook(record_dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(epochs):
        for x, y in loader:
            output = model(x)
            seen.setdefault("model output", output.dtype)
            loss = nn.functional.cross_entropy(output, y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            accelerator.log({"train/loss": loss.item()})
    return {
        "mixed_precision": accelerator.mixed_precision,
        "first layer computes in": str(seen["first layer"]),
        "model returns": str(seen["model output"]),
        "weights stored in": str(next(model.parameters()).dtype),
        "last loss": loss.item(),
    }

# %%
full = notebook_launcher(train, num_processes=2, mixed_precision="no")

# %%
bf16 = notebook_launcher(train, num_processes=2, mixed_precision="bf16")

# %%
# NBVAL_CHECK_OUTPUT
for name in ("mixed_precision", "first layer computes in", "model returns", "weights stored in"):
    print(f"{name:>24}: {full[name]:>14} | {bf16[name]}")
print("bf16 trains as well as fp32:", abs(bf16["last loss"] - full["last loss"]) < 0.1)

# %% [markdown]
# What happened:
#
# - under `bf16` the linear layers computed in `torch.bfloat16`, but the model's output was converted back to
#   `torch.float32`, so the loss and everything after it is computed in full precision,
# - the weights (and the optimizer's state) stay in `float32`: only the arithmetic of the forward pass is cheaper,
# - `mixed_precision=` given to the launcher reached the workers' `Accelerator()`. (Accelerate's
#   `notebook_launcher` silently ignores this argument.)
#
# `"fp16"` is for GPUs without bf16 support (it runs on a CPU too, but brings nothing there): it also scales the
# loss with a `GradScaler` so that small gradients do not vanish in 16 bits, and skips the optimizer step when a
# gradient overflowed (`accelerator.optimizer_step_was_skipped`). `"bf16"` has the range of `float32` and needs no
# scaler, which is why it is the mode to try first.

# %% [markdown]
# ## fp8 (torchao)
#
# On NVIDIA GPUs of compute capability 8.9 or newer (H100, H200, L4, L40S, RTX 4090, B200), `mixed_precision="fp8"`
# multiplies in 8-bit floats: `prepare` swaps the model's `nn.Linear` layers for torchao's float8 layers (install the
# extra: `pip install "notebook-accel[fp8]"`) and runs everything else under bf16 autocast. torchao's rules choose the
# layers: both dimensions must be multiples of 16, and the model's first and last `Linear` stay in high precision,
# because float8's rounding hurts them most.
#
# This notebook runs on the CPU, so fp8 is refused before anything starts, with what is missing and the way out:

# %% tags=["raises-exception"]
notebook_launcher(train, num_processes=2, use_cpu=True, mixed_precision="fp8")

# %% [markdown]
# torchao can *emulate* its float8 arithmetic with ordinary matrix products: the same rounding, on any device, only
# slower. That is how fp8 is tried (and tested) without such a GPU. A config file asks for it with accelerate's
# `fp8_config` section plus `emulate: true`; here is the same config built in Python. The model gets a middle layer so
# that one `Linear` is neither first nor last:

# %%
from notebook_accel import Config
from notebook_accel.float8.convert import float8_module_names

emulated_fp8 = Config(num_processes=2, use_cpu=True, mixed_precision="fp8",
                      extra={"fp8_config": {"backend": "AO", "emulate": True}})


def train_deeper(epochs=2, batch_size=32):
    accelerator = Accelerator()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses = []
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    inner = accelerator.unwrap_model(model)
    return {
        "mixed_precision": accelerator.mixed_precision,
        "float8 layers": float8_module_names(inner),
        "layer types": [type(m).__name__ for m in inner if not isinstance(m, nn.ReLU)],
        "weights stored in": str(inner[2].weight.dtype),
        "late loss": sum(losses[-10:]) / 10,
    }

# %%
fp8 = notebook_launcher(train_deeper, config=emulated_fp8)

# %%
bf16_deeper = notebook_launcher(train_deeper, num_processes=2, use_cpu=True, mixed_precision="bf16")

# %%
# NBVAL_CHECK_OUTPUT
for name in ("mixed_precision", "float8 layers", "layer types", "weights stored in"):
    print(f"{name:>17}: {fp8[name]}")
print("fp8 trains as well as bf16:", abs(fp8["late loss"] - bf16_deeper["late loss"]) < 0.1)

# %% [markdown]
# Only the middle layer became a `Float8Linear`; its weights stay in `float32` (float8 copies are made for each
# matrix product, with a scale per tensor). The header line of the launch said `mixed precision fp8 (torchao)`.
# `save_model` writes ordinary float32 weights, and `save_state`/`load_state` resume exactly, as with bf16. On a real
# fp8 GPU, drop `emulate: true` (or pass `mixed_precision="fp8"` to the launcher); DDP and FSDP both work.

# %% [markdown]
# ## Gradient accumulation
#
# With `gradient_accumulation_steps=2`, write the loop as usual inside `with accelerator.accumulate(model):`. The
# `Accelerator` then:
#
# - divides each loss by 2 in `backward`, so two accumulated batches give the gradient of their average,
# - skips the gradient exchange between processes on the first batch of each pair (DDP's `no_sync`), which saves
#   communication,
# - makes `optimizer.step()` and `optimizer.zero_grad()` do nothing until the second batch, when
#   `accelerator.sync_gradients` is `True`,
# - and always steps on the **last batch of the loader**, even when the pair is incomplete, so no gradient is lost.
#
# The function records `sync_gradients` after every batch of one epoch of 320 images: 32 per process per batch, two
# processes, so 5 batches per process.

# %%
def accumulation_pattern(gradient_accumulation_steps=2, batch_size=32):
    accelerator = Accelerator(gradient_accumulation_steps=gradient_accumulation_steps)
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    subset = torch.utils.data.Subset(train_set, range(320))
    loader = DataLoader(subset, batch_size=batch_size)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    pattern, optimizer_steps = [], 0
    for x, y in loader:
        with accelerator.accumulate(model):
            before = next(model.parameters()).detach().clone()
            accelerator.backward(nn.functional.cross_entropy(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            pattern.append(accelerator.sync_gradients)
            optimizer_steps += int(not torch.equal(before, next(model.parameters())))
    effective = batch_size * accelerator.num_processes * accelerator.gradient_accumulation_steps
    return {"sync_gradients": pattern, "optimizer steps": optimizer_steps, "effective batch size": effective}

# %%
accumulation = notebook_launcher(accumulation_pattern, num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
for name, value in accumulation.items():
    print(f"{name}: {value}")

# %% [markdown]
# Five batches, accumulated in pairs: the weights changed after batches 2 and 4, and after batch 5, the end of the
# loader. The effective batch size is 32 (per process) x 2 (processes) x 2 (accumulation) = 128.
#
# ## Both together
#
# The two switches combine. Here is the training from above with both, this time written into the
# `Accelerator(...)` call (an argument given there wins over the launcher's and the config file's):

# %%
def train_both(epochs=2, batch_size=32):
    accelerator = Accelerator(mixed_precision="bf16", gradient_accumulation_steps=2)
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step, losses = 0, []
    for epoch in range(epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            step += 1
            losses.append(loss.item())
            accelerator.log({"train/loss": loss.item()}, step=step)
    return {"mixed_precision": accelerator.mixed_precision, "steps": step, "losses": losses}

# %%
both = notebook_launcher(train_both, num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
first, last = sum(both["losses"][:5]) / 5, sum(both["losses"][-5:]) / 5
print(f"{both['mixed_precision']}, {both['steps']} batches per process")
print("loss fell by more than half:", last < first / 2)
