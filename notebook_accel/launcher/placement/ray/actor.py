"""The worker's side of a Ray run: one :class:`RankWorker` actor per rank, running the local worker's runtime.

The actor imports torch and the worker runtime once, then forks a child for each run, as the kernel forks its local
workers: the child becomes a worker (its own process group, so the kernel's stop signals reach it and whatever it
starts; death with the actor; fresh random seeds), dials the kernel four times (:mod:`.link`), points fd 1 and 2 at
its output streams as a forked child points them at its pipes, sets its launch environment, and runs the user's
function through the same :func:`~notebook_accel.launcher.child.main.run_and_report`. A daemon thread sends a
heartbeat every ``beat_seconds`` and the child's system sample every ``sample_seconds`` on the control stream, and
obeys the stop signals that come back on it. The actor runs no user code itself, so it can serve the next launch
from the same kernel at once (``RayCluster(keep_warm=...)``, :mod:`.warm`), with nothing of the last run in it.
"""
from __future__ import annotations

import hashlib
import os
import random
import select
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from notebook_accel import channel, environment
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.integrations import add_trainer_callback
from notebook_accel.launcher.child.main import (become_worker, flush_c_stdio, redirect_output, run_and_report,
                                                 survey_kernel)
from notebook_accel.launcher.placement.ray.link import connect_back, send_frame
from notebook_accel.launcher.rendezvous.store import use_keyed_store

__all__ = ["RankSetup", "RankWorker", "SIGNALS", "require_sealing", "WorkerSetupError", "PROBE_SECONDS"]

SIGNALS = {b"T": signal.SIGTERM, b"K": signal.SIGKILL}  # the kernel's stop signals on the control stream
_SETUP_FAILED = 70  # EX_SOFTWARE, as a forked worker's
PROBE_SECONDS = 1.0  # a worker that cannot connect to the kernel within this takes the relay (a route that drops)


@dataclass(frozen=True)
class RankSetup:
    """What one actor needs besides the function: who it is, where the kernel listens, and the run's secret.

    Attributes:
        env: the rank's launch environment (rank, local rank, world, rendezvous on rank 0's node, device).
        kernel: the kernel's back-channel address; ``secret``: the run's 32-byte secret.
        threads: intra-op threads (the CPUs the actor reserved).
        beat_seconds, sample_seconds: heartbeat and system-sample periods.
    """

    env: LaunchEnvironment
    kernel: tuple[str, int]
    secret: bytes
    threads: int
    beat_seconds: float = 0.5
    sample_seconds: float = 1.0


def _interface_of(address: str) -> str | None:
    """The network interface holding ``address`` (gloo binds to it), or ``None``."""
    try:
        import psutil

        for name, addresses in psutil.net_if_addrs().items():
            if any(a.address == address for a in addresses):
                return name
    except Exception:  # noqa: BLE001 - gloo's own choice remains
        return None
    return None


