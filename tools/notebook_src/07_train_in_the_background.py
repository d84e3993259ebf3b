# %% [markdown]
# # 7. Keep working while it trains
#
# A blocking launch holds the notebook until the run ends. With `block=False` the launch returns at once with a
# **handle**, the dashboard stays under the launching cell and keeps updating, and every other cell runs as usual:
# look at the data, plot, write the evaluation, and evaluate the run's checkpoints as they appear.
#
# The handle gives what the blocking launch would have: `run.status`, `run.wait()`, `run.result()` (rank 0's
# value, or the same `WorkerError` a blocking launch raises), `run.stop()`, the logged values so far in
# `run.metrics`, every rank's output in `run.output`, and `value = await run`.

# %%
import os
import tempfile
import time
from collections import Counter

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, ProjectConfiguration, notebook_launcher, set_seed

workdir = tempfile.mkdtemp(prefix="notebook-accel-07-")  # checkpoints go here

# %% [markdown]
# The digits dataset (in scikit-learn, no download), split into 1,500 images to train on and the rest to evaluate.

# %%
# NBVAL_CHECK_OUTPUT
digits = load_digits()
images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
labels = torch.tensor(digits.target, dtype=torch.long)
train_set = TensorDataset(images[:1500], labels[:1500])
eval_images, eval_labels = images[1500:], labels[1500:]
print(len(train_set), "to train on,", len(eval_labels), "to evaluate")

# %% [markdown]
# ## A training function that checkpoints every epoch
#
# With `ProjectConfiguration(automatic_checkpoint_naming=True)`, each `save_state()` writes the next
# `checkpoints/checkpoint_<n>` folder under `project_dir`, atomically: a folder that exists is complete.

# %%
def make_model():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def train(epochs, project_dir=workdir):
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    )
    set_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step = 0
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            accelerator.log({"train/loss": loss.item()}, step=step)
            time.sleep(0.02)  # a bigger model would take this long per step
        accelerator.save_state()
    return step

# %% [markdown]
# ## Launch it in the background
#
# The cell returns at once; the dashboard below it keeps moving while the next cells run.

# %%
run = notebook_launcher(train, args=(4,), num_processes=2, block=False)
run

# %% [markdown]
# ## Meanwhile: look at the data
#
# This cell runs while the two workers train.

# %%
# NBVAL_CHECK_OUTPUT
counts = Counter(train_set.tensors[1].tolist())
print("images per digit:", dict(sorted(counts.items())))
print("run still going:", run.status in ("running", "finished"))

# %% [markdown]
# ## Evaluate the checkpoints as they appear
#
# Each checkpoint folder holds the model's weights (`pytorch_model.bin`, plain torch). This loop waits for each
# new one and scores it on the held-out images, while training goes on.

# %%
def accuracy(weights_file):
    model = make_model()
    model.load_state_dict(torch.load(weights_file, weights_only=True))
    with torch.no_grad():
        return (model(eval_images).argmax(dim=1) == eval_labels).float().mean().item()


checkpoints = os.path.join(workdir, "checkpoints")
scored = set()
while len(scored) < 4:
    ended = run.done  # read before listing, so a checkpoint written just before the end is still scored
    ready = sorted(os.listdir(checkpoints)) if os.path.isdir(checkpoints) else []
    for name in ready:
        if name.startswith("checkpoint_") and name not in scored:
            scored.add(name)
            print(f"{name}: accuracy {accuracy(os.path.join(checkpoints, name, 'pytorch_model.bin')):.3f}")
    if ended:
        break
    time.sleep(0.2)

# %% [markdown]
# ## The result, and the logged curve
#
# `await run` waits without blocking the kernel; `run.result()` does the same from plain code. `run.metrics` has one
# row per `accelerator.log` call (`pandas.DataFrame(run.metrics)` makes a table of it).

# %%
# NBVAL_CHECK_OUTPUT
steps = await run
print("status:", run.status, "| optimizer steps per process:", steps)
print("logged rows:", len(run.metrics), "| first row's keys:", sorted(run.metrics[0]))

# %% [markdown]
# ## Stopping a background run
#
# The notebook's stop button interrupts the cell that is running, not the background run. Stop a run with
# `run.stop()` (or the **Stop run** button on its dashboard); `run.result()` then raises `RunStoppedError`.

# %%
long_run = notebook_launcher(train, args=(1000, os.path.join(workdir, "long")), num_processes=2, block=False)
time.sleep(3)
long_run.stop()

# %%
# NBVAL_CHECK_OUTPUT
print("status:", long_run.status)

# %%
import shutil

shutil.rmtree(workdir, ignore_errors=True)
