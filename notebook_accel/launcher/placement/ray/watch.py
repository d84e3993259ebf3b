"""The kernel's watch over a Ray run: the placement-neutral
:class:`~notebook_accel.launcher.placement.remote.watch.RunWatch` with Ray's answers (:class:`RayResults`): a rank's
result is its actor's ``run`` call, Ray's errors for a dead actor say how its process died, and Ray's node table says
whether a silent node is dead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from notebook_accel.launcher.placement.remote.handles import RemoteWorkerHandle
from notebook_accel.launcher.placement.remote.watch import RunWatch

__all__ = ["RayResults", "RayWatch", "RELAYED_RESULT_EVERY"]

RELAYED_RESULT_EVERY = 1.0  # through a relay each Ray call is a round trip from off the cluster: ask once a second


class RayResults:
    """Ray's answers about a run's ranks (``ref``: a rank's ``run`` call)."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray

    def ready(self, refs: list[Any]) -> list[Any]:
        """The calls that returned or raised."""
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        return list(done)

    def result(self, ref: Any) -> int:
        """The call's exit code (raises Ray's error for a dead actor or a failed call)."""
        return int(self.ray.get(ref, timeout=5.0))

    def death(self, handle: RemoteWorkerHandle, error: BaseException) -> str | None:
        """How the actor died, from Ray's error (``None``: a call that failed, not a death)."""
        if type(error).__name__ == "ActorUnavailableError":  # Ray's text: an RPC error and "may or may not"
            return (f"its worker process on node {handle.node} became unreachable (Ray on that node stopped, or the "
                    "process died)")
        if type(error).__name__ in ("ActorDiedError", "RayActorError"):
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            return f"its worker process on node {handle.node} died ({first})"
        return None

    def stream_closed(self, handle: RemoteWorkerHandle) -> str:
        """Ray's words for a stream that closed with no result."""
        return "it was killed, or Ray on that node stopped"

    def node_state(self, handle: RemoteWorkerHandle) -> str:
        """``"; Ray marked the node dead"`` when the cluster says so (else nothing)."""
        for node in self.ray.nodes():
            if node.get("NodeID") == handle.node_id and not node.get("Alive", True):
                return "; Ray marked the node dead"
        return ""


class RayWatch(RunWatch):
    """The watch over a Ray run's ranks (``relay_error``: a relayed run's, :mod:`.relayed`: why its relay failed)."""

    def __init__(self, ray: Any, handles: Sequence[RemoteWorkerHandle], node_timeout: float,
                 relay_error: Callable[[], str | None] | None = None) -> None:
        super().__init__(RayResults(ray), handles, node_timeout, relay_error,
                         result_every=RELAYED_RESULT_EVERY if relay_error is not None else 0.0)
