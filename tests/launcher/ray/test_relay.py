"""The relay of a run whose workers cannot reach the kernel, in one process: a worker dials the relay as it would the
kernel, and the kernel's end turns the relay's pulls back into local sockets (the real cluster is in
test_two_nodes.py's relayed case).

What the supervisor relies on: every byte of every stream arrives, in order, as from a direct stream; an end is an
end; a stop signal written on the control stream reaches the worker; strangers without the secret get nothing; and
a relay that fails ends every stream with its reason, not a silence.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("ray", reason="the relay runs as a Ray actor: pip install 'notebook-accel[ray]'")

from notebook_accel.launcher.placement.ray import relay as relay_module  # noqa: E402
from notebook_accel.launcher.placement.remote.dial import connect_back  # noqa: E402
from notebook_accel.launcher.placement.remote.link import send_frame  # noqa: E402
from notebook_accel.launcher.placement.ray.relay import RunRelay  # noqa: E402
from notebook_accel.launcher.placement.ray.relayed import RelayChannel  # noqa: E402

SECRET = b"s" * 32


class _Method:
    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call

    def remote(self, *args: Any) -> Callable[[], Any]:
        """Run the call now, as Ray submits it now; the reference gives its value or raises its error."""
        try:
            value = self.call(*args)
        except Exception as e:  # noqa: BLE001
            error = e

            def failed() -> Any:
                raise error

            return failed
        return lambda: value


class _Actor:
    """The relay as a Ray actor handle: ``actor.method.remote(...)`` gives a reference that :class:`_Ray` resolves."""

    def __init__(self, relay: Any, broken: threading.Event) -> None:
        self.relay = relay
        self.broken = broken

    def __getattr__(self, name: str) -> _Method:
        method = getattr(self.relay, name)

        def call(*args: Any) -> Any:
            if self.broken.is_set():
                raise ConnectionError("Ray Client lost its connection to the cluster")
            return method(*args)

        return _Method(call)


class _Ray:
    def __init__(self) -> None:
        self.killed: list[Any] = []

    def get(self, ref: Callable[[], Any], timeout: float | None = None) -> Any:
        return ref()

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed.append(actor)


@pytest.fixture
def relayed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunRelay, RelayChannel, threading.Event, _Ray]]:
    import ray

    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    monkeypatch.setattr(relay_module, "GATHER_SECONDS", 0.01)
    relay = RunRelay(SECRET, 4, 20.0)
    broken = threading.Event()
    fake = _Ray()
    channel = RelayChannel(fake, _Actor(relay, broken), SECRET)
    yield relay, channel, broken, fake
    channel.end()


def _dial_all(address: tuple[str, int], rank: int = 0) -> dict[bytes, socket.socket]:
    return {kind: connect_back(address, SECRET, rank, kind) for kind in (b"C", b"E", b"O", b"2")}


def _read_until_end(sock: socket.socket, timeout: float = 20.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return data


def test_every_byte_arrives_in_order_an_end_is_an_end_and_a_stop_signal_reaches_the_worker(
        relayed: tuple[RunRelay, RelayChannel, threading.Event, _Ray]) -> None:
    relay, channel, _, fake = relayed
    assert channel.address == relay.address()
    worker: dict[bytes, socket.socket] = {}
    dialling = threading.Thread(target=lambda: worker.update(_dial_all(channel.address)))
    dialling.start()
    kernel = {d.kind: d.sock for d in channel.accept(4, time.monotonic() + 20)}
    dialling.join(timeout=20)
    assert sorted(kernel) == sorted([b"C", b"E", b"O", b"2"])

    output = b"".join(f"line {i}\n".encode() for i in range(20000))  # 208 KiB: many reads and pulls
    worker[b"O"].sendall(output)
    worker[b"O"].shutdown(socket.SHUT_WR)
    worker[b"2"].sendall(b"an error line\n")
    worker[b"2"].close()
    assert _read_until_end(kernel[b"O"]) == output
    assert _read_until_end(kernel[b"2"]) == b"an error line\n"

    send_frame(worker[b"C"], ("beat", None))
    kernel[b"C"].settimeout(20)
    assert kernel[b"C"].recv(64)  # the heartbeat's frame
    kernel[b"C"].send(b"T")  # the stop button, as RayWorkerHandle.send_signal writes it
    worker[b"C"].settimeout(20)
    assert worker[b"C"].recv(16) == b"T"

    kernel[b"C"].close()  # the kernel is done with the rank: the relay closes the worker's end
    assert worker[b"C"].recv(16) == b""
    channel.end()
    assert fake.killed, "the relay actor is killed at the run's end"
    for sock in (*worker.values(), *kernel.values()):
        sock.close()


def test_a_stranger_without_the_secret_gets_nothing_and_does_not_count(
        relayed: tuple[RunRelay, RelayChannel, threading.Event, _Ray]) -> None:
    _, channel, _, _ = relayed
    with pytest.raises(ConnectionError):
        connect_back(channel.address, b"x" * 32, 0, b"O", timeout=5)
    worker: dict[bytes, socket.socket] = {}
    dialling = threading.Thread(target=lambda: worker.update(_dial_all(channel.address, rank=1)))
    dialling.start()
    got = [(d.rank, d.kind) for d in channel.accept(4, time.monotonic() + 20)]
    dialling.join(timeout=20)
    assert sorted(got) == [(1, b"2"), (1, b"C"), (1, b"E"), (1, b"O")]
    for sock in worker.values():
        sock.close()


def test_a_failed_relay_ends_every_stream_and_says_why(
        relayed: tuple[RunRelay, RelayChannel, threading.Event, _Ray]) -> None:
    _, channel, broken, _ = relayed
    worker: dict[bytes, socket.socket] = {}
    dialling = threading.Thread(target=lambda: worker.update(_dial_all(channel.address)))
    dialling.start()
    kernel = {d.kind: d.sock for d in channel.accept(4, time.monotonic() + 20)}
    dialling.join(timeout=20)
    broken.set()
    for kind in (b"E", b"O", b"2", b"C"):
        assert _read_until_end(kernel[kind]) == b"" or kind == b"C"
    assert channel.error is not None and "Ray Client lost its connection" in channel.error
    for sock in (*worker.values(), *kernel.values()):
        sock.close()


def test_workers_that_never_come_fail_the_accept_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    relay = RunRelay(SECRET, 4, 0.5)  # the relay's own deadline passes first
    channel = RelayChannel(_Ray(), _Actor(relay, threading.Event()), SECRET)
    try:
        with pytest.raises(TimeoutError, match="did not reach the relay"):
            list(channel.accept(4, time.monotonic() + 20))
    finally:
        channel.end()


def test_the_watch_ends_the_ranks_with_the_relays_failure_not_a_guess_at_their_nodes() -> None:
    from notebook_accel.launcher.placement.ray.watch import RayWatch
    from tests.launcher.ray.test_parts import _FakeRay, _handle

    handle, theirs = _handle(0, "10.0.0.1", "ref")
    lost: list[str] = []
    watch = RayWatch(_FakeRay([]), [handle], node_timeout=60, relay_error=lambda: lost[0] if lost else None)
    watch.start()
    try:
        lost.append("the relay of this run's streams through the cluster failed (ActorDiedError: gone)")
        theirs.close()  # the relayed streams end with the relay
        assert handle.ended.wait(10)
        assert handle.death_reason is not None and handle.death_reason.startswith("the relay of this run's streams")
        assert "could no longer be seen or stopped" in handle.death_reason and "10.0.0.1" not in handle.death_reason
    finally:
        watch.stop()
        handle.reap()
        if handle.control is not None:
            handle.control.close()


@pytest.mark.parametrize("mode, reaches, client, relayed", [
    ("auto", [True, True], False, False),  # every worker reached the kernel: the direct path
    ("auto", [True, False], False, True),  # one could not: the relay, for every rank
    ("auto", [True, True], True, False),  # a Ray Client kernel the workers reach: direct (the relay started in case)
    ("relay", [None, None], False, True),
    ("direct", [None, None], True, False),
])
def test_the_way_back_is_chosen_once_per_run(monkeypatch: pytest.MonkeyPatch, mode: str, reaches: list[bool | None],
                                             client: bool, relayed: bool) -> None:
    from notebook_accel.cluster import RayCluster
    from notebook_accel.launcher.placement.ray import placement as module
    from notebook_accel.launcher.placement.remote.link import BackChannel

    started: list[str] = []
    killed: list[Any] = []

    class _Channel:
        def __init__(self, ray: Any, actor: Any, secret: bytes, address_timeout: float) -> None:
            self.actor = actor

    monkeypatch.setattr(module, "start_relay", lambda *args: started.append("relay") or "relay-actor")
    monkeypatch.setattr(module, "RelayChannel", _Channel)
    monkeypatch.setattr(module, "is_client", lambda ray: client)
    monkeypatch.setattr(module, "_kill", lambda ray, actor: killed.append(actor))
    monkeypatch.setattr(module.reserve, "kernel_address", lambda ray, cluster: "127.0.0.1")
    placement = module.RayPlacement(RayCluster(back_channel=mode))  # type: ignore[arg-type]
    placement.ray = object()
    probe = placement._open_channels(placement.ray, 2)
    assert (probe is not None) == (mode == "auto")
    assert bool(started) == (mode == "relay" or (mode == "auto" and client))  # started early when likely
    placement._choose_channel([{"reaches": r} for r in reaches])
    try:
        assert isinstance(placement.channel, _Channel if relayed else BackChannel)
        if relayed:
            assert started == ["relay"]  # one relay, started once
        assert killed == (["relay-actor"] if client and not relayed and mode == "auto" else [])  # not needed
    finally:
        if isinstance(placement.channel, BackChannel):
            placement.channel.close()
