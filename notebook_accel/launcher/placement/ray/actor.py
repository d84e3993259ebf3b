"""The worker's side of a Ray run: one :class:`RankWorker` actor per rank, running the local worker's runtime.

The actor imports torch and the worker runtime once, then forks a child for each run
(:func:`~notebook_accel.launcher.placement.remote.rank.fork_rank`, as a Slurm task forks its rank): the child becomes
a worker, dials the kernel over the back channel and runs the user's function with the local worker's runtime. The
actor runs no user code itself, so it can serve the next launch from the same kernel at once
(``RayCluster(keep_warm=...)``, :mod:`.warm`), with nothing of the last run in it.
"""
from __future__ import annotations

import os
import socket
import sys
from typing import Any, Callable

from notebook_accel.launcher.placement.remote.rank import RankSetup, fork_rank
from notebook_accel.launcher.placement.remote.rank import require_sealing as remote_require_sealing

__all__ = ["RankWorker", "require_sealing", "WorkerSetupError", "PROBE_SECONDS", "SEALING_FIX"]

SEALING_FIX = ("pip install 'notebook-accel[ray]' (it brings it) in the kernel and on every node, or add "
               "'cryptography' to the RayCluster's runtime_env pip list")
PROBE_SECONDS = 1.0  # a worker that cannot connect to the kernel within this takes the relay (a route that drops)


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
        code, error = fork_rank(setup, function, values)
        if error:
            raise WorkerSetupError(error)
        return code


class WorkerSetupError(RuntimeError):
    """A rank's child could not set itself up (its last line says why)."""


def require_sealing(where: str) -> None:
    """:func:`~notebook_accel.launcher.placement.remote.rank.require_sealing` with the Ray placement's fix."""
    remote_require_sealing(where, SEALING_FIX)
