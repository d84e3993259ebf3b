# %% [markdown]
# # 4. Checkpoint and resume, exactly
#
# Long runs get interrupted: the kernel dies, the laptop sleeps, a worker is killed. `accelerator.save_state()`
# writes the whole training state, and `accelerator.load_state()` puts it back, so that training continues **as
# if nothing had happened**: the weights at the end are bit for bit those of a run that never stopped. This
# notebook checks that claim twice, once resuming at an epoch boundary and once in the middle of an epoch, with a
# shuffled loader, dropout and momentum, which is where resuming usually goes wrong.
#
# A checkpoint holds every prepared model, optimizer, scheduler and gradient scaler, the random number generators
# of **every** rank, the data loaders' epoch, shuffle order and position, and any object you register with
# `accelerator.register_for_checkpointing`.

# %%
import os
import shutil

import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits

from notebook_accel import Accelerator, ProjectConfiguration, notebook_launcher, set_seed

workdir = "tutorial-04-files"  # checkpoints go here, beside the notebook (removed at the end); a relative name
shutil.rmtree(workdir, ignore_errors=True)  # what an interrupted earlier run left
os.makedirs(workdir)

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
# ## One training function for all three runs
#
# `train` can run straight through, stop after `save_at` steps with a checkpoint (as if the kernel had died right
# after saving), or start from a checkpoint. Everything is built from scratch in each run, as it would be after a
# restart. At the end it writes the weights with `accelerator.save_model` (a `model.safetensors` file, as accelerate
# writes) and returns its path.
#
# Two things make the resume exact:
#
# - The prepared loader knows its epoch (`loader.epoch`) and how many batches of it were done. `load_state` puts
#   both back, with the epoch's shuffle order, so the next `for x, y in loader` **continues in the middle of the
#   epoch**, with exactly the batches the uninterrupted run would have seen. (In accelerate you would call
#   `skip_first_batches` here; with notebook-accel, don't: the checkpoint already holds the position.)
# - Anything else the loop needs, here a step counter for the dashboard, goes in an object with `state_dict` /
#   `load_state_dict`, registered with `accelerator.register_for_checkpointing`.

# %%
class StepCounter:
    """Optimizer steps done so far; saved and restored with the checkpoint."""

    def __init__(self):
        self.step = 0

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state):
        self.step = state["step"]


