"""Where a prepared DataLoader reports its position: one hook, set by whoever can carry the report.

The loader (:mod:`notebook_accel.data.loader`) only says where it is; how that travels is not its business. In a
launched worker, and in an in-process run, :func:`notebook_accel.channel.install` sets the hook to post a
:class:`~notebook_accel.events.Progress` event on the worker's channel (a deque append); elsewhere (a script,
``torchrun``) there is none, and the loader neither reports nor works out what it would report.
"""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["ProgressHook", "set_hook", "current"]


class ProgressHook(Protocol):
    """Called with a loop's position: the fields of :class:`~notebook_accel.events.Progress` but its time."""

    def __call__(self, rank: int, n: int, total: int | None, desc: str, epoch: int | None,
                 source: Literal["loader", "loop"]) -> None:
        """Report that ``rank``'s loop ``desc`` has done ``n`` of ``total`` items (see ``Progress``)."""


_hook: ProgressHook | None = None  # one per process: a worker's channel is installed once, after the fork


def set_hook(hook: ProgressHook | None) -> None:
    """Make ``hook`` the one loaders call (``None``: nobody listens)."""
    global _hook
    _hook = hook


def current() -> ProgressHook | None:
    """The installed hook, or ``None`` outside a launched run."""
    return _hook
