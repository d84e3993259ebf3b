"""The run's rendezvous store, served by the launching kernel on ``master_addr`` only.

torch's default (``env://``, ``tcp://``) makes rank 0 serve a ``TCPStore`` on *every* interface of the machine,
IPv4 and IPv6, whatever ``MASTER_ADDR`` says: anyone who can reach the machine can list and overwrite the
run's keys. Instead, node 0's kernel binds the port on ``master_addr`` itself before forking (so the port is
also held from the check to the run: no race with another program), serves the store on that socket
(``TCPStore(master_listen_fd=...)``) for the length of the run, and tells every worker to connect to it as
a client, the way ``torchrun``'s agent does (``TORCHELASTIC_USE_AGENT_STORE``). The workers' own
``init_process_group("gloo"/"nccl")`` is unchanged.

torch's ``TCPStore`` has no authentication: any local process (another user's, on a shared GPU server) can
connect to the port, and ``TCPStore.list_keys()`` (torch 2.13) shows any client every key name, so a secret key
prefix would hide nothing. So on one machine the workers do not use the TCP store at all: every worker is a fork
of the launching kernel, and the launcher makes a fresh folder per run that only this user can open (mode 0700,
:func:`new_store_folder`), hands its path to the workers through the fork, and each worker's ``env://``
rendezvous (``init_process_group``) yields a ``FileStore`` in that folder instead of a TCP client
(:func:`use_private_store`). The kernel still serves the (empty) TCP store, which holds the port for the run;
another user can open neither the folder nor the file, so cannot read, write or delete the run's keys.

With several machines the workers of the other nodes are not forks of this kernel and need node 0's TCP store.
There, when every node's launcher has the same secret in ``NOTEBOOK_ACCEL_STORE_SECRET`` (:func:`store_secret`),
each worker's ``env://`` rendezvous and the nodes' heartbeat see the store through a
:class:`~notebook_accel.launcher.rendezvous.keyed_store.KeyedStore` (:func:`use_keyed_store`): key names are keyed
hashes and values are encrypted and authenticated, so an outsider who reaches the port learns nothing from a listing or
a read, and a value it writes is refused. Without the secret a run of several machines is not protected.

On a single machine with a loopback ``master_addr`` the collectives' own sockets stay on loopback too
(``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` set to the loopback interface unless the user set them).
With several machines, node 0 exposes the store port on ``master_addr`` and each node's gloo/nccl opens
ports on the interface that reaches the others (see the README's "Several machines").
"""

from __future__ import annotations

import datetime
import errno
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

from notebook_accel import environment
from notebook_accel.errors import LaunchError

__all__ = ["StoreServer", "bind_listener", "worker_variables", "LOOPBACK_ADDRESSES", "new_store_folder",
           "use_private_store", "remove_store_folder", "store_secret", "use_keyed_store"]

LOOPBACK_ADDRESSES = ("127.0.0.1", "localhost", "::1")
_BACKLOG = 1024
_KEPT: list[Any] = []  # the worker's keyed stores, alive as long as the process (see use_keyed_store)


def _family(host: str) -> socket.AddressFamily:
    """The address family of ``host`` (a literal address, or a name resolved once)."""
    if ":" in host:
        return socket.AF_INET6
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError, ValueError) as e:
        raise LaunchError(
            f"master_addr={host!r} cannot be resolved ({e}); pass this machine's address, e.g. '127.0.0.1' "
            "for a single machine or its address on the network for node 0 of several"
        ) from e


