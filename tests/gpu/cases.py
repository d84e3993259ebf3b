"""The GPU suite's cases, each run in a fresh Python process: ``python -m tests.gpu.cases NAME``.

A case prints one line ``RESULT <json>`` that the test in ``test_gpu.py`` reads. Running every case in its own
process keeps the pytest process free of CUDA (a CUDA context there would make every later fork unusable) and
lets a case set ``CUDA_VISIBLE_DEVICES`` before torch is imported, as a user's notebook does.

``NOTEBOOK_ACCEL_GPU_SUITE=cpu`` runs the device-agnostic cases on the CPU instead: a check of the suite's own
plumbing on a machine without a GPU. Real-GPU results come only from a run without it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.gpu.comm_case import ddp_exposed_wait, fp8_eager_notice

ON_CPU = os.environ.get("NOTEBOOK_ACCEL_GPU_SUITE") == "cpu"
ROOT = Path(__file__).resolve().parents[2]
CASES: dict[str, Callable[[], dict[str, Any]]] = {}


def case(function: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Register ``function`` as a case under its name."""
    CASES[function.__name__] = function
    return function


def _launch_options() -> dict[str, Any]:
    """Launcher options that put the run on the GPU (or on the CPU in the plumbing check)."""
    return {"dashboard": False, "use_cpu": True} if ON_CPU else {"dashboard": False}


def _data(n: int = 256) -> Any:
    """A small regression data set, the same in every process."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.randn(16, 1, generator=g))


def _model(dropout: float = 0.0) -> Any:
    """A small MLP, the same initial weights in every process."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(64, 1))


def train_mlp(steps: int = 60) -> dict[str, Any]:
    """An accelerate-style loop; returns the device used and the first and last loss."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator()
    model = _model()
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.Adam(model.parameters(), lr=0.01),
        torch.utils.data.DataLoader(_data(), batch_size=32, shuffle=True))
    losses: list[float] = []
    while len(losses) < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    param = next(model.parameters())
    return {"device": str(param.device), "batch_device": str(x.device), "first": losses[0], "last": losses[-1],
            "pid": os.getpid()}


def _kernel_cuda_state() -> dict[str, Any]:
    """Whether CUDA is initialised in this (the launching) process."""
    from notebook_accel.launcher import preflight

    return {"kernel_cuda_initialized": preflight.cuda_initialized()}


@case
def single_process() -> dict[str, Any]:
    """``num_processes=1``: the function runs in this process on cuda:0."""
    from notebook_accel import notebook_launcher

    result = notebook_launcher(train_mlp, num_processes=1, **_launch_options())
    return {**result, "launcher_pid": os.getpid()}


def _nccl_all_reduce() -> dict[str, Any]:
    """A one-process nccl (gloo on CPU) group: all-reduce a device tensor."""
    import torch
    import torch.distributed as dist

    backend = "gloo" if ON_CPU else "nccl"
    device = torch.device("cpu") if ON_CPU else torch.device("cuda", 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    try:
        t = torch.full((4,), 3.0, device=device)
        dist.all_reduce(t)
        return {"pid": os.getpid(), "backend": dist.get_backend(), "value": t.tolist(), **train_mlp(5)}
    finally:
        dist.destroy_process_group()


@case
def forked_one_process() -> dict[str, Any]:
    """One forked worker (``timeout=`` runs a single process in a fork) forms a 1-process nccl group."""
    from notebook_accel import notebook_launcher

    result = notebook_launcher(_nccl_all_reduce, num_processes=1, timeout=600, **_launch_options())
    return {**result, "launcher_pid": os.getpid(), **_kernel_cuda_state()}


def _return_device_tensor() -> Any:
    """A tensor on the worker's device, returned to the launcher."""
    import torch

    return torch.arange(4, device="cpu" if ON_CPU else "cuda:0") * 2


@case
def cuda_tensor_result() -> dict[str, Any]:
    """A CUDA tensor returned by a forked rank 0 arrives on the CPU and leaves the kernel's CUDA untouched."""
    from notebook_accel import notebook_launcher

    value = notebook_launcher(_return_device_tensor, num_processes=1, timeout=600, **_launch_options())
    return {"device": str(value.device), "value": value.tolist(), **_kernel_cuda_state()}


