# %% [markdown]
# # 9. One notebook, many machines: run on a Ray cluster
#
# When a run outgrows one machine, the workers must run on several. With `cluster="ray"` the launcher does not
# fork the workers here: it asks a **Ray cluster** to place one worker per rank on its nodes, all reserved at once,
# ships the training function from this notebook to them, and shows the run under the cell as a local run shows
# it: the same dashboard, the same output, the same errors, and rank 0's return value back in the notebook.
#
# A real cluster (KubeRay, Anyscale, Databricks, `ray up` on your own machines) is one argument away. Here we start
# a small Ray on this machine (two CPUs) so that the notebook runs anywhere; what changes on a real cluster is
# shown at the end. Ray is an extra: `pip install 'notebook-accel[ray]'`, on this machine and on every node.

# %%
import ray
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from notebook_accel import Accelerator, RayCluster, notebook_launcher, set_seed

# %% [markdown]
# ## A one-machine Ray
#
# `ray.init()` starts Ray here and joins it. On a cluster you would join the existing one instead, e.g.
# `ray.init(address="ray://head:10001")`, or leave it to the launcher (`RayCluster(address=...)`).

# %%
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
print(f"{len(ray.nodes())} node, {ray.cluster_resources()['CPU']:g} CPUs")

# %% [markdown]
# ## The data and the training function
#
# The same digits and the same kind of function as in the quickstart. The workers are not forked from this kernel
# any more, so what the function uses travels to them: Ray pickles the function **by value** (it was defined in this
# notebook), together with the globals it reads (`train_set` here, 1,437 small images). A large dataset is better
# passed as an argument (it then goes through Ray's object store once per node) or loaded inside the function.

# %%
# NBVAL_CHECK_OUTPUT
digits = load_digits()
features = torch.tensor(digits.data, dtype=torch.float32) / 16.0
labels = torch.tensor(digits.target, dtype=torch.long)
order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
test_set = TensorDataset(features[order[:360]], labels[order[:360]])
train_set = TensorDataset(features[order[360:]], labels[order[360:]])
print(f"{len(train_set)} training images, {len(test_set)} test images")

# %%
def train(lr, epochs, test_set):
    import os

    accelerator = Accelerator()
    set_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    train_loader = DataLoader(train_set, batch_size=32, shuffle=True)
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
        correct = seen = 0
        with torch.no_grad():
            for x, y in test_loader:
                predictions, targets = accelerator.gather_for_metrics((model(x).argmax(dim=1), y))
                correct += (predictions == targets).sum().item()
                seen += len(targets)
        accelerator.print(f"epoch {epoch + 1}: test accuracy {correct / seen:.3f}")
    where = f"local rank {os.environ['LOCAL_RANK']} of {os.environ['LOCAL_WORLD_SIZE']} on its node"
    return {"accuracy": correct / seen, "test_images": seen, "processes": accelerator.num_processes, "where": where}

# %% [markdown]
# ## Launch it on the cluster
#
# `cluster="ray"` uses the cluster this kernel joined. The launcher reserves both workers at once (a Ray placement
# group: all or nothing, so a run never starts half-placed), numbers the ranks node by node (`LOCAL_RANK` is right
# on every node), puts the rendezvous on rank 0's node, and connects each worker back to this kernel over its own
# authenticated streams: that is how the output, the progress, the curves and each node's CPU and memory reach the
# dashboard while it runs. `test_set` goes as an argument, through Ray's object store.

# %%
result = notebook_launcher(train, args=(1e-2, 3, test_set), num_processes=2, cluster="ray")

# %%
# NBVAL_CHECK_OUTPUT
print(f"trained on {result['processes']} workers; {result['where']}")
print(f"evaluated {result['test_images']} test images; accuracy above 90%: {result['accuracy'] > 0.9}")

# %% [markdown]
# ## A run the cluster cannot hold is refused at once
#
# Three workers of one CPU each do not fit two CPUs. The launcher checks before it reserves anything and says what
# the cluster has; a run that fits but finds the CPUs busy waits up to `reserve_timeout` seconds, then says the same.
# The first run's two workers were kept warm for this kernel's next launch of their shape (`RayCluster(keep_warm=300)`,
# in seconds; `release_ray_workers()` frees them at once); a launch of another shape releases them first, so the two
# CPUs show as free.

# %% tags=["raises-exception"]
notebook_launcher(train, args=(1e-2, 1, test_set), num_processes=3, cluster="ray")

# %% [markdown]
# ## On a real cluster
#
# Only the `cluster=` argument changes. Name the cluster, what each worker reserves and how to spread them:
#
# ```python
# from notebook_accel import RayCluster
#
# cluster = RayCluster(address="ray://head:10001",                  # or "auto" on a node of the cluster
#                      resources_per_worker={"GPU": 1, "CPU": 8},    # one GPU each: nccl, Ray's CUDA_VISIBLE_DEVICES
#                      placement="spread",                           # or "pack": as few nodes as possible
#                      node_timeout=15)                              # a silent node fails the run, named, after 15 s
# result = notebook_launcher(train, args=(1e-4, 3, test_set), num_processes=16, cluster=cluster)
# ```
#
# The same can live in the config file (`cluster:` with `kind: ray` and the same keys), and scripts run the same way
# with `notebook-accel launch --cluster ray --num_processes 16 train.py`. Each node needs notebook-accel and the
# libraries the function imports (or a `runtime_env` in `RayCluster`), and the nodes must be able to connect to the
# notebook's machine (the workers dial back to the kernel). A worker that fails ends the run with one `WorkerError`
# naming its rank and node; the stop button, `timeout=` and `run.stop()` end every worker and free the reservation;
# and if this kernel dies, Ray ends its workers with it.

# %%
ray.shutdown()
