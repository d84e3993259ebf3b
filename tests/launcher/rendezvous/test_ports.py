"""Port choice: a free port by binding 0, and a clear refusal of a busy or invalid one."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from notebook_accel.errors import LaunchError
from notebook_accel.launcher import notebook_launcher
from notebook_accel.launcher.rendezvous.ports import check_port_free, free_port
from tests.helpers import child_pids
from tests.launcher.recording import RecordingSink


def test_free_port_can_be_bound() -> None:
    port = free_port()
    check_port_free(port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_busy_port_is_refused_by_number() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} on 127.0.0.1 is already in use.*use_port=None"):
            check_port_free(port)


def test_launch_with_a_busy_port_starts_nothing() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LaunchError, match=str(port)):
            notebook_launcher(print, num_processes=2, use_port=port, dashboard=RecordingSink())
    assert child_pids() == []


@pytest.mark.parametrize("port", [0, 70000, "29500", True, 1.5])
def test_invalid_ports(port: Any) -> None:
    with pytest.raises(LaunchError, match="is not a TCP port"):
        check_port_free(port)


def test_address_of_another_machine_is_not_checked() -> None:
    check_port_free(29500, "192.0.2.1")  # TEST-NET-1: never an address of this machine


def test_master_addr_that_is_not_local_needs_a_port() -> None:
    with pytest.raises(LaunchError, match="not an address of this machine"):
        notebook_launcher(print, num_processes=2, master_addr="192.0.2.1", dashboard=RecordingSink())