class RankWorker:
    """A Ray actor that runs one rank per run (made remote by :mod:`.placement` with ``ray.remote``)."""

    def __init__(self, gpu: bool = False) -> None:
        """Import what every run needs (torch, its distributed package and DDP, the Accelerator; on a CPU worker
        also ``torch._dynamo``, which the first DDP imports: 1 s and more, as the kernel does before its local forks):
        each run's child is forked with them, so no run imports them again. Nothing here initialises a GPU, which a
        fork would break (``gpu``: the worker has one, so ``torch._dynamo`` is left to the child, as locally)."""
        import importlib

        import notebook_accel.accelerator  # noqa: F401
        from notebook_accel.launcher.kernel.warmup import WARM_MODULES

        for name in WARM_MODULES:
            if gpu and name == "torch._dynamo":
                continue
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a broken optional part of torch: the child imports what it needs
                pass

    def where(self, want_port: bool, probe: tuple[str, int] | None = None) -> dict[str, Any]:
        """Where this actor runs: node address and id, pid, Ray's GPUs, (``want_port``) a free port there, and
        (``probe``: the kernel's listener) whether a connection to the kernel gets through from here within
        :data:`PROBE_SECONDS` (``reaches``; the run's streams go through a relay when one does not)."""
        import ray

        address = ray.util.get_node_ip_address()
        port = 0
        if want_port:
            with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe_port:
                probe_port.bind((address, 0))
                port = int(probe_port.getsockname()[1])
        reaches = None
        if probe is not None:
            try:
                socket.create_connection((probe[0], int(probe[1])), timeout=PROBE_SECONDS).close()
                reaches = True
            except OSError:
                reaches = False
        return {"address": address, "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "gpus": [str(g) for g in ray.get_gpu_ids()], "port": port, "reaches": reaches}

    def run(self, setup: RankSetup, function: Callable[..., Any], args: list[Any]) -> int:
        """Run the rank in a child forked from this actor; return its exit code (negative: the signal that ended
        it). The actor itself runs no user code, so it stays as it started, ready for the next run (warm launches):
        each run's child starts from the same clean state and takes every change it makes with it.

        Raises:
            WorkerSetupError: the child could not set the rank up (the kernel unreachable, a missing package).
        """
        import ray

        values = ray.get(list(args)) if args else []  # the object store delivers each argument once per node
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():  # a forked child could not use the GPU
            raise WorkerSetupError("CUDA was initialised in the Ray actor itself (by a runtime_env hook or a "
                                   "sitecustomize?), so a run forked from it cannot use the GPU; keep CUDA out of "
                                   "the actor's start-up")
        reader, writer = os.pipe()  # the child's set-up error, if any
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(reader)
            _child(setup, function, values, parent, writer)
        os.close(writer)
        with os.fdopen(reader, "rb") as errors:
            _, status = os.waitpid(pid, 0)
            error = errors.read().decode(errors="replace").strip()
        if error:
            raise WorkerSetupError(error)
        return os.waitstatus_to_exitcode(status)


class WorkerSetupError(RuntimeError):
    """A rank's child could not set itself up (its last line says why)."""


def _child(setup: RankSetup, function: Callable[..., Any], values: list[Any], parent: int, errors: int) -> NoReturn:
    """The rank, in a child of the actor: a worker's signals, group and death with its parent, fresh random seeds
    (a fresh process's, not the actor's copy), then connect back, redirect output, run and report; ``os._exit``."""
    code = _SETUP_FAILED
    try:
        become_worker(parent)
        _fresh_seeds()
        code = _run_rank(setup, function, values)
    except BaseException as e:  # noqa: BLE001 - told to the actor, which raises it as the run's error
        try:
            os.write(errors, f"{type(e).__name__}: {e}".encode()[:4000])
        except OSError:
            pass
    finally:
        flush_c_stdio()
        os._exit(code)


def _fresh_seeds() -> None:
    """Python's and NumPy's global generators seeded from the OS, as in a fresh process (a fork copies its
    parent's, so every run of a warm actor would draw the same numbers); torch's stays at its start value, as in
    a fresh process."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run_rank(setup: RankSetup, function: Callable[..., Any], values: list[Any]) -> int:
    """Connect back, redirect output, run ``function(*values)``, report; the exit code."""
    rank = setup.env.rank
    streams = {kind: connect_back(setup.kernel, setup.secret, rank, kind) for kind in (b"C", b"E", b"O", b"2")}
    _Control(streams[b"C"], setup).start()
    events = streams[b"E"]
    redirect_output(streams[b"O"].detach(), streams[b"2"].detach(), survey_kernel())
    setup.env.apply()
    if setup.env.world_size > 1:  # rank 0's node serves torch's env:// store to anyone there: seal what it holds
        require_sealing("this node")
        use_keyed_store(hashlib.sha256(b"notebook-accel ray store" + setup.secret).digest())
    interface = _interface_of(setup.env.master_addr or "") if setup.env.world_size > 1 else None
    if interface is not None and not environment.get("GLOO_SOCKET_IFNAME"):
        environment.set_var("GLOO_SOCKET_IFNAME", interface)
    if not environment.get(environment.OMP_NUM_THREADS):
        environment.set_var(environment.OMP_NUM_THREADS, str(setup.threads))
    torch = sys.modules.get("torch")  # imported by the actor: the variable alone comes too late for its threads
    if torch is not None:
        try:
            torch.set_num_threads(max(1, int(environment.get(environment.OMP_NUM_THREADS) or setup.threads)))
        except ValueError:  # a value OpenMP reads its own way ("4,2"): torch keeps its choice
            pass
    from multiprocessing.connection import Connection

    writer = channel.EventWriter(Connection(events.detach()))
    code = _SETUP_FAILED
    try:
        channel.install(writer)
        add_trainer_callback(in_worker=True)
        code = run_and_report(writer, rank, function, tuple(values))
    finally:
        channel.uninstall()
        writer.close()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the kernel may be gone
                pass
        _end_output()
    return code


def require_sealing(where: str) -> None:
    """Raise ``ImportError`` saying what to install when ``where`` lacks ``cryptography``, which seals a run's
    rendezvous store (checked in the kernel before anything is reserved, and in each actor)."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: F401
    except ImportError as e:
        raise ImportError(f"a Ray run of several workers seals its rendezvous store with the 'cryptography' package, "
                          f"which {where} lacks: pip install 'notebook-accel[ray]' (it brings it) in the kernel and on "
                          "every node, or add 'cryptography' to the RayCluster's runtime_env pip list") from e


def _end_output() -> None:
    """Send end of file on the output streams (fd 1 and 2 are the sockets): the kernel then knows it has it all."""
    for fd in (1, 2):
        try:
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            sock.close()


class _Control(threading.Thread):
    """Heartbeats and samples to the kernel, stop signals from it (a daemon: it ends with the actor)."""

    def __init__(self, sock: socket.socket, setup: RankSetup) -> None:
        super().__init__(name="notebook-accel-control", daemon=True)
        self.sock = sock
        self.setup = setup

    def run(self) -> None:
        """Beat, sample, and obey until the kernel goes away."""
        from notebook_accel.monitor.sampler import SystemSampler

        env = self.setup.env
        try:
            sampler: SystemSampler | None = SystemSampler({env.rank: os.getpid()}, {env.rank: env.device or "cpu"},
                                                          interval=self.setup.sample_seconds)
        except Exception:  # noqa: BLE001 - no figures, but heartbeats still go
            sampler = None
        while True:
            try:
                now = time.monotonic()
                if sampler is not None and sampler.due(now):
                    send_frame(self.sock, ("sample", sampler.sample()))
                else:
                    send_frame(self.sock, ("beat", None))
                ready, _, _ = select.select([self.sock], [], [], self.setup.beat_seconds)
                if ready:
                    data = self.sock.recv(16)
                    if not data:
                        return  # the kernel went away: Ray ends this actor with its owner
                    for byte in data:
                        sig = SIGNALS.get(bytes([byte]))
                        if sig is not None:
                            os.killpg(os.getpgid(0), sig)
            except OSError:
                return
