"""Whether a prepared loader runs for training or evaluation, asked of its Accelerator without holding it.

The dashboard names a loader "train" or "eval" from the mode of the Accelerator's prepared models. The Accelerator
holds its prepared loaders; a loader holding the Accelerator back would leave a dropped pair to the garbage
collector, which closes a persistent-workers loader's queues before the loader's worker iterator can tell its
workers to stop (each then waits out torch's 5 s join timeout and is terminated). Hence a weak reference.
"""

from __future__ import annotations

import weakref
from typing import Callable, Protocol

__all__ = ["ModelsOwner", "TrainingProbe"]


class ModelsOwner(Protocol):
    """What the probe asks: the Accelerator's view of its prepared models (a Protocol, so that this module does
    not import the Accelerator)."""

    def _models_training(self) -> bool | None:
        """Whether a prepared model is in training mode (``None`` without one)."""


class TrainingProbe:
    """``owner._models_training`` for a prepared loader, holding ``owner`` weakly.

    A class, not a closure, so that an Accelerator with prepared loaders can still be pickled (accelerate's
    ``test_pickle_accelerator``): pickled, it names the owner, and unpickled it holds it weakly again.

    Args:
        owner: the Accelerator whose models are asked, or ``None`` (the probe then answers ``None``).
    """

    def __init__(self, owner: ModelsOwner | None) -> None:
        self._ref: Callable[[], ModelsOwner | None] = weakref.ref(owner) if owner is not None else (lambda: None)

    def __call__(self) -> bool | None:
        """Whether a prepared model trains (``None`` without one, or once the owner is gone)."""
        owner = self._ref()
        return owner._models_training() if owner is not None else None

    def __reduce__(self) -> tuple[type[TrainingProbe], tuple[ModelsOwner | None]]:
        return TrainingProbe, (self._ref(),)
