"""A remote rank's own process: forked by whatever holds the rank on its node (a Ray actor, a Slurm task), it becomes
a worker and runs the user's function with the local worker's runtime.

:func:`fork_rank` forks the child and waits for it, as the kernel forks its local workers: the child becomes a
worker (its own process group, so the kernel's stop signals reach it and whatever it starts; death with its parent;
fresh random seeds), dials the kernel four times at once (:mod:`.link`), points fd 1 and 2 at its output streams as
a forked child points them at its pipes, sets its launch environment, and runs the function through the same
:func:`~notebook_accel.launcher.child.main.run_and_report`. Its control stream is served by :mod:`.control`. The
parent runs no user code itself, so it stays as it started (a warm Ray actor serves the next run from it).
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from notebook_accel import channel, environment
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.integrations import add_trainer_callback
from notebook_accel.launcher.child.main import (become_worker, flush_c_stdio, redirect_output, run_and_report,
                                                 survey_kernel)
from notebook_accel.launcher.kernel.fds import shut_down
from notebook_accel.launcher.placement.remote.control import ControlThread
from notebook_accel.launcher.placement.remote.interface import interface_of
from notebook_accel.launcher.placement.remote.dial import connect_all
from notebook_accel.launcher.rendezvous.store import use_keyed_store

__all__ = ["RankSetup", "fork_rank", "require_sealing", "SETUP_FAILED"]

SETUP_FAILED = 70  # EX_SOFTWARE, as a forked worker's


@dataclass(frozen=True)
class RankSetup:
    """What a remote rank needs besides the function: who it is, where the kernel listens, and the run's secret.

    Attributes:
        env: the rank's launch environment (rank, local rank, world, rendezvous on rank 0's node, device).
        kernel: the kernel's back-channel address; ``secret``: the run's 32-byte secret.
        threads: intra-op threads (the CPUs the rank holds).
        beat_seconds, sample_seconds: heartbeat and system-sample periods.
        sealing_fix: what to install when the node lacks ``cryptography`` (the placement's words).
    """

    env: LaunchEnvironment
    kernel: tuple[str, int]
    secret: bytes
    threads: int
    beat_seconds: float = 0.5
    sample_seconds: float = 1.0
    sealing_fix: str = "pip install cryptography"


def fork_rank(setup: RankSetup, function: Callable[..., Any], values: list[Any],
              forked: Callable[[int], None] | None = None) -> tuple[int, str]:
    """Run the rank in a forked child and wait for it; ``forked`` is told the child's pid at once.

    Returns:
        The child's exit code (negative: the signal that ended it), and its set-up error ("" when it ran).
    """
    reader, writer = os.pipe()  # the child's set-up error, if any
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(reader)
        _child(setup, function, values, parent, writer)
    os.close(writer)
    if forked is not None:
        forked(pid)
    with os.fdopen(reader, "rb") as errors:
        _, status = os.waitpid(pid, 0)
        error = errors.read().decode(errors="replace").strip()
    return os.waitstatus_to_exitcode(status), error


def _child(setup: RankSetup, function: Callable[..., Any], values: list[Any], parent: int, errors: int) -> NoReturn:
    """The rank, in a child: a worker's signals, group and death with its parent, fresh random seeds (a fresh
    process's, not the parent's copy), then connect back, redirect output, run and report; ``os._exit``."""
    code = SETUP_FAILED
    try:
        become_worker(parent)
        _fresh_seeds()
        code = _run_rank(setup, function, values)
    except BaseException as e:  # noqa: BLE001 - told to the parent, which makes it the run's error
        try:
            os.write(errors, f"{type(e).__name__}: {e}".encode()[:4000])
        except OSError:
            pass
    finally:
        flush_c_stdio()
        os._exit(code)


def _fresh_seeds() -> None:
    """Python's and NumPy's global generators seeded from the OS, as in a fresh process (a fork copies its
    parent's, so every run of a warm parent would draw the same numbers); torch's stays at its start value, as in
    a fresh process."""
    random.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _run_rank(setup: RankSetup, function: Callable[..., Any], values: list[Any]) -> int:
    """Connect back, redirect output, run ``function(*values)``, report; the exit code."""
    rank = setup.env.rank
    streams = connect_all(setup.kernel, setup.secret, rank, (b"C", b"E", b"O", b"2"))
    ControlThread(streams[b"C"], setup.env, setup.beat_seconds, setup.sample_seconds).start()
    events = streams[b"E"]
    redirect_output(streams[b"O"].detach(), streams[b"2"].detach(), survey_kernel())
    setup.env.apply()
    if setup.env.world_size > 1:  # rank 0's node serves torch's env:// store to anyone there: seal what it holds
        require_sealing("this node", setup.sealing_fix)
        use_keyed_store(hashlib.sha256(b"notebook-accel ray store" + setup.secret).digest())
    interface = interface_of(setup.env.master_addr or "") if setup.env.world_size > 1 else None
    if interface is not None and not environment.get("GLOO_SOCKET_IFNAME"):
        environment.set_var("GLOO_SOCKET_IFNAME", interface)
    if not environment.get(environment.OMP_NUM_THREADS):
        environment.set_var(environment.OMP_NUM_THREADS, str(setup.threads))
    torch = sys.modules.get("torch")  # imported by the parent: the variable alone comes too late for its threads
    if torch is not None:
        try:
            torch.set_num_threads(max(1, int(environment.get(environment.OMP_NUM_THREADS) or setup.threads)))
        except ValueError:  # a value OpenMP reads its own way ("4,2"): torch keeps its choice
            pass
    from multiprocessing.connection import Connection

    writer = channel.EventWriter(Connection(events.detach()))
    code = SETUP_FAILED
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


def require_sealing(where: str, fix: str) -> None:
    """Raise ``ImportError`` saying what to install (``fix``) when ``where`` lacks ``cryptography``, which seals a
    run's rendezvous store (checked in the kernel before anything starts, and in each rank)."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: F401
    except ImportError as e:
        raise ImportError(f"a run of several workers on a cluster seals its rendezvous store with the 'cryptography' "
                          f"package, which {where} lacks: {fix}") from e


def _end_output() -> None:
    """Send end of file on the output streams (fd 1 and 2 are the sockets): the kernel then knows it has it all."""
    for fd in (1, 2):
        shut_down(fd, socket.SHUT_WR)
