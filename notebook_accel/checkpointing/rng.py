"""Capture and restore this process's random number generators as plain data.

Covers Python's ``random``, NumPy's global ``np.random``, torch's CPU generator and, when CUDA is available,
every visible CUDA device's generator. The captured state holds only tensors, ints, floats, strings and None,
so it round-trips through ``torch.save`` / ``torch.load(weights_only=True)`` (the NumPy key array and Python's
Mersenne Twister state are stored as int64 tensors).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from notebook_accel.checkpointing.errors import CheckpointError

__all__ = ["capture_rng_state", "restore_rng_state", "check_rng_state"]

_KEYS = ("python", "numpy", "torch", "cuda")


def capture_rng_state() -> dict[str, Any]:
    """The state of every RNG of this process, as weights_only-safe data.

    Returns:
        ``{"python": {...}, "numpy": {...}, "torch": ByteTensor, "cuda": [ByteTensor, ...] or None}``.

    Example:
        >>> state = capture_rng_state()
        >>> a = random.random()
        >>> restore_rng_state(state)
        >>> random.random() == a
        True
    """
    version, internal, gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    cuda: list[torch.Tensor] | None = None
    if torch.cuda.is_available():
        cuda = [t.clone() for t in torch.cuda.get_rng_state_all()]
    return {
        "python": {"version": int(version), "state": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": str(np_kind),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": cuda,
    }


def check_rng_state(state: Any, where: str) -> list[str]:
    """Problems that would stop :func:`restore_rng_state` (checked before anything is modified)."""
    if not isinstance(state, dict) or any(k not in state for k in _KEYS):
        return [f"{where}: not an RNG state (expected keys {list(_KEYS)})"]
    try:  # restore into throw-away generators: every part is proven to load before the real ones change
        py = state["python"]
        if py["gauss"] is not None and not isinstance(py["gauss"], float):  # setstate keeps any object here
            raise TypeError(f"python 'gauss' is {type(py['gauss']).__name__}, expected a float or None")
        random.Random().setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
        npst = state["numpy"]
        np.random.RandomState().set_state((npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"],
                                           npst["has_gauss"], npst["cached_gaussian"]))
        torch.Generator().set_state(state["torch"])
    except Exception as e:  # noqa: BLE001 - any malformed part (wrong types, sizes) is one problem
        return [f"{where}: a part of the RNG state cannot be restored ({type(e).__name__}: {e})"]
    cuda = state["cuda"]
    if cuda is not None and (not isinstance(cuda, list) or not all(
            isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1 for t in cuda)):
        return [f"{where}: the CUDA part is a {type(cuda).__name__}, expected None or a list of 1-D uint8 tensors "
                "(one generator state per device)"]
    if cuda is not None and torch.cuda.is_available() and len(cuda) != torch.cuda.device_count():
        return [
            f"{where}: saved with {len(cuda)} visible CUDA device(s), this process sees {torch.cuda.device_count()}; "
            "set CUDA_VISIBLE_DEVICES as in the saving run."
        ]
    return []


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put every RNG back to ``state`` (from :func:`capture_rng_state`).

    A CUDA state saved on a GPU machine is skipped on a machine without CUDA (the CPU streams are restored).

    Raises:
        CheckpointError: ``state`` is not an RNG state or does not fit this machine's CUDA devices.
    """
    problems = check_rng_state(state, "RNG state")
    if problems:
        raise CheckpointError("; ".join(problems))
    py = state["python"]
    random.setstate((py["version"], tuple(int(x) for x in py["state"].tolist()), py["gauss"]))
    npst = state["numpy"]
    np.random.set_state(
        (npst["kind"], npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"], npst["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
