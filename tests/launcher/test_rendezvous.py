"""The rendezvous store: served by the kernel on master_addr only, and every socket of a local run on loopback."""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from notebook_accel.errors import LaunchError
from notebook_accel.launcher import notebook_launcher, rendezvous
from tests.helpers import free_port
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(90)

_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _decode(address: str) -> tuple[str, int]:
    """``0100007F:1F90`` (little-endian IPv4) or the 32-hex-digit IPv6 form -> (address, port)."""
    host, port = address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        text = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        text = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
    return text, int(port, 16)


def _listening() -> list[tuple[str, str, int]]:
    """(socket inode, address, port) of every listening TCP socket in this process's network namespace."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN:
                found.append((fields[9], *_decode(fields[1])))
    return found


def listening_sockets(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes ``pids`` hold."""
    owners = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    return [(owners[inode], address, port) for inode, address, port in _listening() if inode in owners]


def listening_on_this_host() -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this network namespace (a test's own "host")."""
    return [(address, port) for _, address, port in _listening()]


def report_listeners() -> dict[str, object]:
    """After the group is up (store and gloo connected), list what the kernel and both workers listen on."""
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    pids = [torch.zeros(1, dtype=torch.long) for _ in range(2)]
    dist.all_gather(pids, torch.tensor([os.getpid()]))
    found = listening_sockets([os.getppid(), *(int(p.item()) for p in pids)]) if dist.get_rank() == 0 else []
    dist.barrier()
    dist.destroy_process_group()
    return {"sockets": found, "kernel": os.getppid(), "port": int(os.environ["MASTER_PORT"]),
            "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}


def test_every_socket_of_a_local_run_listens_on_loopback_only() -> None:
    report = notebook_launcher(report_listeners, num_processes=2, dashboard=RecordingSink())
    sockets = report["sockets"]
    assert sockets, "no listening socket was found (the test cannot see the run's sockets)"
    assert {address for _, address, _ in sockets} == {"127.0.0.1"}, sockets
    assert (report["kernel"], "127.0.0.1", report["port"]) in sockets, "the kernel does not serve the store"
    assert report["ifname"] == "lo"


def test_a_string_port_is_accepted_as_accelerate_passes_it() -> None:
    port = free_port()
    report = notebook_launcher(report_listeners, num_processes=2, dashboard=RecordingSink(), use_port=str(port))
    assert report["port"] == port


def test_bind_listener_refuses_a_busy_port() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=f"port {port} on 127.0.0.1 is already in use"):
            rendezvous.bind_listener("127.0.0.1", port)


def test_bind_listener_refuses_an_address_of_another_machine() -> None:
    with pytest.raises(LaunchError, match="not an address of this machine"):
        rendezvous.bind_listener("192.0.2.1", None)  # TEST-NET-1: never assigned


def test_bind_listener_refuses_an_unresolvable_name() -> None:
    with pytest.raises(LaunchError, match="cannot be resolved"):
        rendezvous.bind_listener("no-such-host.invalid", None)


def test_store_server_serves_and_frees_its_port() -> None:
    listener = rendezvous.bind_listener("127.0.0.1", None)
    server = rendezvous.StoreServer(listener, world_size=1, timeout=10)
    port = server.port
    server.start()
    client = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))
    client.set("key", "value")
    assert client.get("key") == b"value"
    del client
    server.close()
    server.close()  # idempotent
    rendezvous.bind_listener("127.0.0.1", port).close()  # the port is free again


def test_worker_variables_keep_a_local_run_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    local = rendezvous.worker_variables("127.0.0.1", 1)
    assert local["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    assert local["GLOO_SOCKET_IFNAME"] == "lo" and local["NCCL_SOCKET_IFNAME"] == "lo"
    several = rendezvous.worker_variables("10.0.0.1", 2)
    assert "GLOO_SOCKET_IFNAME" not in several and several["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    assert "GLOO_SOCKET_IFNAME" not in rendezvous.worker_variables("127.0.0.1", 1)  # the user's choice stays


def _keeps_a_secret(folder: str) -> bool:
    """A worker: rank 0 stores a key and publishes the port; after an outsider had its go, whether the run's
    store holds the key the outsider wrote."""
    dist.init_process_group("gloo")
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        store.set("secret", "run data")
        Path(folder, "port").write_text(os.environ["MASTER_PORT"])
    deadline = time.monotonic() + 60
    while not Path(folder, "probed").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    dist.barrier()
    injected = store.check(["injected"])
    dist.destroy_process_group()
    return injected


def test_another_process_on_the_port_cannot_read_or_inject_the_runs_keys(tmp_path: Path) -> None:
    run = notebook_launcher(_keeps_a_secret, (str(tmp_path),), num_processes=2, dashboard=False, use_cpu=True,
                            block=False)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "port").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port = int((tmp_path / "port").read_text())
        outsider = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10),
                                 wait_for_workers=False)
        outsider.set("probe", "x")  # connected: it can use the store for its own keys
        assert outsider.get("probe") == b"x"
        # the default group's store keeps its keys under "default_pg/0//" (torch 2.13): where an unprefixed run's are
        assert not outsider.check(["default_pg/0//secret"]), "the run's key is readable under its plain name"
        outsider.set("default_pg/0//injected", "evil")
        (tmp_path / "probed").touch()
        assert run.result(timeout=60) is False  # the run does not see the key written under its plain name
    finally:
        (tmp_path / "probed").touch()
        run.wait(timeout=60)


def test_the_store_prefix_never_reaches_the_environment_or_argv(tmp_path: Path) -> None:
    prefixes = {rendezvous.new_store_prefix() for _ in range(3)}
    assert len(prefixes) == 3 and all(len(p) == len("run-") + 32 for p in prefixes)
    out = notebook_launcher(_environment_and_argv, (), num_processes=2, dashboard=False, use_cpu=True)
    assert "run-" not in out, out


def _environment_and_argv() -> str:
    """A worker: its environment and command line as the kernel shows them in /proc."""
    with open(f"/proc/{os.getpid()}/environ", "rb") as f:
        environ = f.read().decode(errors="replace")
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        argv = f.read().decode(errors="replace")
    return environ + argv + " ".join(f"{k}={v}" for k, v in os.environ.items())


_LATE_IMPORT = """
import sys
from notebook_accel.launcher.rendezvous import use_store_prefix
assert "torch" not in sys.modules
use_store_prefix("run-abc")
import torch.distributed
r = sys.modules["torch.distributed.rendezvous"]
print(r._rendezvous_handlers["env"].__name__)
"""


def test_the_prefix_applies_when_the_worker_imports_torch_later() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LATE_IMPORT], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2], check=True)
    assert done.stdout.strip() == "prefixed"
