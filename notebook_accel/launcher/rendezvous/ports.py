"""The rendezvous port: a free one picked by the OS, or the user's own checked before any fork."""

from __future__ import annotations

import errno
import socket

from notebook_accel.errors import LaunchError

__all__ = ["free_port", "check_port_free"]


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for an address with a colon, else IPv4."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now (bind port 0 and read back what the OS chose).

    Example:
        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    """Raise :class:`LaunchError` when ``port`` cannot be bound on ``host`` (busy, privileged, out of range).

    Args:
        port: the port the user asked for (``use_port=`` or the config's ``main_process_port``).
        host: the rendezvous address; an address of another machine cannot be checked here and is skipped
            (the caller only checks on the node that serves the rendezvous).

    Raises:
        LaunchError: naming the port, why it is unusable, and the fix.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise LaunchError(
            f"use_port={port!r} is not a TCP port; pass an integer from 1024 to 65535, or None to pick a free one"
        )
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are fine to reuse
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                return  # not an address of this machine: another node serves the rendezvous
            why = "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
            raise LaunchError(
                f"port {port} on {host} {why}; pass another use_port=, or use_port=None to pick a free one "
                "(a previous run may still hold it: wait a moment or stop that process)"
            ) from e