def bind_listener(host: str, port: int | None, port_option: str = "use_port=", listen: bool = True) -> socket.socket:
    """A listening socket on ``host``:``port`` (``None`` or 0: a free port chosen by the OS).

    ``port_option`` is how the caller's user gives the port, named in the busy-port message. ``listen=False``
    only holds the port (a client that connects is refused at once instead of waiting for a server that never
    answers).

    Raises:
        LaunchError: the port is busy or privileged, or ``host`` is not an address of this machine.
    """
    family = _family(host)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers of a last run are fine
        sock.bind((host, port or 0))
        if listen:
            sock.listen(_BACKLOG)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRNOTAVAIL:
            raise LaunchError(
                f"master_addr={host!r} is not an address of this machine ({e.strerror}); node 0 serves the "
                "rendezvous on it: use '127.0.0.1' for a single machine, or node 0's own address on the network"
            ) from e
        why = "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
        raise LaunchError(
            f"port {port} on {host} {why}; pass another {port_option}, or {port_option}"
            f"{'None' if port_option.endswith('=') else '0'} to pick a free one "
            "(a previous run may still hold it: wait a moment or stop that process)"
        ) from e
    return sock


def worker_variables(master_addr: str, num_nodes: int) -> dict[str, str]:
    """Variables that make every worker a client of the kernel's store (and, on one machine with a loopback
    address, keep gloo and nccl on the loopback interface unless the user chose an interface)."""
    out = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"}  # the latter: torch < 2.4
    if num_nodes == 1 and master_addr in LOOPBACK_ADDRESSES:
        loopback = _loopback_interface()
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if loopback is not None and not environment.get(name):
                out[name] = loopback
    return out


@functools.lru_cache(maxsize=1)
def _loopback_interface() -> str | None:
    """The loopback interface's name (``lo`` on Linux), ``None`` where it cannot be told; asked once per process
    (a netlink round trip, a third of a millisecond of every launch otherwise): it does not change."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    for name in ("lo", "lo0"):
        if name in names:
            return name
    return None


class StoreServer:
    """The run's ``TCPStore``, served from the kernel on a socket bound by :func:`bind_listener`.

    Call :meth:`start` after the workers were forked (no store thread exists in the kernel at the fork) and
    :meth:`close` when the run is over; the store owns the socket from :meth:`start` on.

    Args:
        listener: the bound, listening socket.
        world_size: processes in the run.
        timeout: how long a store operation may wait.
        multi_tenant: let a later ``TCPStore(..., multi_tenant=True)`` for the same port in this process use this
            server instead of opening its own (how torchrun's static rendezvous is made to use it).
    """

    def __init__(self, listener: socket.socket, world_size: int, timeout: float = 1800.0,
                 multi_tenant: bool = False) -> None:
        self.listener = listener
        self.world_size = world_size
        self.timeout = timeout
        self.multi_tenant = multi_tenant
        self.host, self.port = listener.getsockname()[:2]
        self._store: Any = None
        self._fd = listener.fileno()

    @property
    def fd(self) -> int:
        """The listening descriptor while it is open, served or not (each forked worker closes its copy at
        once); ``-1`` after :meth:`close`."""
        return self._fd

    def start(self) -> None:
        """Serve the store; from now on it owns the listening socket."""
        from torch.distributed import TCPStore

        self._store = TCPStore(
            self.host, self.port, self.world_size, True, datetime.timedelta(seconds=self.timeout),
            wait_for_workers=False, master_listen_fd=self.listener.detach(), multi_tenant=self.multi_tenant,
        )

    def close(self) -> None:
        """Stop serving and free the port. Idempotent; before :meth:`start`, just closes the socket."""
        self._fd = -1
        if self._store is not None:
            self._store = None  # the server stops and closes its socket when the object goes
        elif self.listener.fileno() >= 0:
            self.listener.close()


def new_store_folder() -> str:
    """A fresh folder for one run's private store, readable and writable by this user only (mode 0700)."""
    return tempfile.mkdtemp(prefix="notebook-accel-store-")


def remove_store_folder(folder: str | None) -> None:
    """Remove a run's store folder (when the run is over); nothing when ``None`` or gone already.

    The usual folder holds the one ``store`` file of the workers' ``FileStore``: two system calls remove it, where
    ``shutil.rmtree`` spends most of a millisecond (the kernel waits for it after the result is known); anything
    else in it falls back to ``rmtree``."""
    if folder is None:
        return
    try:
        os.unlink(os.path.join(folder, "store"))
    except OSError:
        pass
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)