@case
def fp16_scaler() -> dict[str, Any]:
    """fp16 with a GradScaler: an inf loss skips exactly that step, leaves the weights and halves the scale."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator(mixed_precision="fp16", cpu=ON_CPU)
    model = _model()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    x = torch.randn(8, 16, device=accelerator.device)
    skipped, changed, scales = [], [], []
    for step in range(6):
        before = [p.detach().clone() for p in model.parameters()]
        loss = model(x).pow(2).mean()
        if step == 2:
            loss = loss * float("inf")
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        skipped.append(accelerator.optimizer_step_was_skipped)
        changed.append(any(not torch.equal(a, b) for a, b in zip(before, model.parameters())))
        scales.append(float(optimizer.scaler.get_scale()))
    return {"skipped": skipped, "changed": changed, "scales": scales, "device": str(accelerator.device)}


@case
def bf16_autocast() -> dict[str, Any]:
    """bf16: layers compute in bfloat16 under autocast; the model's output comes back as float32."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator(mixed_precision="bf16", cpu=ON_CPU)
    model = accelerator.prepare(_model())
    inner: list[str] = []
    first = accelerator.unwrap_model(model)[0]
    first.register_forward_hook(lambda _m, _i, out: inner.append(str(out.dtype)))
    out = model(torch.randn(8, 16, device=accelerator.device))
    out.float().sum().backward()
    with accelerator.autocast():
        explicit = first(torch.randn(2, 16, device=accelerator.device))
    return {"inner": inner[0], "output": str(out.dtype), "explicit": str(explicit.dtype),
            "grad": str(first.weight.grad.dtype), "device": str(accelerator.device)}


def _fp8_stack(precision: str, steps: int = 150) -> dict[str, Any]:
    """A Linear stack (four 256-wide layers) regressing a fixed random target; the losses and the float8 layers."""
    import torch

    from notebook_accel import Accelerator, AORecipeKwargs
    from notebook_accel.float8.convert import float8_module_names

    handlers: list[Any] = []
    if ON_CPU and precision == "fp8":  # the plumbing check: torchao's emulation
        from torchao.float8 import Float8LinearConfig

        handlers.append(AORecipeKwargs(config=Float8LinearConfig(emulate=True)))
    accelerator = Accelerator(mixed_precision=precision, cpu=ON_CPU, kwargs_handlers=handlers)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(512, 64, generator=g), torch.randn(64, 16, generator=g) / 8
    x, y = x.to(accelerator.device), torch.tanh(x @ w).to(accelerator.device)
    losses = []
    for i in range(steps):
        batch = slice(128 * (i % 4), 128 * (i % 4 + 1))
        loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return {"losses": losses, "float8": float8_module_names(accelerator.unwrap_model(model)),
            "weight": str(accelerator.unwrap_model(model)[2].weight.dtype)}


@case
def fp8_linear_stack() -> dict[str, Any]:
    """The real fp8 path (torchao's float8 matmuls on an Ada/Hopper GPU) against bf16 on the same stack."""
    import torch

    capability = None if ON_CPU else list(torch.cuda.get_device_capability(0))
    if capability is not None and tuple(capability) < (8, 9):
        return {"skip": f"compute capability {capability}: fp8 needs 8.9 or newer"}
    return {"bf16": _fp8_stack("bf16"), "fp8": _fp8_stack("fp8"), "capability": capability}


@case
def visible_devices() -> dict[str, Any]:
    """Run under the ``CUDA_VISIBLE_DEVICES`` the test set before torch was imported: which GPU is cuda:0?"""
    import torch

    from notebook_accel import notebook_launcher

    result = notebook_launcher(_device_uuid, num_processes=1, **_launch_options())
    return {**result, "count": torch.cuda.device_count()}


