"""Things kept warm between launches (a Ray run's actors, a Slurm run's job step), by the shape of launch that may
take them, each until a launch takes it or its idle time passes.

A placement keeps what a run leaves with :meth:`Kept.keep`; the next launch of the same shape takes it with
:meth:`Kept.take` (its idle timer stops); a newer run kept for a shape ends the older one; :meth:`Kept.release_all`
ends them all (the placement's public ``release_*`` function, and the interpreter's exit). Ending one is its own
``release()``, always called outside the lock. What a placement does besides (Slurm's pipes, checking a step is still
there) stays in the placement.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["Releasable", "Kept"]


class Releasable(Protocol):
    """What can be kept: it knows how to end itself (gone already must be fine)."""

    def release(self) -> None:
        """End it; called once it is no longer kept."""


T = TypeVar("T", bound=Releasable)


class Kept(Generic[T]):
    """One placement's kept things by shape, each with its idle timer; thread-safe. Every instance is released at
    the interpreter's exit.

    Example:
        >>> class Workers:
        ...     def release(self) -> None:
        ...         print("released")
        >>> kept: Kept[Workers] = Kept()
        >>> kept.keep(("cluster", 2), Workers(), seconds=300)
        >>> kept.take(("cluster", 3)) is None  # another shape
        True
        >>> kept.release_all()
        released
        1
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[Hashable, tuple[T, threading.Timer]] = {}
        atexit.register(self.release_all)

    def keep(self, shape: Hashable, thing: T, seconds: float) -> None:
        """Keep ``thing`` for the next launch of ``shape`` for ``seconds`` (one kept for that shape already ends)."""
        timer = threading.Timer(seconds, self._expire, args=(shape, thing))
        timer.daemon = True
        with self._lock:
            before = self._kept.pop(shape, None)
            self._kept[shape] = (thing, timer)
        if before is not None:
            before[1].cancel()
            before[0].release()
        timer.start()

    def take(self, shape: Hashable) -> T | None:
        """The thing kept for ``shape``, now the caller's and no longer timed (``None``: none kept)."""
        with self._lock:
            taken = self._kept.pop(shape, None)
        if taken is None:
            return None
        taken[1].cancel()
        return taken[0]

    def _expire(self, shape: Hashable, thing: T) -> None:
        """The idle time passed: end ``thing`` unless a launch took it meanwhile."""
        with self._lock:
            current = self._kept.get(shape)
            if current is None or current[0] is not thing:
                return
            del self._kept[shape]
        thing.release()

    def release_all(self) -> int:
        """End everything kept now; how many."""
        with self._lock:
            taken = list(self._kept.values())
            self._kept.clear()
        for thing, timer in taken:
            timer.cancel()
            thing.release()
        return len(taken)

    def kept(self) -> list[T]:
        """What is kept now, oldest shape first."""
        with self._lock:
            return [thing for thing, _ in self._kept.values()]
