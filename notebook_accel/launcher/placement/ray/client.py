"""Whether this kernel reaches its Ray cluster through Ray Client (``ray://``), and the head it reached.

Such a kernel is not one of the cluster's machines: Ray's own tables are read through the cluster
(:mod:`.leftovers`), the kernel's address towards the cluster is the one on the route to the head (:mod:`.reserve`),
and the run's streams take the relay when the workers cannot dial the kernel (:mod:`.relayed`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["is_client", "client_head"]


def is_client(ray: Any) -> bool:
    """Whether this kernel reaches the cluster through Ray Client (``ray://``): it is then not one of the cluster's
    machines, and often not reachable from them."""
    try:
        from ray.util.client import ray as client

        return bool(client.is_connected())
    except Exception:  # noqa: BLE001 - a Ray without a client
        return False


def client_head() -> str | None:
    """The head's host that this Ray Client kernel is connected to (``None`` when Ray does not say)."""
    try:
        from ray.util.client import ray as client

        target = str(client.get_context().client_worker._conn_str)  # "host:port"
    except Exception:  # noqa: BLE001 - a private detail of Ray Client
        return None
    host = target.rsplit(":", 1)[0].strip("[]")
    return host or None
