# %% [markdown]
# # 2. From a single-device loop to the Accelerator
#
# You have a training loop that runs on one device. This notebook changes it, a few lines at a time, into one that
# runs on any number of processes, and checks that nothing else changed: two processes with 32 images each per step
# end with **the same weights** as one device with 64 images per step.
#
# You will also see what `prepare` does to a data loader (per-device vs effective batch size) and why
# `CUDA_VISIBLE_DEVICES` must be set before torch touches CUDA.

# %%
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits

from notebook_accel import Accelerator, notebook_launcher

# %% [markdown]
# The data is scikit-learn's digits dataset (shipped inside scikit-learn, no download). We keep the first 1,024
# images in their original order: 1,024 divides by 64, so every step sees a full batch and the comparison at the
# end is exact.

# %%
# NBVAL_CHECK_OUTPUT
digits = load_digits()
features = torch.tensor(digits.data[:1024], dtype=torch.float32) / 16.0
labels = torch.tensor(digits.target[:1024], dtype=torch.long)
train_set = TensorDataset(features, labels)
print(len(train_set), "images")

# %% [markdown]
# ## The loop you start from
#
# A plain PyTorch loop: build the model, move it and every batch to the device, step. It runs in the kernel.

# %%
def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def train_single_device(batch_size=64, epochs=1):
    device = torch.device("cpu")
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(train_set, batch_size=batch_size)
    for epoch in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


reference = train_single_device()

# %% [markdown]
# ## The lines that change
#
# ```diff
#  def train(batch_size=64, epochs=1):
# +    accelerator = Accelerator()
# -    device = torch.device("cpu")
# -    model = build_model().to(device)
# +    model = build_model()
#      optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
#      loader = DataLoader(train_set, batch_size=batch_size)
# +    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
#      for epoch in range(epochs):
#          for x, y in loader:
# -            x, y = x.to(device), y.to(device)
#              loss = nn.functional.cross_entropy(model(x), y)
#              optimizer.zero_grad()
# -            loss.backward()
# +            accelerator.backward(loss)
#              optimizer.step()
# -    return model.state_dict()
# +    return accelerator.unwrap_model(model).state_dict()
# ```
#
# - The device comes from the launch: `accelerator.device` (a GPU per process when there are GPUs, else the CPU).
# - `prepare` moves the model there and, with more than one process, wraps it in `DistributedDataParallel`, which
#   averages the gradients of all processes during `backward`.
# - `prepare` also shards the loader and moves each batch to the device, so the `.to(device)` line goes away.
# - `unwrap_model` gives back your own module (without the DDP wrapper), e.g. to save it.
#
# The function also returns a few facts about the loader, to look at below.

# %%
def train(batch_size=64, epochs=1):
    accelerator = Accelerator()
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(train_set, batch_size=batch_size)
    batches_before = len(loader)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
    facts = {
        "processes": accelerator.num_processes,
        "device": str(accelerator.device),
        "batches before prepare": batches_before,
        "batches per process after prepare": len(loader),
        "images per process per step": batch_size,
        "images per step, all processes": batch_size * accelerator.num_processes,
    }
    return accelerator.unwrap_model(model).state_dict(), facts

# %% [markdown]
# ## One process first
#
# With `num_processes=1` the launcher runs the function right here in the kernel (no fork), with the same
# `Accelerator` behaviour. The weights match the plain loop's:

# %%
weights_1, facts_1 = notebook_launcher(train, args=(64,), num_processes=1)

# %%
# NBVAL_CHECK_OUTPUT
def max_difference(a, b):
    return max((a[name] - b[name]).abs().max().item() for name in a)


print("1 process, 64 per step, same weights as the plain loop:", max_difference(weights_1, reference) < 1e-6)
for name, value in facts_1.items():
    print(f"  {name}: {value}")

# %% [markdown]
# ## Two processes, same effective batch
#
# Now two processes with **32 images each** per step. `prepare` gives each process whole batches of the original
# loader in turn (process 0 gets batches 0, 2, 4, ..., process 1 gets 1, 3, 5, ...), and DDP averages the two
# gradients, so each optimizer step sees the same 64 images as one step of the single-device loop.

# %%
weights_2, facts_2 = notebook_launcher(train, args=(32,), num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
print("2 processes x 32 per step, same weights as 1 x 64:", max_difference(weights_2, reference) < 1e-5)
for name, value in facts_2.items():
    print(f"  {name}: {value}")

# %% [markdown]
# Read the facts as a rule of thumb:
#
# - `batch_size` in your `DataLoader` is the **per-device** batch size,
# - the **effective** batch size is `batch_size x num_processes` (times `gradient_accumulation_steps`, notebook 3),
# - `len(loader)` after `prepare` is the number of steps **per process**: 1,024 / 32 = 32 batches, 16 each.
#
# If you scale out and keep the per-device batch, the effective batch grows: adjust the learning rate, or divide
# the per-device batch by the number of processes as done here.
#
# (The weights are equal up to float rounding, not bit for bit: averaging two half-batch gradients adds the same
# numbers in a different order than one full-batch gradient.)

# %% [markdown]
# ## Choosing GPUs: `CUDA_VISIBLE_DEVICES` before anything touches CUDA
#
# On a machine with GPUs, worker *i* uses visible GPU *i*. To choose which GPUs are visible, set the variable in
# the first cell of the notebook, **before** anything calls CUDA:
#
# ```python
# import os
# os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"   # or pass gpu_ids="0,1" to notebook_launcher
# ```
#
# CUDA reads the variable once, when it initialises, and a CUDA context made in the kernel cannot be used by
# processes forked from it. So the kernel itself must not initialise CUDA before a launch: no `model.cuda()`,
# `torch.randn(..., device="cuda")` or `torch.cuda.get_device_name()` in the notebook. Do GPU work inside the
# training function. If CUDA was initialised anyway, `notebook_launcher` refuses to fork and tells you to restart
# the kernel (a `CudaInitializedError`), instead of letting the workers crash.
#
# Here the launches above left the kernel free of CUDA:

# %%
# NBVAL_CHECK_OUTPUT
print("CUDA initialised in this kernel:", torch.cuda.is_initialized())

# %% [markdown]
# Next: notebook 3 adds mixed precision and gradient accumulation to the same loop.
