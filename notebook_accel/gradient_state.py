"""The gradient state: the small mutable record shared by one Accelerator's prepared optimizers, schedulers and
loaders: whether gradients sync on this batch, and whether the innermost active loader is on its last batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GradientState"]


@dataclass
class GradientState:
    """Shared by one Accelerator's wrapped objects: sync flag and the active loaders (innermost last).

    Attributes:
        num_steps: gradient accumulation steps.
        sync_with_dataloader: sync on a loader's last batch.
        sync_each_batch: all-reduce every batch even when not stepping.
        sync_gradients: True when this batch's backward syncs and the optimizer steps.
        active_loaders: prepared loaders being iterated, innermost last.
    """

    num_steps: int = 1
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False
    sync_gradients: bool = True
    active_loaders: list[Any] = field(default_factory=list)

    @property
    def end_of_dataloader(self) -> bool:
        """True while the innermost active loader is on its last batch."""
        return bool(self.active_loaders) and self.active_loaders[-1].end_of_dataloader

    @property
    def remainder(self) -> int:
        """Real items in the innermost loader's last global batch (-1: unknown, 0: no padding)."""
        return self.active_loaders[-1].remainder if self.active_loaders else -1

    @property
    def in_dataloader(self) -> bool:
        """True while a prepared loader is being iterated."""
        return bool(self.active_loaders)

    @property
    def active_dataloader(self) -> Any:
        """The innermost prepared loader being iterated, or None outside any (accelerate's name)."""
        return self.active_loaders[-1] if self.active_loaders else None

    @classmethod
    def _reset_state(cls) -> None:
        """accelerate's way to forget its shared gradient state; nothing to forget here.

        Each Accelerator owns its :class:`GradientState`, so a new Accelerator already starts from a fresh one.
        """
