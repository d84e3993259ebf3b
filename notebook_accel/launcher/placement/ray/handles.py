"""The kernel's handle of one Ray worker: a remote rank's handle
(:class:`~notebook_accel.launcher.placement.remote.handles.RemoteWorkerHandle`) that also holds the rank's actor
(which :meth:`RayPlacement.signal` kills on a hard stop, and which a warm run keeps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle

__all__ = ["RayWorkerHandle"]


@dataclass
class RayWorkerHandle(RemoteWorkerHandle):
    """One rank's actor, as the supervisor sees it (``ref``: its ``run`` call's result; ``actor``: the actor)."""

    actor: Any = None
