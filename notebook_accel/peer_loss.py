"""Whether a worker's exception only says that *another* rank vanished under it (the backend lost its peer).

Such a failure is a consequence of the real one: the launcher's message puts it after the real failures, and
the dashboard says that rank was ``stopped``, not ``failed``. One definition for both, here at the bottom of the
package, so the kernel-side layers (the dashboard, the launcher) agree.
"""

from __future__ import annotations

__all__ = ["is_peer_loss", "PEER_LOSS_TYPES", "PEER_LOSS_MARKERS"]

PEER_LOSS_TYPES = frozenset({"RuntimeError", "DistBackendError", "DistNetworkError", "DistError"})
PEER_LOSS_MARKERS = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "communicator was aborted",
    "remote worker crashing",
)


def is_peer_loss(exc_type: str, message: str) -> bool:
    """True when an exception of type name ``exc_type`` with ``message`` is the backend's lost-connection error.

    Example:
        >>> is_peer_loss("DistBackendError", "[gloo] Connection closed by peer [127.0.0.1]:4242")
        True
        >>> is_peer_loss("ValueError", "Connection closed by peer")
        False
    """
    return exc_type in PEER_LOSS_TYPES and any(marker in message for marker in PEER_LOSS_MARKERS)