def train(epochs, save_at=None, resume_from=None, weights_dir=None):
    accelerator = Accelerator()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(train_set, batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    counter = StepCounter()
    accelerator.register_for_checkpointing(counter)
    if resume_from is not None:
        accelerator.load_state(resume_from)

    while loader.epoch < epochs:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            counter.step += 1
            accelerator.log({"train/loss": loss.item()}, step=counter.step)
            if counter.step == save_at:
                return accelerator.save_state(os.path.join(workdir, f"stopped_at_step_{save_at}"))
    return accelerator.save_model(model, weights_dir)

# %% [markdown]
# ## The reference: two epochs without stopping

# %%
straight = load_file(
    notebook_launcher(train, args=(2, None, None, os.path.join(workdir, "straight")), num_processes=2)
)

# %% [markdown]
# ## Stop at the epoch boundary, resume
#
# Each process does 29 steps per epoch (1,797 images in batches of 32, shared by two processes). The first run
# stops after 29 steps with a checkpoint; `save_state` returns its folder. The second run builds everything again,
# loads the checkpoint and finishes the second epoch.

# %%
checkpoint = notebook_launcher(train, args=(2, 29), num_processes=2)
sorted(os.listdir(checkpoint))

# %%
weights_file = notebook_launcher(train, args=(2, None, checkpoint, os.path.join(workdir, "resumed")), num_processes=2)
resumed = load_file(weights_file)

# %% [markdown]
# `save_model` wrote a safetensors file: `safetensors.torch.load_file` reads it without notebook-accel (and so do
# `transformers` and accelerate), and it loads into a fresh model. Now the comparison, bit for bit:

# %%
# NBVAL_CHECK_OUTPUT
def bitwise_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


print("resumed at the epoch boundary, bitwise equal to the straight run:", bitwise_equal(resumed, straight))
fresh = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
print(fresh.load_state_dict(resumed))

# %% [markdown]
# ## Stop in the middle of an epoch, resume
#
# Now the first run stops after 40 steps, 11 batches into the second epoch, and the second run continues from there.

# %%
checkpoint = notebook_launcher(train, args=(2, 40), num_processes=2)
weights_file = notebook_launcher(train, args=(2, None, checkpoint, os.path.join(workdir, "resumed")), num_processes=2)
resumed = load_file(weights_file)

# %%
# NBVAL_CHECK_OUTPUT
print("resumed mid-epoch, bitwise equal to the straight run:", bitwise_equal(resumed, straight))

# %% [markdown]
# ## Automatic names, and keeping only the last few
#
# With a `ProjectConfiguration(automatic_checkpoint_naming=True)`, `save_state()` needs no path: checkpoints go to
# `<project_dir>/checkpoints/checkpoint_<n>`, only the newest `total_limit` are kept, and `load_state()` with no
# argument loads the newest **complete** one.
#
# Every save is atomic: it is written to a temporary folder and renamed into place only when every rank has
# finished writing. If the kernel or a worker dies in the middle of a save, the previous checkpoint is intact and
# `load_state()` skips the partial one (see the next section).

# %%
def save_three_times(project_dir):
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    model = nn.Linear(64, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(3):
        accelerator.save_state()
    accelerator.load_state()  # the newest one
    return sorted(os.listdir(os.path.join(project_dir, "checkpoints")))

# %%
kept = notebook_launcher(save_three_times, args=(os.path.join(workdir, "project"),), num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
print(kept)

# %% [markdown]
# ## A crash in the middle of a save
#
# To crash *during* a save on purpose, we register an object whose `state_dict` kills the main process (rank 0,
# the one that writes the shared files) the second time it is saved, halfway through writing `checkpoint_1`:

# %%
class DiesDuringSecondSave:
    """Checkpointed state that kills rank 0 while the second checkpoint is being written."""

    def __init__(self, rank):
        self.rank, self.saves = rank, 0

    def state_dict(self):
        self.saves += 1
        if self.saves == 2 and self.rank == 0:
            os._exit(9)  # like the out-of-memory killer, mid-save
        return {"saves": self.saves}

    def load_state_dict(self, state):
        self.saves = state["saves"]


def save_twice_and_crash(project_dir):
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    model = nn.Linear(64, 10)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.register_for_checkpointing(DiesDuringSecondSave(accelerator.process_index))
    accelerator.save_state()  # checkpoint_0, complete
    accelerator.save_state()  # checkpoint_1: rank 0 dies while writing it


def load_newest(project_dir):
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    accelerator = Accelerator(project_config=config)
    model = nn.Linear(64, 10)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.register_for_checkpointing(DiesDuringSecondSave(accelerator.process_index))
    return os.path.basename(accelerator.load_state())

# %% tags=["raises-exception"]
crash_dir = os.path.join(workdir, "crash")
notebook_launcher(save_twice_and_crash, args=(crash_dir,), num_processes=2)

# %% [markdown]
# The run ended with the dead worker's exit code. On disk, `checkpoint_0` is complete; what was written of
# `checkpoint_1` is in a temporary folder (its name starts with `.tmp`) that was never renamed into place, and
# `load_state()` takes the newest complete checkpoint:

# %%
loaded = notebook_launcher(load_newest, args=(crash_dir,), num_processes=2)

# %%
# NBVAL_CHECK_OUTPUT
checkpoints = os.listdir(os.path.join(crash_dir, "checkpoints"))
print("complete checkpoints:", sorted(name for name in checkpoints if not name.startswith(".")))
print("partial saves left by the crash:", sum(name.startswith(".") for name in checkpoints))
print("load_state() loaded:", loaded)

# %% [markdown]
# ## A checkpoint that does not fit
#
# Loading a checkpoint uses `torch.load(weights_only=True)`, so a checkpoint from elsewhere cannot run code when
# loaded. A checkpoint that does not fit the run (another number of processes, other prepared objects, missing or
# damaged files) is refused with a `CheckpointError` that names what does not match, before anything is changed.
# Here the checkpoint saved by two processes is loaded by one:

# %% tags=["raises-exception"]
notebook_launcher(train, args=(2, None, checkpoint, os.path.join(workdir, "one_process")), num_processes=1)

# %%
shutil.rmtree(workdir)