def _required(name: str) -> str:
    """The environment variable ``name``, which the worker's ``env://`` rendezvous needs."""
    value = environment.get(name)
    if not value:
        raise ValueError(f"env:// rendezvous: the environment variable {name} is not set; the launcher sets it in "
                         "every worker: do not remove it before init_process_group")
    return value


def _private_handler(folder: str) -> Callable[..., Iterator[tuple[Any, int, int]]]:
    """An ``env://`` rendezvous handler that yields a ``FileStore`` in ``folder`` (rank and world size as torch's
    own handler reads them: from the URL's query, else ``RANK``/``WORLD_SIZE``)."""
    from torch.distributed import FileStore

    def private(url: str, timeout: datetime.timedelta = datetime.timedelta(minutes=30),
                **_: Any) -> Iterator[tuple[Any, int, int]]:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query))
        rank = int(query.get("rank") or _required("RANK"))
        world_size = int(query.get("world_size") or _required("WORLD_SIZE"))
        store = FileStore(os.path.join(folder, "store"), -1)  # -1: the launcher removes the folder, not torch
        store.set_timeout(timeout)
        yield store, rank, world_size
        raise RuntimeError("env:// rendezvous cannot rendezvous again in a notebook-accel worker")

    return private


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after the module ``name`` is first imported (once)."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """The module's own spec, its loader made to call ``then`` after executing it."""
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, then = loader.exec_module, self.then

        def exec_module(module: ModuleType) -> None:
            execute(module)
            then(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def store_secret() -> bytes | None:
    """The run's shared store secret from ``NOTEBOOK_ACCEL_STORE_SECRET`` (hashed to 32 bytes), ``None`` if unset.

    Raises:
        LaunchError: the variable is set but shorter than 16 characters.
    """
    text = environment.get(environment.STORE_SECRET) or ""
    if not text:
        return None
    if len(text) < 16:
        raise LaunchError(
            f"{environment.STORE_SECRET} has {len(text)} characters; at least 16 are needed (the same value on every "
            "node), e.g. the output of `python -c \"import secrets; print(secrets.token_hex(32))\"`, or unset it")
    from notebook_accel.launcher.rendezvous.keyed_store import aead_class

    aead_class()  # the values are sealed by cryptography: say what to install before anything starts
    return hashlib.sha256(text.encode()).digest()


def _when_rendezvous_imported(install: Callable[[ModuleType], None]) -> None:
    """Run ``install(torch.distributed.rendezvous)`` now if it is imported, else right after its first import (a
    worker that never uses torch never imports it)."""
    name = "torch.distributed.rendezvous"
    module = sys.modules.get(name)
    if module is not None:
        install(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, install))


def use_keyed_store(secret: bytes) -> None:
    """In a worker: every ``env://`` rendezvous yields its store inside a ``KeyedStore`` with ``secret``."""

    def install(module: ModuleType) -> None:
        from notebook_accel.launcher.rendezvous.keyed_store import KeyedStore

        original = module._rendezvous_handlers["env"]

        def keyed(url: str, *args: Any, **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
            for store, rank, world_size in original(url, *args, **kwargs):
                wrapped = KeyedStore(store, secret)
                wrapped.set_timeout(store.timeout)
                _KEPT.append(wrapped)  # torch keeps only the C++ half: without this, the Python methods go
                yield wrapped, rank, world_size

        module._rendezvous_handlers["env"] = keyed

    _when_rendezvous_imported(install)


def use_private_store(folder: str) -> None:
    """In a worker: every ``env://`` rendezvous (``init_process_group``) uses the run's ``FileStore`` in
    ``folder`` (see the module's docstring) instead of the kernel's TCP store."""

    def install(module: ModuleType) -> None:
        module._rendezvous_handlers["env"] = _private_handler(folder)

    _when_rendezvous_imported(install)
