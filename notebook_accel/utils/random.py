"""Seeding every random number generator a training run uses, and making the processes agree on one state."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import torch

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import shown

__all__ = ["set_seed", "synchronize_rng_states"]


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
        raise TypeError(f"set_seed(seed={shown(seed)}): seed must be an int")
    for flag, value in (("device_specific", device_specific), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise TypeError(f"set_seed({flag}={shown(value)}): pass True or False")
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"set_seed(seed={shown(seed)}): seed must be from -2**63 to 2**64 - 1 (torch's range)")
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


def synchronize_rng_states(rng_types: Sequence[str], generator: torch.Generator | None = None) -> None:
    """Give every process the random state of process 0 for each generator in ``rng_types`` (a collective).

    Args:
        rng_types: any of ``"torch"`` (the CPU generator), ``"cuda"`` (the current CUDA device's generator) and
            ``"generator"`` (``generator``).
        generator: the generator ``"generator"`` names.

    Raises:
        ValueError: an unknown or unsupported type, ``"generator"`` without a generator, ``"cuda"`` without
            CUDA. Checked before anything is exchanged, on every process alike.

    Example:
        >>> synchronize_rng_states(["torch"])   # one process: nothing to exchange
    """
    if isinstance(rng_types, (str, bytes)) or not isinstance(rng_types, (list, tuple)):
        raise TypeError(f"synchronize_rng_states(rng_types={shown(rng_types)}): pass a list such as ['torch'] or "
                        "['torch', 'cuda']")
    kinds = [str(getattr(kind, "value", kind)) for kind in rng_types]
    bad = [kind for kind in kinds if kind not in ("torch", "cuda", "generator")]
    if bad:
        raise ValueError(f"synchronize_rng_states(rng_types=...): cannot synchronize {shown(bad)}; supported types are "
                         "'torch', 'cuda' and 'generator' (this package runs on CPU and CUDA only)")
    if "generator" in kinds and generator is None:
        raise ValueError("synchronize_rng_states: 'generator' needs generator=<the torch.Generator to synchronize>")
    if "cuda" in kinds and not torch.cuda.is_available():
        raise ValueError("synchronize_rng_states: 'cuda' was asked for but CUDA is not available in this process")
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    getters: dict[str, Callable[[], torch.Tensor]] = {
        "torch": torch.get_rng_state, "cuda": torch.cuda.get_rng_state,
        "generator": lambda: generator.get_state(),  # type: ignore[union-attr]
    }
    setters: dict[str, Callable[[torch.Tensor], object]] = {
        "torch": torch.set_rng_state, "cuda": torch.cuda.set_rng_state,
        "generator": lambda state: generator.set_state(state),  # type: ignore[union-attr]
    }
    states = [getters[kind]().cpu() for kind in kinds]
    dist.broadcast_object_list(states, src=0)
    for kind, state in zip(kinds, states):
        setters[kind](state)