def _device_uuid() -> dict[str, Any]:
    """This process's current CUDA device and its UUID (as NVML writes it)."""
    import torch

    from notebook_accel import Accelerator

    accelerator = Accelerator()
    uuid = str(torch.cuda.get_device_properties(accelerator.device).uuid)
    return {"device": str(accelerator.device), "uuid": uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"}


@case
def physical_gpus() -> dict[str, Any]:
    """Every GPU as NVML sees it (no CUDA_VISIBLE_DEVICES), without initialising CUDA."""
    import torch  # imported on purpose: counting must not initialise CUDA even with torch loaded

    from notebook_accel import hardware
    from notebook_accel.launcher import preflight

    gpus = hardware.detect_gpus()
    return {"uuids": [g.uuid for g in gpus], "names": [g.name for g in gpus],
            "visible": hardware.visible_gpu_count(), "bf16": hardware.supports_bf16(gpus),
            "torch_initialized": torch.cuda.is_initialized(), **_kernel_cuda_state()}


@case
def gpu_ids() -> dict[str, Any]:
    """``gpu_ids=[last]`` puts the single worker on that device; an index past the last is refused."""
    from notebook_accel import LaunchError, notebook_launcher
    from notebook_accel import hardware

    last = hardware.visible_gpu_count() - 1
    result = notebook_launcher(train_mlp, args=(3,), num_processes=1, gpu_ids=[last], dashboard=False)
    try:
        notebook_launcher(train_mlp, num_processes=1, gpu_ids=[last + 1], dashboard=False)
        refused = ""
    except LaunchError as e:
        refused = str(e)
    return {"last": last, "device": result["device"], "refused": refused}


class _Run:
    """Dropout, AdamW, a shuffled loader and StepLR on the device: what an exact resume must restore."""

    def __init__(self, seed: int) -> None:
        import torch

        from notebook_accel import Accelerator, set_seed

        torch.use_deterministic_algorithms(True)
        self.acc = Accelerator(cpu=ON_CPU)
        set_seed(seed)
        model = _model(dropout=0.2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
        loader = torch.utils.data.DataLoader(_data(), batch_size=32, shuffle=True)
        self.model, self.optimizer, self.loader, self.scheduler = self.acc.prepare(model, optimizer, loader, scheduler)

    def train(self, max_batches: int | None = None) -> None:
        """What is left of the current epoch, stopping after ``max_batches``."""
        import torch

        for i, (x, y) in enumerate(self.loader):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.acc.backward(loss)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
            if max_batches is not None and i + 1 == max_batches:
                return

    def result(self) -> dict[str, Any]:
        """A digest of the exact weights, and the next random draw on the device."""
        import torch

        weights = torch.cat([p.detach().flatten().double().cpu() for p in self.model.parameters()])
        draw = torch.rand(1, device=self.acc.device).item()
        return {"digest": _digest(weights), "draw": draw, "device": str(self.acc.device),
                "lr": self.optimizer.param_groups[0]["lr"]}


def _digest(t: Any) -> str:
    """A hash of a tensor's exact bytes."""
    import hashlib

    return hashlib.sha256(t.numpy().tobytes()).hexdigest()


@case
def checkpoint_straight() -> dict[str, Any]:
    """Two epochs without interruption."""
    run = _Run(0)
    for _ in range(2):
        run.train()
    return run.result()


@case
def checkpoint_first_part() -> dict[str, Any]:
    """One epoch and three batches, then ``save_state`` into ``$GPU_CASE_FOLDER``."""
    run = _Run(0)
    run.train()
    run.train(max_batches=3)
    return {"path": run.acc.save_state(os.path.join(os.environ["GPU_CASE_FOLDER"], "ckpt"))}


@case
def checkpoint_resumed() -> dict[str, Any]:
    """A new process (another seed) loads the save and finishes the two epochs."""
    run = _Run(999)
    run.acc.load_state(os.path.join(os.environ["GPU_CASE_FOLDER"], "ckpt"))
    while run.loader.epoch < 2:
        run.train()
    return run.result()


case(ddp_exposed_wait)
case(fp8_eager_notice)


def _rank_on_ray() -> dict[str, Any]:
    """One rank placed by Ray: a one-process nccl group (gloo on CPU) on the device Ray gave it, and what Ray set in
    ``CUDA_VISIBLE_DEVICES``."""
    from notebook_accel import Accelerator

    return {**_nccl_all_reduce(), "device": str(Accelerator().device),
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


@case
def ray_one_gpu() -> dict[str, Any]:
    """One rank on a one-node Ray started here with the machine's GPU (``num_gpus=1``): nccl on the GPU Ray gives
    it (``CUDA_VISIBLE_DEVICES`` as Ray sets it); gloo on the CPU in the plumbing check."""
    import ray

    from notebook_accel import RayCluster, notebook_launcher

    ray.init(address="local", num_cpus=2, num_gpus=0 if ON_CPU else 1, include_dashboard=False,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        per_worker = {"CPU": 1} if ON_CPU else {"CPU": 1, "GPU": 1}
        value = notebook_launcher(_rank_on_ray, num_processes=1, dashboard=False,
                                  cluster=RayCluster(resources_per_worker=per_worker))
    finally:
        ray.shutdown()
    return {**value, "launcher_pid": os.getpid(), **_kernel_cuda_state()}


def main(argv: list[str]) -> int:
    """Run the named case and print its result as ``RESULT <json>``."""
    if len(argv) != 1 or argv[0] not in CASES:
        print(f"usage: python -m tests.gpu.cases NAME; NAME is one of {sorted(CASES)}", file=sys.stderr)
        return 2
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    tempfile.tempdir = os.environ.get("GPU_CASE_TMP") or None
    result = CASES[argv[0]]()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
