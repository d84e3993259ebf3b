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
from notebook_accel.launcher import notebook_launcher
from notebook_accel.launcher.rendezvous import store as rendezvous
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


def listening_sockets(pids: list[int], before: frozenset[str] = frozenset()) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes ``pids`` hold, less those whose inode is in
    ``before`` (sockets the kernel held before the run, which its forked workers inherit: not the run's)."""
    owners: dict[str, int] = {}
    for pid in pids:
        for inode in _socket_inodes(pid) - before:
            owners.setdefault(inode, pid)  # a socket the kernel and a worker share is the kernel's
    return [(owners[inode], address, port) for inode, address, port in _listening() if inode in owners]


def listening_on_this_host() -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this network namespace (a test's own "host")."""
    return [(address, port) for _, address, port in _listening()]


def report_listeners(before: frozenset[str] = frozenset()) -> dict[str, object]:
    """After the group is up (store and gloo connected), list what the kernel and both workers listen on; ``before``:
    the kernel's sockets from before the run (an earlier test's server in this process is not the run's)."""
    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    pids = [torch.zeros(1, dtype=torch.long) for _ in range(2)]
    dist.all_gather(pids, torch.tensor([os.getpid()]))
    found = listening_sockets([os.getppid(), *(int(p.item()) for p in pids)], before) if dist.get_rank() == 0 else []
    dist.barrier()
    dist.destroy_process_group()
    return {"sockets": found, "kernel": os.getppid(), "port": int(os.environ["MASTER_PORT"]),
            "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}


def test_every_socket_of_a_local_run_listens_on_loopback_only() -> None:
    before = frozenset(_socket_inodes(os.getpid()))
    report = notebook_launcher(report_listeners, (before,), num_processes=2, dashboard=RecordingSink())
    sockets = report["sockets"]
    assert sockets, "no listening socket was found (the test cannot see the run's sockets)"
    assert {address for _, address, _ in sockets} == {"127.0.0.1"}, sockets
    # one machine: the workers meet in a private FileStore; the kernel holds the port but serves nothing on it
    assert not [s for s in sockets if s[0] == report["kernel"]], sockets
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


def _keeps_a_secret(folder: str) -> tuple[bool, bytes, float]:
    """A worker: rank 0 stores a key and publishes the port and its store's file; after an outsider had its go,
    whether the run's store holds the key the outsider wrote, the stored key's value and an all-reduce's sum."""
    dist.init_process_group("gloo")
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == 0:
        store.set("secret", "run data")
        underlying = store
        while hasattr(underlying, "underlying_store"):  # the default group's PrefixStores
            underlying = underlying.underlying_store
        Path(folder, "where").write_text(f"{os.environ['MASTER_PORT']} {getattr(underlying, 'path', '')}")
    deadline = time.monotonic() + 60
    while not Path(folder, "probed").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    dist.barrier()
    total = torch.ones(1)
    dist.all_reduce(total)
    injected, value = store.check(["injected"]), store.get("secret")
    dist.destroy_process_group()
    return injected, value, total.item()


_OUTSIDER = """
import datetime, json, os, socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
out = {"uid": os.getuid()}
try:
    import torch.distributed as dist
except ImportError:  # an interpreter without torch: the checkout's venv may be unreadable to this user
    try:  # one machine: the port is held but not served, so no client of any kind gets an answer
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
    except OSError as e:
        out["keys"], out["served"] = [], type(e).__name__
    else:
        out["keys"], out["served"] = None, True  # served: only torch's client could list (and change) its keys
else:
    try:  # one machine: the port is held but not served (the run's keys are in the private folder)
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=3),
                              wait_for_workers=False)
    except Exception as e:
        out["keys"], out["served"] = [], type(e).__name__
    else:
        out["keys"], out["served"] = store.list_keys(), True
        for key in out["keys"]:
            store.set(key, "evil")
        for key in ("default_pg/0//secret", "default_pg/0//injected", "injected"):
            store.set(key, "evil")
try:
    with open(path, "ab") as f:
        f.write(b"evil")
    out["file"] = "written"
except OSError as e:
    out["file"] = type(e).__name__
out["folder"] = os.access(os.path.dirname(path), os.R_OK | os.X_OK)
print(json.dumps(out))
"""


NOBODY = 65534


def _runs_as_nobody(python: str, code: str) -> bool:
    """Whether user nobody can run ``code`` with the interpreter ``python``."""
    import subprocess

    try:
        subprocess.run([python, "-c", code], capture_output=True, timeout=120, user=NOBODY, group=NOBODY, cwd="/",
                       check=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def _outsider_python() -> str | None:
    """An interpreter user nobody can execute, one that imports torch first (this run's, when its folder is readable
    to others; a system one with torch), else any (the checkout, and so its venv and torch, may be private: a clone
    in a 0700 folder). ``None`` when there is none."""
    import shutil
    import sys

    candidates = [sys.executable, os.path.realpath(sys.executable), getattr(sys, "_base_executable", ""),
                  shutil.which("python3") or "", "/usr/bin/python3"]
    found = [c for c in dict.fromkeys(candidates) if c and os.path.exists(c) and _runs_as_nobody(c, "pass")]
    with_torch = [c for c in found if _runs_as_nobody(c, "import torch.distributed")]
    return (with_torch or found or [None])[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the outsider as another user (nobody)")
def test_another_user_cannot_read_or_change_a_local_runs_keys(tmp_path: Path) -> None:
    import json
    import subprocess

    python = _outsider_python()
    if python is None:
        pytest.skip("no Python interpreter that user nobody (uid 65534) can execute: this one lies in a folder only "
                    "its owner can enter, and there is no system python3")
    run = notebook_launcher(_keeps_a_secret, (str(tmp_path),), num_processes=2, dashboard=False, use_cpu=True,
                            block=False)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "where").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        port, path = (tmp_path / "where").read_text().split(" ")
        assert path and oct(os.stat(os.path.dirname(path)).st_mode & 0o777) == "0o700", path
        done = subprocess.run([python, "-c", _OUTSIDER, port, path], capture_output=True, text=True, cwd="/",
                              timeout=60, user=NOBODY, group=NOBODY, check=True)
        seen = json.loads(done.stdout)
        assert seen["uid"] == NOBODY
        assert seen["keys"] is not None, f"the port is served and {python} has no torch to list its keys: {seen}"
        assert not any("secret" in key or key.startswith("run-") for key in seen["keys"]), seen
        assert seen["file"] == "PermissionError" and seen["folder"] is False, seen
        (tmp_path / "probed").touch()
        assert run.result(timeout=60) == (False, b"run data", 2.0)  # nothing injected, nothing changed, still working
    finally:
        (tmp_path / "probed").touch()
        run.wait(timeout=60)
    assert not os.path.exists(os.path.dirname(path)), "the run's store folder outlived the run"


def test_a_worker_rendezvous_refuses_a_missing_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    torch_rendezvous = sys.modules["torch.distributed.rendezvous"]  # the name is shadowed by a function
    monkeypatch.setitem(torch_rendezvous._rendezvous_handlers, "env", torch_rendezvous._rendezvous_handlers["env"])
    rendezvous.use_private_store(str(tmp_path))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK is not set"):
        next(torch_rendezvous.rendezvous("env://"))
    store, rank, world_size = next(torch_rendezvous.rendezvous("env://?rank=1&world_size=2",
                                                              timeout=datetime.timedelta(seconds=3)))
    assert (rank, world_size, type(store).__name__) == (1, 2, "FileStore")
    assert store.path == str(tmp_path / "store") and store.timeout == datetime.timedelta(seconds=3)


def test_the_store_folder_never_reaches_the_environment_or_argv(tmp_path: Path) -> None:
    out = notebook_launcher(_environment_and_argv, (), num_processes=2, dashboard=False, use_cpu=True)
    assert "notebook-accel-store-" not in out, out


def _environment_and_argv() -> str:
    """A worker: its environment and command line as the kernel shows them in /proc."""
    with open(f"/proc/{os.getpid()}/environ", "rb") as f:
        environ = f.read().decode(errors="replace")
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        argv = f.read().decode(errors="replace")
    return environ + argv + " ".join(f"{k}={v}" for k, v in os.environ.items())


_LATE_IMPORT = """
import sys
from notebook_accel.launcher.rendezvous.store import use_private_store
assert "torch" not in sys.modules
use_private_store("/nowhere")
import torch.distributed
r = sys.modules["torch.distributed.rendezvous"]
print(r._rendezvous_handlers["env"].__name__)
"""


def test_the_private_store_applies_when_the_worker_imports_torch_later() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LATE_IMPORT], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3], check=True)
    assert done.stdout.strip() == "private"


def test_a_store_folder_is_removed_whatever_it_holds(tmp_path: Path) -> None:
    new_store_folder, remove_store_folder = rendezvous.new_store_folder, rendezvous.remove_store_folder
    usual = new_store_folder()
    Path(usual, "store").write_bytes(b"keys")
    more = new_store_folder()
    Path(more, "store").write_bytes(b"keys")
    Path(more, "sub").mkdir()
    Path(more, "sub", "file").write_text("x")
    empty = new_store_folder()
    for folder in (usual, more, empty):
        remove_store_folder(folder)
        assert not os.path.exists(folder)
    remove_store_folder(usual)  # gone already
    remove_store_folder(None)
