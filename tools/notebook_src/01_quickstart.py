# %% [markdown]
# # 1. Quickstart: train on two processes from this notebook
#
# In this notebook you train a small classifier on **two worker processes forked from this kernel**, watch it on the
# live dashboard, and evaluate it on held-out images. It runs in well under a minute on a laptop CPU.
#
# You will see three things:
#
# 1. a training function written with the `Accelerator` API (the names Hugging Face accelerate users know),
# 2. one call, `notebook_launcher(train, args=(...), num_processes=2)`, that runs it on two processes,
# 3. the dashboard under the launch cell, and **rank 0's return value** coming back to the notebook.

# %%
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, notebook_launcher, set_seed

# %% [markdown]
# ## The data
#
# scikit-learn ships the *digits* dataset inside the package, so nothing is downloaded: 1,797 grey 8x8 images of
# handwritten digits with pixel values 0-16. We scale the pixels to [0, 1], flatten each image to 64 features and,
# with a fixed seed, keep 360 images aside for evaluation.
#
# The tensors live in the kernel. The workers are *forked* from the kernel, so they see `train_set` and `test_set`
# without any copying or pickling.

# %%
# NBVAL_CHECK_OUTPUT
from sklearn.datasets import load_digits

digits = load_digits()
features = torch.tensor(digits.data, dtype=torch.float32) / 16.0
labels = torch.tensor(digits.target, dtype=torch.long)
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
test_set = TensorDataset(features[order[:360]], labels[order[:360]])
train_set = TensorDataset(features[order[360:]], labels[order[360:]])
print(f"{len(train_set)} training images, {len(test_set)} test images, {features.shape[1]} features each")

# %% [markdown]
# ## The training function
#
# Everything that touches the model happens inside one function; the launcher runs it once in every worker.
# Compared with a plain PyTorch loop, four things are different:
#
# - `accelerator = Accelerator()` reads who this process is (rank, world size, device) from the launch,
# - `accelerator.prepare(...)` moves the model to the device, wraps it for distributed training (DDP) and shards
#   the data loaders, so each process sees its own part of every epoch,
# - `accelerator.backward(loss)` replaces `loss.backward()`,
# - `accelerator.gather_for_metrics(...)` collects predictions from every process, without the duplicates that
#   padding the last batch adds, so the accuracy is computed on exactly the 360 test images.
#
# `accelerator.log(...)` sends metrics to the dashboard; it is cheap enough to call at every step.

# %%
def evaluate(accelerator, model, loader):
    """Accuracy over the whole (sharded) loader, and the number of images it covered."""
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        for x, y in loader:
            predictions, targets = accelerator.gather_for_metrics((model(x).argmax(dim=1), y))
            correct += (predictions == targets).sum().item()
            seen += len(targets)
    model.train()
    return correct / seen, seen


def train(lr, epochs, batch_size=32):
    accelerator = Accelerator()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=64)
    model, optimizer, train_loader, test_loader = accelerator.prepare(model, optimizer, train_loader, test_loader)

    step = 0
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            accelerator.log({"train/loss": loss.item()}, step=step)
        accuracy, seen = evaluate(accelerator, model, test_loader)
        accelerator.log({"eval/accuracy": accuracy}, step=step)
        accelerator.print(f"epoch {epoch + 1}: test accuracy {accuracy:.3f}")
    return {"accuracy": accuracy, "test_images": seen, "steps": step, "processes": accelerator.num_processes}

# %% [markdown]
# ## Launch it
#
# `num_processes=2` forks two workers. Each runs `train(1e-2, 3)`; they form one process group (gloo on a CPU,
# NCCL on GPUs) and average their gradients at every step. The dashboard under the cell shows each worker's status,
# the progress of the epoch, the loss curve and the main process's output. When the run ends, the cell keeps a
# static picture of it, so the saved notebook still shows what happened.

# %%
result = notebook_launcher(train, args=(1e-2, 3), num_processes=2)

# %% [markdown]
# ## The result came back
#
# `notebook_launcher` returns what `train` returned on rank 0 (the main process). The test accuracy was computed
# on every one of the 360 test images, although each process only evaluated half of them:

# %%
# NBVAL_CHECK_OUTPUT
print(f"trained on {result['processes']} processes for {result['steps']} steps per process")
print(f"evaluated {result['test_images']} test images; accuracy above 90%: {result['accuracy'] > 0.9}")

# %% tags=["metrics"]
{"test_accuracy": round(result["accuracy"], 4), "test_images": result["test_images"], "steps": result["steps"]}

# %% [markdown]
# ## What you did not have to do
#
# - **No clean-up.** When the cell ends, every worker has exited; you can run it again straight away, change the
#   learning rate, or launch another function.
# - **No script.** `train` lives in the notebook and uses the notebook's data.
# - **No guessing when it fails.** If a worker raises, the cell ends with one error naming the rank and showing its
#   traceback, and the other worker is stopped (see notebook 6).
#
# Next: notebook 2 turns a single-device loop into this one, line by line.
