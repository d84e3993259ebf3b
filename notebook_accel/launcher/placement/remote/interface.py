"""Which network interface a remote rank's collectives use: the one holding an address (rank 0's, the kernel's
route), so that gloo and nccl talk over the cluster's network and not over whichever interface they find first."""

from __future__ import annotations

import socket

__all__ = ["interface_of", "interface_toward"]


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
        with socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return interface_of(str(probe.getsockname()[0]))
    except OSError:
        return None
