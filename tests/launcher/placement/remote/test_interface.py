"""The one "my address on the route toward host X" probe (:func:`...remote.interface.address_toward`), used by
Slurm's login-node allocation, Ray's kernel address, the rank's interface choice and the heartbeat."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from notebook_accel.cluster import RayCluster
from notebook_accel.launcher.placement.ray import reserve
from notebook_accel.launcher.placement.remote import interface
from notebook_accel.launcher.placement.remote.interface import address_toward, interface_toward
from notebook_accel.launcher.placement.slurm import allocation
from notebook_accel.launcher.rendezvous import heartbeat

UNROUTABLE = "255.255.255.255"  # a UDP connect to the broadcast address is refused at once (no SO_BROADCAST)


def test_the_probe_gives_this_machines_address_on_the_route() -> None:
    assert address_toward("127.0.0.1") == "127.0.0.1"
    assert address_toward("127.0.0.1", 6379) == "127.0.0.1"
    assert interface_toward(("127.0.0.1", 9)) == interface.interface_of("127.0.0.1") is not None


def test_no_route_raises_for_the_kernels_address_and_is_none_for_an_interface() -> None:
    with pytest.raises(OSError):
        address_toward(UNROUTABLE)
    assert interface_toward((UNROUTABLE, 9)) is None
    assert heartbeat._own_address(UNROUTABLE, 9) == socket.gethostname()  # the heartbeat falls back to its name


def test_the_placements_ask_the_shared_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int]] = []

    def probe(host: str, port: int = 9) -> str:
        asked.append((host, port))
        return "10.0.0.7"

    assert allocation.address_toward is reserve.address_toward is heartbeat.address_toward is address_toward
    for module in (reserve, heartbeat, interface):
        monkeypatch.setattr(module, "address_toward", probe)
    ray: Any = object()
    assert reserve.kernel_address(ray, RayCluster(address="ray://head.example:10001")) == "10.0.0.7"
    assert heartbeat._own_address("10.0.0.1", 29500) == "10.0.0.7"
    interface_toward(("10.0.0.2", 29400))
    assert asked == [("head.example", 9), ("10.0.0.1", 29500), ("10.0.0.2", 29400)]
