"""Seeding every random number generator a training run uses."""

from __future__ import annotations

import random

import numpy as np
import torch

from notebook_accel.environment import LaunchEnvironment

__all__ = ["set_seed"]


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seed Python's ``random``, NumPy, torch and (when initialised or available) CUDA.

    Args:
        seed: the seed, an int >= 0.
        device_specific: add this process's rank, so each process draws differently.
        deterministic: also ask torch for deterministic algorithms (``torch.use_deterministic_algorithms``).

    Raises:
        TypeError: ``seed`` is not an int.

    Example:
        >>> set_seed(0); a = torch.rand(1); set_seed(0); bool(a == torch.rand(1))
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"set_seed(seed={seed!r}): seed must be an int")
    if device_specific:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            seed += torch.distributed.get_rank()
        else:
            seed += LaunchEnvironment.from_environ().rank
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device, lazily
    if deterministic:
        torch.use_deterministic_algorithms(True)
