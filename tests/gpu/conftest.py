"""Who runs the GPU suite: a machine with an NVIDIA GPU and a CUDA build of torch, else every test skips.

The check never initialises CUDA in the pytest process (NVML through :mod:`notebook_accel.hardware`, and
``torch.version.cuda``, which is a build constant). ``python3 dev.py test-gpu`` sets
``NOTEBOOK_ACCEL_REQUIRE_GPU=1`` so that a missing GPU fails its run instead of skipping quietly, and
``NOTEBOOK_ACCEL_GPU_SUITE=cpu`` (``dev.py test-gpu --cpu``) runs the device-agnostic cases on the CPU as a
check of the suite itself.
"""

from __future__ import annotations

import os

import pytest

from notebook_accel import hardware

ON_CPU = os.environ.get("NOTEBOOK_ACCEL_GPU_SUITE") == "cpu"


def gpu_missing_reason() -> str | None:
    """Why the real-GPU cases cannot run here, or ``None`` when they can."""
    import torch

    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a CPU build; `python3 dev.py test-gpu` runs this suite with a CUDA "
                "build on a GPU machine")
    if hardware.visible_gpu_count() == 0:
        return "no NVIDIA GPU is visible (NVML and nvidia-smi found none, or CUDA_VISIBLE_DEVICES hides them)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip (or, under ``NOTEBOOK_ACCEL_REQUIRE_GPU=1``, fail) the GPU tests when no GPU can run them."""
    here = os.path.dirname(__file__)
    ours = [item for item in items if str(item.path).startswith(here) and not item.get_closest_marker("plumbing")]
    if not ours:
        return
    reason = None if ON_CPU else gpu_missing_reason()
    if reason is not None and os.environ.get("NOTEBOOK_ACCEL_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"the GPU suite was asked for (NOTEBOOK_ACCEL_REQUIRE_GPU=1) but {reason}")
    for item in ours:
        if ON_CPU:
            if item.get_closest_marker("cuda_only"):
                item.add_marker(pytest.mark.skip(reason="needs a real GPU (NOTEBOOK_ACCEL_GPU_SUITE=cpu run)"))
        elif reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's marker."""
    config.addinivalue_line("markers", "cuda_only: needs a real CUDA device even in the CPU plumbing check")
    config.addinivalue_line("markers", "plumbing: checks the GPU suite itself; runs everywhere")
