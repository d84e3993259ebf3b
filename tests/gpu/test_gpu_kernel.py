"""The CUDA-initialised refusal in a real Jupyter kernel, and a launch that works again after a restart.

The kernel forks one GPU worker (``timeout=`` makes a single process run in a fork), then the user touches CUDA
in the kernel (``torch.cuda.init()``), and the next forked launch must be refused with the advice to restart;
after ``restart_kernel`` the same launch works. Skipped without a GPU (see conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kernel.test_launcher_kernel import execute, running_kernel

jupyter_client = pytest.importorskip("jupyter_client")

pytestmark = pytest.mark.cuda_only

SETUP = """
import os
import torch
from notebook_accel import notebook_launcher, CudaInitializedError

def on_gpu():
    import torch.distributed as dist
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    t = torch.ones(2, device="cuda:0")
    dist.all_reduce(t)
    dist.destroy_process_group()
    return (os.getpid(), t.sum().item())
"""
LAUNCH = "pid, total = notebook_launcher(on_gpu, num_processes=1, timeout=300, dashboard=False); (pid != os.getpid(), total)"


@pytest.fixture
def kernel() -> Iterator[tuple[Any, Any]]:
    """A fresh kernel for this test (it is restarted on purpose)."""
    with running_kernel() as (km, kc):
        yield km, kc


@pytest.mark.timeout(600)
def test_refusal_after_cuda_init_and_launch_after_restart(kernel: tuple[Any, Any]) -> None:
    km, kc = kernel
    assert execute(kc, SETUP, timeout=120).status == "ok"
    first = execute(kc, LAUNCH, timeout=300)
    assert first.status == "ok", first.evalue
    assert first.result == "(True, 2.0)"

    assert execute(kc, "torch.cuda.init(); torch.cuda.is_initialized()").result == "True"
    refused = execute(kc, LAUNCH, timeout=120)
    assert refused.status == "error" and refused.ename == "CudaInitializedError"
    assert "Restart the kernel" in refused.evalue

    km.restart_kernel(now=True)
    kc.wait_for_ready(timeout=120)
    assert execute(kc, SETUP, timeout=120).status == "ok"
    again = execute(kc, LAUNCH, timeout=300)
    assert again.status == "ok", again.evalue
    assert again.result == "(True, 2.0)"
    assert execute(kc, "torch.cuda.is_initialized()").result == "False"
