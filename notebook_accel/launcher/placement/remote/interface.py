"""Which address and network interface this machine uses toward another: the kernel's address as the cluster's
nodes reach it (:func:`address_toward`), and the interface holding an address (rank 0's, the kernel's route), so that
gloo and nccl talk over the cluster's network and not over whichever interface they find first."""

from __future__ import annotations

import socket

__all__ = ["address_toward", "interface_of", "interface_toward"]


def address_toward(host: str, port: int = 9) -> str:
    """This machine's address on its route to ``host`` (no packet is sent: a UDP socket's ``connect`` only asks the
    routing table; ``port`` matters only to policy routing).

    Raises:
        OSError: ``host`` cannot be resolved (``socket.gaierror``) or there is no route to it.

    Example:
        >>> address_toward("127.0.0.1")
        '127.0.0.1'
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def interface_of(address: str) -> str | None:
    """The network interface holding ``address`` (gloo binds to it), or ``None``."""
    try:
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(a.address == address for a in addresses):
                return name
    except Exception:  # noqa: BLE001 - gloo's own choice remains
        return None
    return None


def interface_toward(address: tuple[str, int]) -> str | None:
    """The interface this node reaches ``address`` through (no packet is sent), or ``None``."""
    try:
        return interface_of(address_toward(*address))
    except OSError:
        return None
